"""Engine safety: untouched bytes, unparseable or undecodable input, output re-parse,
parallel runs, the input-line convention of findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from titan_doctor.findings import Status
from titan_doctor.migrate.engine import runner as engine

from .helpers import rules


def _process(tmp_path, name: str, data: bytes, torch_npu_import: str = "scripts"):
    path = tmp_path / name
    path.write_bytes(data)
    return engine.process_file(path, rules(), name, torch_npu_import=torch_npu_import)


def test_file_without_markers_is_not_parsed_and_stays_identical(tmp_path):
    data = b"def f(x):\n    return x  # nothing here\n"
    res = _process(tmp_path, "plain.py", data)
    assert (res.state, res.new, res.findings) == (engine.UNCHANGED, data, [])


def test_marker_without_change_is_byte_identical(tmp_path):
    data = b"# -*- coding: latin-1 -*-\r\nname = 'caf\xe9'\r\n# talks about cuda in a comment\r\n"
    res = _process(tmp_path, "latin.py", data)
    assert res.state == engine.UNCHANGED
    assert res.new == data


def test_crlf_and_encoding_kept_when_changed(tmp_path):
    data = b"# -*- coding: latin-1 -*-\r\nimport torch\r\ns = 'caf\xe9'\r\ntorch.cuda.synchronize()\r\n"
    res = _process(tmp_path, "crlf.py", data, torch_npu_import="always")
    assert res.state == engine.CHANGED
    assert res.new == (
        b"# -*- coding: latin-1 -*-\r\nimport torch\r\nimport torch_npu\r\ns = 'caf\xe9'\r\ntorch.npu.synchronize()\r\n"
    )


def test_unparseable_file_is_reported_and_untouched(tmp_path):
    data = b"import torch\ntorch.cuda.synchronize(\n"
    res = _process(tmp_path, "broken.py", data)
    assert res.state == engine.FAILED
    assert res.new == data
    [f] = res.findings
    assert (f.code, f.status) == ("NPU001", Status.FAIL)
    assert "does not parse" in f.message


def test_output_that_would_not_parse_is_not_written(tmp_path, monkeypatch):
    def bad(data, rules, path, suppressed=None, place=None, kept=None):
        return data + b"\n)(\n", []

    monkeypatch.setattr(engine, "migrate_python", bad)
    data = b"import torch\ntorch.cuda.synchronize()\n"
    res = _process(tmp_path, "x.py", data)
    assert res.state == engine.FAILED
    assert res.findings[0].code == "NPU002"
    assert (tmp_path / "x.py").read_bytes() == data


def test_cuda_source_file_reported(tmp_path):
    res = _process(tmp_path, "kernel.cu", b"__global__ void k() {}\n")
    assert res.state == engine.UNCHANGED
    assert [(f.code, f.status) for f in res.findings] == [("NPU706", Status.MANUAL)]


@pytest.mark.parametrize(
    "name, data, where",
    [
        ("run.sh", b"export CUDA_VISIBLE_DEVICES=0 # caf\xe9\n", (1, 36)),
        ("cfg.yaml", b"a: 1\nbackend: nccl  \xff\n", (2, 16)),
        ("train.py", b"import torch\ns = 'caf\xe9'\ntorch.cuda.synchronize()\n", (2, 9)),
        ("nb.ipynb", b'{"cells": [{"source": "x.cuda() \xe9"}]}', (1, 33)),
    ],
)
def test_undecodable_file_is_a_failed_finding_with_its_position(tmp_path, name, data, where):
    res = _process(tmp_path, name, data)
    assert res.state == engine.FAILED and res.new == data
    [f] = res.findings
    assert (f.code, f.status, (f.line, f.col)) == ("NPU004", Status.FAIL, where)
    assert "cannot decode as utf-8" in f.message and "convert" in f.message


def test_latin1_python_with_its_cookie_is_read(tmp_path):
    data = b"# -*- coding: latin-1 -*-\nimport torch\ns = 'caf\xe9'\ntorch.cuda.synchronize()\n"
    res = _process(tmp_path, "latin.py", data)
    assert res.state == engine.CHANGED
    assert b"torch.npu.synchronize()" in res.new and b"'caf\xe9'" in res.new


@pytest.mark.parametrize(
    "data",
    [
        "export CUDA_VISIBLE_DEVICES=0\n".encode("utf-16"),  # with a BOM
        "export CUDA_VISIBLE_DEVICES=0\n".encode("utf-16-le"),  # without: NUL bytes
    ],
)
def test_wide_or_binary_text_file_is_reported_not_skipped_silently(tmp_path, data):
    res = _process(tmp_path, "run.sh", data)
    assert res.state == engine.FAILED
    assert [(f.code, f.status) for f in res.findings] == [("NPU004", Status.FAIL)]
    assert "UTF-16" in res.findings[0].message


def test_non_utf8_file_without_markers_is_unchanged(tmp_path):
    res = _process(tmp_path, "run.sh", b"echo caf\xe9\n")
    assert (res.state, res.findings) == (engine.UNCHANGED, [])


def test_json_output_is_parsed_again(tmp_path, monkeypatch):
    data = b'{"device": "cuda", "backend": "nccl"}\n'
    res = _process(tmp_path, "train.json", data)
    assert res.state == engine.CHANGED
    assert json.loads(res.new) == {"device": "npu", "backend": "hccl"}
    monkeypatch.setattr(engine, "migrate_text", lambda d, r, p, suppressed=None: (d[:-3], []))
    res = _process(tmp_path, "train.json", data)
    assert res.state == engine.FAILED and res.findings[0].code == "NPU002"
    assert "would not parse as JSON" in res.findings[0].message


def test_toml_device_and_backend_keys_rewritten_and_parsed_again(tmp_path):
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    data = b'[training]\ndevice = "cuda:0"\ndevice_map = "cuda"\n[comm]\nbackend = "nccl"\n'
    res = _process(tmp_path, "job.toml", data)
    assert tomllib.loads(res.new.decode()) == {
        "training": {"device": "npu:0", "device_map": "cuda"},
        "comm": {"backend": "hccl"},
    }
    assert [(f.code, f.line) for f in res.findings] == [("NPU901", 2), ("NPU802", 5)]


def test_inserted_import_is_reported_at_an_input_line(tmp_path):
    src = b'"""doc."""\nfrom torch.cuda import synchronize, jiterator\nimport torch\n\ntorch.cuda.manual_seed(0)\n'
    res = _process(tmp_path, "m.py", src, torch_npu_import="always")
    lines = res.new.splitlines()
    [f] = [f for f in res.findings if f.code == "NPU100"]
    # output: doc, two split imports, import torch_npu before them (torch.npu needs it)
    assert lines[1] == b"import torch_npu"
    assert f.line == 2  # inserted before input line 2 (the import it precedes)
    [seed] = [f for f in res.findings if "manual_seed" in f.message]
    assert seed.line == 5  # input line, although it is line 7 in the output


def test_parallel_run_matches_serial(tmp_path):
    files = []
    for i in range(6):
        p = tmp_path / f"m{i}.py"
        p.write_text(f"import torch\nx = torch.zeros({i}, device='cuda')\n")
        files.append((p, p.name))
    serial = engine.run(files, rules(), jobs=1)
    parallel = engine.run(files, rules(), jobs=2)
    assert [(r.state, r.new, r.findings) for r in serial] == [(r.state, r.new, r.findings) for r in parallel]
    assert all(r.state == engine.CHANGED for r in serial)


def test_every_changed_output_parses(tmp_path):
    src = b"from torch.cuda import synchronize, jiterator\nimport torch as th\nth.cuda.synchronize()\n"
    res = _process(tmp_path, "s.py", src, torch_npu_import="always")
    cst.parse_module(res.new)
    assert res.new.startswith(
        b"import torch_npu\nfrom torch.npu import synchronize\nfrom torch.cuda import jiterator\n"
    )


def test_bom_and_missing_final_newline_kept(tmp_path):
    res = _process(tmp_path, "bom.py", b"\xef\xbb\xbfimport torch\ntorch.cuda.synchronize()", torch_npu_import="always")
    assert res.new == b"\xef\xbb\xbfimport torch\nimport torch_npu\ntorch.npu.synchronize()"


def test_a_crash_on_one_file_is_a_failed_file_not_a_crash(tmp_path, monkeypatch):
    def boom(data, rules, path, suppressed=None, place=None, kept=None):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(engine, "migrate_python", boom)
    data = b"import torch\ntorch.cuda.synchronize()\n"
    res = _process(tmp_path, "deep.py", data)
    assert res.state == engine.FAILED and res.new == data
    assert res.findings[0].code == "NPU003"
    assert "RecursionError" in res.findings[0].message


SCRIPT_WORDS = b'# job template: "#SBATCH --gres=gpu:8" and srun --gpus-per-node=8\nJOB = "#SBATCH --nodes=2"\n'


def test_script_only_words_do_not_make_a_python_file_worth_parsing(tmp_path, monkeypatch):
    """SBATCH, gres, gpus are markers of script rules only: a Python file that spells
    them (and nothing a Python rule reads) is not parsed at all."""

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed a file no Python rule can match")

    monkeypatch.setattr(cst, "parse_module", no_parse)
    res = _process(tmp_path, "make_job.py", SCRIPT_WORDS)
    assert (res.state, res.findings) == (engine.UNCHANGED, [])


def test_the_same_words_are_read_in_scripts_and_notebook_shell_lines(tmp_path):
    res = _process(tmp_path, "job.sbatch", b"#SBATCH --gres=gpu:8\nsrun --gpus=8 python t.py\n")
    assert [f.code for f in res.findings] == ["NPU902", "NPU903"]
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "id": "a",
        "metadata": {},
        "outputs": [],
        "source": ["!srun --gpus=8 python train.py"],
    }
    nb = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    res = _process(tmp_path, "launch.ipynb", nb.encode())
    assert [f.code for f in res.findings] == ["NPU903"]


def test_each_rewriter_prefilter_holds_only_its_rules_words():
    from titan_doctor.migrate.rules.kind import PYTHON_CODE, SCRIPT_LINES
    from titan_doctor.migrate.rules.registry import KINDS

    rs = rules()
    py, lines = rs.prefilters[PYTHON_CODE], rs.prefilters[SCRIPT_LINES]
    script_only = {w for r in (rule for _, rule in rs.text) for w in KINDS[r.kind].markers(r)}
    python_words = {w for conj in py.markers for w in conj}
    assert {"SBATCH", "gres", "gpus"} <= script_only
    assert not {"SBATCH", "gres", "gpus"} & python_words
    assert not py.may_match(SCRIPT_WORDS) and lines.may_match(SCRIPT_WORDS)
    # env names are read by both: os.environ in Python, export in scripts
    assert py.may_match(b"os.environ['NCCL_DEBUG']") and lines.may_match(b"export NCCL_DEBUG=INFO")


def test_kernel_gate_explanation_is_the_same_in_every_process(tmp_path):
    """A function reaching a kernel by two routes is explained by the first call in source
    order, not by whichever a set of names (hash-seeded per process) yields first."""
    src = tmp_path / "two_routes.py"
    src.write_text(
        "import triton\n\n\n@triton.jit\ndef _a(x):\n    pass\n\n\n@triton.jit\ndef _b(x):\n    pass\n\n\n"
        "def _route_z(x):\n    _a(x)\n\n\ndef _route_y(x):\n    _b(x)\n\n\n"
        "def fused(x):\n    _route_z(x)\n    _route_y(x)\n\n\n"
        "def f(x):\n    if x.is_cuda:\n        return fused(x)\n    return x\n"
    )
    code = (
        "import sys; from titan_doctor.migrate.engine import runner as engine; from tests.migrate.helpers import rules; "
        "from pathlib import Path; r = engine.process_file(Path(sys.argv[1]), rules(), 'two_routes.py'); "
        "print([f.message for f in r.findings if 'CUDA-only code' in f.message])"
    )
    repo = Path(__file__).resolve().parents[2]
    seen = {
        subprocess.run(
            [sys.executable, "-c", code, str(src)],
            capture_output=True,
            text=True,
            check=True,
            cwd=repo,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(6)
    }
    assert len(seen) == 1 and "fused -> _route_z -> _a" in seen.pop()


def test_a_python_file_that_does_not_parse_is_reported_without_a_cuda_word(tmp_path):
    """The pre-filter skips files no rule can match, but not their syntax errors."""
    res = _process(tmp_path, "broken_plain.py", b"def f(:\n    return 1\n")
    assert res.state == engine.FAILED
    [f] = res.findings
    assert (f.code, f.status, f.line) == ("NPU001", Status.FAIL, 1)
    assert _process(tmp_path, "fine.py", b"def f():\n    return 1\n").findings == []


SETUP_PY = b"""from setuptools import setup

extras = {"quant": ["bitsandbytes>=0.45", "triton"]}
extras["attn"] = ["flash-attn>=2.6"]

setup(
    name="tuner",
    install_requires=["torch", "transformers"],
    extras_require=extras,
)
"""


def test_setup_py_requirements_are_read_like_a_requirements_file(tmp_path):
    res = _process(tmp_path, "setup.py", SETUP_PY)
    assert res.state == engine.UNCHANGED
    found = [(f.code, f.line, f.col, f.message.split(" in a dependency")[0]) for f in res.findings]
    assert found == [
        ("NPU804", 3, 22, "bitsandbytes"),
        ("NPU804", 3, 44, "triton"),
        ("NPU804", 4, 20, "flash-attn"),
    ]
    for (_, _, _, name), f in zip(found, res.findings):  # each column points at its package
        assert SETUP_PY.splitlines()[f.line - 1][f.col - 1 :].startswith(name.encode())


def test_a_ci_workflow_is_reported_not_rewritten(tmp_path):
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    path = wf / "gpu.yml"
    data = b"jobs:\n  test:\n    env:\n      CUDA_VISIBLE_DEVICES: 0,1\n"
    path.write_bytes(data)
    res = engine.process_file(path, rules(), ".github/workflows/gpu.yml")
    assert res.state == engine.UNCHANGED and res.new == data
    [f] = res.findings
    assert f.status is Status.MANUAL and "ASCEND_RT_VISIBLE_DEVICES" in f.message and "CI workflow" in f.message
