"""Jupyter notebooks: code cells through the same Python migration, IPython syntax kept,
the JSON byte-identical outside the changed source lines, positions in the .ipynb file."""

from __future__ import annotations

import json
from pathlib import Path

from titan_doctor.findings import Status
from titan_doctor.migrate.engine import runner as engine
from titan_doctor.migrate.notebook.ipython import mask as _mask
from titan_doctor.migrate.notebook.nbjson import read_cells

from .helpers import rules

FINETUNE = Path(__file__).parent / "notebooks" / "llama_lora_finetune.ipynb"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def _code(source, outputs=(), count=None, **extra):
    return {
        "cell_type": "code",
        "execution_count": count,
        "id": extra.pop("id", "c"),
        "metadata": extra.pop("metadata", {}),
        "outputs": list(outputs),
        "source": source,
        **extra,
    }


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _nb(cells, **meta) -> dict:
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.11.9", "pygments_lexer": "ipython3"},
            **meta,
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _write(tmp_path, nb: dict, name="train.ipynb", **dump) -> Path:
    """As Jupyter saves: sorted keys, indent 1, UTF-8, a final newline."""
    path = tmp_path / name
    opts = {"indent": 1, "sort_keys": True, "ensure_ascii": False, "separators": (",", ": ")}
    opts.update(dump)
    path.write_text(json.dumps(nb, **opts) + "\n", encoding="utf-8")
    return path


def _run(path: Path):
    return engine.process_file(path, rules(), path.name)


def _sources_swapped_back(new: bytes, old: bytes) -> bytes:
    """`new` with every cell's source value replaced by the original one's raw text."""
    old_text, new_text = old.decode(), new.decode()
    old_cells, new_cells = read_cells(old_text), read_cells(new_text)
    out = new_text
    for o, n in sorted(zip(old_cells, new_cells), key=lambda p: -p[1].value_span[0] if p[1].value_span else 0):
        if n.value_span is None:
            continue
        out = out[: n.value_span[0]] + old_text[o.value_span[0] : o.value_span[1]] + out[n.value_span[1] :]
    return out.encode()


def _realistic() -> dict:
    return _nb(
        [
            {
                "cell_type": "markdown",
                "id": "m1",
                "metadata": {},
                "source": _lines('# Train on the GPU\nUses `torch.cuda` and `device="cuda"`.'),
            },
            _code(_lines("import torch\nimport torch.nn as nn\nfrom torch import cuda as tc"), count=1, id="a"),
            _code(
                _lines("%matplotlib inline\n!nvidia-smi\n%env CUDA_VISIBLE_DEVICES=0,1"),
                count=2,
                id="b",
                outputs=[
                    {"name": "stdout", "output_type": "stream", "text": ["| NVIDIA A100 | CUDA Version: 12.2 |\n"]}
                ],
            ),
            _code(
                _lines(
                    'model = nn.Linear(4, 4).cuda()\nx = torch.randn(2, 4, device="cuda")\n'
                    "%time y = model(x)\ntc.synchronize()"
                ),
                count=3,
                id="c",
                outputs=[
                    {
                        "data": {"image/png": PNG, "text/plain": ["<Figure size 640x480 with 1 Axes>"]},
                        "metadata": {},
                        "output_type": "display_data",
                    },
                    {
                        "data": {"text/plain": ["tensor([[0.1, 0.2]], device='cuda:0')"]},
                        "execution_count": 3,
                        "metadata": {},
                        "output_type": "execute_result",
                    },
                ],
            ),
            _code(_lines("%%bash\nexport NCCL_SOCKET_IFNAME=eth0\npython train.py --device cuda"), id="d"),
            _code(_lines("%%time\nfor _ in range(3):\n    torch.cuda.synchronize()"), id="e"),
            _code(_lines("%%writefile helper.py\nimport torch\nprint(torch.cuda.is_available())\n"), id="f"),
            _code(_lines("%%html\n<b>runs on cuda</b>"), id="g"),
            {"cell_type": "raw", "id": "r", "metadata": {}, "source": ["torch.cuda.synchronize()"]},
            _code([], id="h"),
        ],
        widgets={"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}},
    )


def test_realistic_notebook_cells_migrated_json_otherwise_identical(tmp_path):
    path = _write(tmp_path, _realistic())
    old = path.read_bytes()
    res = _run(path)
    assert res.state == engine.CHANGED, res.findings
    # outside the source values, not one byte differs (outputs, metadata, ids, layout, newline)
    assert _sources_swapped_back(res.new, old) == old
    assert res.new.endswith(b"}\n")
    new = json.loads(res.new)
    src = ["".join(c["source"]) for c in new["cells"]]
    assert src[0] == '# Train on the GPU\nUses `torch.cuda` and `device="cuda"`.'  # markdown kept
    assert src[1] == "import torch\nimport torch_npu\nimport torch.nn as nn\nfrom torch import npu as tc"
    assert src[2] == "%matplotlib inline\n!nvidia-smi\n%env ASCEND_RT_VISIBLE_DEVICES=0,1"
    assert src[3] == (
        'model = nn.Linear(4, 4).npu()\nx = torch.randn(2, 4, device="npu")\n%time y = model(x)\ntc.synchronize()'
    )
    assert src[4] == "%%bash\nexport HCCL_SOCKET_IFNAME=eth0\npython train.py --device npu"
    assert src[5] == "%%time\nfor _ in range(3):\n    torch.npu.synchronize()"
    assert src[6] == (
        "%%writefile helper.py\nimport torch\nprint(torch.npu.is_available())\n"
    )  # its own module, not a program: torch loads torch_npu by itself
    assert src[7] == "%%html\n<b>runs on cuda</b>"
    assert src[8] == "torch.cuda.synchronize()"  # a raw cell is not code
    assert new["cells"][3]["outputs"] == _realistic()["cells"][3]["outputs"]
    by_cell = {}
    for f in res.findings:
        by_cell.setdefault(f.data["cell"], set()).add((f.code, f.status))
    assert by_cell[2] == {("NPU100", Status.FIXED), ("NPU101", Status.FIXED)}
    assert by_cell[3] == {("NPU803", Status.MANUAL), ("NPU301", Status.FIXED)}
    assert by_cell[4] == {("NPU106", Status.FIXED), ("NPU104", Status.FIXED)}
    assert by_cell[5] == {("NPU301", Status.FIXED), ("NPU901", Status.FIXED)}
    assert by_cell[8] == {("NPU005", Status.MANUAL)}
    assert all(f.message.startswith(f"cell {f.data['cell']}: ") for f in res.findings)


def test_positions_point_into_the_ipynb_file(tmp_path):
    path = _write(tmp_path, _realistic())
    res = _run(path)
    lines = path.read_text().splitlines()

    def at(f):
        return lines[f.line - 1][f.col - 1 :]

    found = {(f.code, f.data["cell"]): f for f in res.findings}
    assert at(found["NPU106", 4]).startswith("cuda()")
    assert at(found["NPU104", 4]).startswith('\\"cuda\\"')  # JSON-escaped quote in the file
    assert at(found["NPU301", 3]).startswith("CUDA_VISIBLE_DEVICES")
    assert at(found["NPU101", 6]).startswith("torch.cuda.synchronize")
    assert at(found["NPU803", 3]).startswith("nvidia-smi")
    assert found["NPU104", 4].data["cell_line"] == 2
    # the same finding through the same rule in a .py file has the same cell-relative column
    py = tmp_path / "same.py"
    py.write_text('import torch\nx = torch.randn(2, 4, device="cuda")\n')
    [f104] = [f for f in engine.process_file(py, rules(), "same.py").findings if f.code == "NPU104"]
    assert f104.col == found["NPU104", 4].data["cell_col"]


def test_second_run_changes_nothing(tmp_path):
    path = _write(tmp_path, _realistic())
    path.write_bytes(_run(path).new)
    again = _run(path)
    assert again.state == engine.UNCHANGED
    assert not [f for f in again.findings if f.status is Status.FIXED]


def test_names_resolve_across_cells_and_import_added_once(tmp_path):
    nb = _nb(
        [
            _code(_lines("import torch as th")),
            _code(_lines("x = th.zeros(3).cuda()")),
            _code(_lines("th.cuda.manual_seed(0)")),
        ]
    )
    res = _run(_write(tmp_path, nb))
    src = ["".join(c["source"]) for c in json.loads(res.new)["cells"]]
    assert src == ["import torch as th\nimport torch_npu", "x = th.zeros(3).npu()", "th.npu.manual_seed(0)"]


def test_magics_masked_only_at_logical_line_starts():
    lines = _lines(
        '%load_ext autoreload\ns = """\n%not a magic\n!nor this\n"""\n'
        "x = (a\n     % b)\nfiles = !ls -la\ntorch.cuda?\n!pip install \\\n   flash-attn\n"
        "for i in range(2):\n    %time f()\n"
    )
    masked, magics = _mask(lines, "TOK")
    assert sorted(magics) == [0, 7, 8, 9, 10, 12]
    assert masked[2] == "%not a magic\n" and masked[6] == "     % b)\n"
    assert masked[12] == "    f()  # TOK-12\n"  # %time keeps its statement to migrate
    assert masked[10] == "pass  # TOK-10\n"  # a continuation keeps the magic's indent
    import libcst as cst

    cst.parse_module("".join(masked))


def test_magic_with_cuda_that_cannot_be_migrated_is_reported(tmp_path):
    nb = _nb([_code(_lines("import torch\n%timeit -n 3 torch.cuda.synchronize()"))])
    res = _run(_write(tmp_path, nb))
    [f] = [f for f in res.findings if f.code == "NPU005"]
    assert f.status is Status.MANUAL and f.data["cell_line"] == 2
    assert "magic" in f.message


def test_cell_that_does_not_parse_is_reported_and_the_rest_migrated(tmp_path):
    nb = _nb(
        [_code(_lines("import torch")), _code(_lines("def f(:\n    pass")), _code(_lines("torch.cuda.synchronize()"))]
    )
    res = _run(_write(tmp_path, nb))
    assert res.state == engine.CHANGED
    [bad] = [f for f in res.findings if f.code == "NPU001"]
    assert (bad.status, bad.data["cell"]) == (Status.FAIL, 2)
    assert bad.data["cell_line"] == 2  # where libcst names the error in `def f(:\n    pass`
    assert "".join(json.loads(res.new)["cells"][2]["source"]) == "torch.npu.synchronize()"
    assert "".join(json.loads(res.new)["cells"][1]["source"]) == "def f(:\n    pass"


def test_string_sources_and_ascii_escaped_files_keep_their_style(tmp_path):
    nb = _nb([_code("import torch\n# café\nx = torch.ones(1).cuda()")])
    path = _write(tmp_path, nb, ensure_ascii=True)
    old = path.read_bytes()
    res = _run(path)
    assert b"\\u00e9" in res.new and "é".encode() not in res.new
    assert (
        json.loads(res.new)["cells"][0]["source"]
        == "import torch\nimport torch_npu\n# caf\u00e9\nx = torch.ones(1).npu()"
    )
    assert _sources_swapped_back(res.new, old) == old


def test_compact_and_crlf_json_layout_is_kept(tmp_path):
    nb = _nb([_code(["import torch\n", "torch.cuda.synchronize()"])])
    path = tmp_path / "c.ipynb"
    path.write_bytes(json.dumps(nb).replace("], ", "],\r\n").encode())
    old = path.read_bytes()
    res = _run(path)
    assert res.state == engine.CHANGED
    assert _sources_swapped_back(res.new, old) == old
    assert json.loads(res.new)["cells"][0]["source"] == [
        "import torch\n",
        "import torch_npu\n",
        "torch.npu.synchronize()",
    ]


def test_invalid_json_is_a_parse_failure_with_position(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text('{\n "cells": [\n  {"source": "torch.cuda.x()",}\n ]\n}\n')
    res = _run(path)
    assert res.state == engine.FAILED and res.new == path.read_bytes()
    [f] = res.findings
    assert (f.code, f.status, f.line) == ("NPU001", Status.FAIL, 3)
    assert "not valid JSON" in f.message


def test_old_format_and_other_kernels_are_reported_not_copied_silently(tmp_path):
    v3 = {"nbformat": 3, "worksheets": [{"cells": [{"cell_type": "code", "input": "x.cuda()"}]}], "metadata": {}}
    res = _run(_write(tmp_path, v3, "old.ipynb"))
    assert [(f.code, f.status) for f in res.findings] == [("NPU005", Status.MANUAL)]
    assert "nbformat 3" in res.findings[0].message
    r_nb = _nb(
        [_code(_lines('x <- torch_randn(2, device = "cuda")'))],
        kernelspec={"language": "R", "name": "ir", "display_name": "R"},
    )
    res = _run(_write(tmp_path, r_nb, "r.ipynb"))
    assert res.state == engine.UNCHANGED
    assert [(f.code, f.status) for f in res.findings] == [("NPU005", Status.MANUAL)]


def test_notebook_without_markers_is_not_parsed(tmp_path):
    nb = _nb([_code(_lines("print('hello')"))])
    path = _write(tmp_path, nb)
    res = _run(path)
    assert (res.state, res.findings, res.new) == (engine.UNCHANGED, [], path.read_bytes())


def _finetune(tmp_path):
    path = tmp_path / FINETUNE.name
    path.write_bytes(FINETUNE.read_bytes())
    return path, _run(path)


def test_fine_tuning_notebook_cells_migrated_and_the_rest_byte_identical(tmp_path):
    """notebooks/llama_lora_finetune.ipynb (see notebooks/README.md): the code cells move to
    the NPU, the magics stay, outputs / metadata / layout are not touched by one byte."""
    path, res = _finetune(tmp_path)
    old = path.read_bytes()
    assert res.state == engine.CHANGED, res.findings
    assert _sources_swapped_back(res.new, old) == old
    assert res.new.startswith(b'{\n "cells": [\n  {\n   "cell_type": "markdown"')  # indent 1 kept
    before, after = json.loads(old), json.loads(res.new)
    src = {c["id"]: "".join(c["source"]) for c in after["cells"]}
    was = {c["id"]: "".join(c["source"]) for c in before["cells"]}
    changed = {k for k in src if src[k] != was[k]}
    assert changed == {"0b7e9f12", "9e31f6b0", "7c15e9d3", "d7b4a915", "f2e6c3a8", "0d4a7b9c", "4a8e1f5b"}
    assert src["a81d3c47"].startswith("%pip install")  # nothing put before %pip
    assert "import torch\nimport torch_npu\nfrom torch.utils.data" in src["0b7e9f12"]
    assert 'os.environ["PYTORCH_NPU_ALLOC_CONF"]' in src["0b7e9f12"]
    assert src["c4d2e8a1"] == "!nvidia-smi"  # reported, not rewritten
    assert src["9e31f6b0"].splitlines()[0] == 'device = "npu" if torch.npu.is_available() else "cpu"'
    assert "get_peft_model(model, lora).npu()" in src["7c15e9d3"]
    assert src["d7b4a915"].startswith("%%time\n") and "torch.cuda" not in src["d7b4a915"]
    assert 'device_type="npu"' in src["d7b4a915"]
    assert '.to("npu:0")' in src["f2e6c3a8"]
    assert src["0d4a7b9c"].splitlines()[1] == "torch.npu.empty_cache()"
    assert src["4a8e1f5b"] == (
        "%%bash\nexport ASCEND_GLOBAL_LOG_LEVEL=2\nexport HCCL_BUFFSIZE=8\n"
        "torchrun --nproc_per_node=8 finetune_lora.py --device npu "
        "--dist-backend hccl --bf16"
    )
    # outputs are what the CUDA run printed: kept as they were, every kind of them
    kinds = {o["output_type"] for c in after["cells"] for o in c.get("outputs", [])}
    assert kinds == {"stream", "execute_result", "display_data", "error"}
    assert [c.get("outputs") for c in after["cells"]] == [c.get("outputs") for c in before["cells"]]
    assert [c.get("execution_count") for c in after["cells"]] == [c.get("execution_count") for c in before["cells"]]
    assert after["metadata"] == before["metadata"]
    by_cell = {}
    for f in res.findings:
        by_cell.setdefault(f.data["cell"], set()).add((f.code, f.status))
    assert by_cell == {
        2: {("NPU804", Status.MANUAL)},  # %pip install ... bitsandbytes: a CUDA build on PyPI
        3: {("NPU100", Status.FIXED), ("NPU301", Status.FIXED)},
        4: {("NPU803", Status.MANUAL)},
        5: {("NPU109", Status.FIXED), ("NPU101", Status.FIXED)},
        7: {("NPU106", Status.FIXED)},
        10: {("NPU101", Status.FIXED), ("NPU401", Status.FIXED)},
        13: {("NPU104", Status.FIXED)},
        14: {("NPU101", Status.FIXED)},
        17: {("NPU301", Status.FIXED), ("NPU901", Status.FIXED), ("NPU802", Status.FIXED)},
    }


def test_fine_tuning_notebook_positions_and_second_run(tmp_path):
    path, res = _finetune(tmp_path)
    lines = path.read_text().splitlines()

    def at(f):
        return lines[f.line - 1][f.col - 1 :]

    found = {(f.code, f.data["cell"], f.data["cell_line"]): f for f in res.findings}
    # the import goes in after `import torch`: the finding names the input line it precedes
    assert at(found["NPU100", 3, 6]).startswith("from torch.utils.data import DataLoader")
    assert at(found["NPU803", 4, 1]).startswith("nvidia-smi")
    assert at(found["NPU109", 5, 1]).startswith('\\"cuda\\"')
    assert at(found["NPU106", 7, 7]).startswith("cuda()")
    assert at(found["NPU101", 14, 2]).startswith("torch.cuda.empty_cache")
    assert at(found["NPU301", 17, 3]).startswith("NCCL_BUFFSIZE=8388608")
    path.write_bytes(res.new)
    again = _run(path)
    assert again.state == engine.UNCHANGED
    assert [(f.code, f.status) for f in again.findings] == [("NPU804", Status.MANUAL), ("NPU803", Status.MANUAL)]
