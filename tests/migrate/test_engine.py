"""Engine safety: untouched bytes, unparseable input, output re-parse, atomic writes,
parallel runs, file discovery."""
from __future__ import annotations

import os
import stat

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate import engine

from .helpers import rules


def _process(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return engine.process_file(path, rules(), name)


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
    res = _process(tmp_path, "crlf.py", data)
    assert res.state == engine.CHANGED
    assert res.new == (b"# -*- coding: latin-1 -*-\r\nimport torch\r\nimport torch_npu\r\n"
                       b"s = 'caf\xe9'\r\ntorch.npu.synchronize()\r\n")


def test_unparseable_file_is_reported_and_untouched(tmp_path):
    data = b"import torch\ntorch.cuda.synchronize(\n"
    res = _process(tmp_path, "broken.py", data)
    assert res.state == engine.FAILED
    assert res.new == data
    [f] = res.findings
    assert (f.code, f.status) == ("NPU001", Status.FAIL)
    assert "does not parse" in f.message


def test_output_that_would_not_parse_is_not_written(tmp_path, monkeypatch):
    def bad(data, rules, path, suppressed=None):
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


def test_non_utf8_text_file_skipped(tmp_path):
    res = _process(tmp_path, "run.sh", b"export CUDA_VISIBLE_DEVICES=0 \xff\n")
    assert res.state == engine.SKIPPED


def test_discover_skips_tool_folders_and_unknown_files(tmp_path):
    for rel in ["a.py", "run.sh", "notes.txt", ".git/x.py", "venv/lib/y.py", "pkg/b.py",
                "k/kernel.cu", "build/c.py", ".env", ".github/ci.yml", "third_party/v/z.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    found = sorted(str(p.relative_to(tmp_path))
                   for p in engine.discover([tmp_path], rules(), exclude=["third_party"]))
    assert found == [".env", "a.py", "k/kernel.cu", "pkg/b.py", "run.sh"]


def test_parallel_run_matches_serial(tmp_path):
    files = []
    for i in range(6):
        p = tmp_path / f"m{i}.py"
        p.write_text(f"import torch\nx = torch.zeros({i}, device='cuda')\n")
        files.append((p, p.name))
    serial = engine.run(files, rules(), jobs=1)
    parallel = engine.run(files, rules(), jobs=2)
    assert [(r.state, r.new, r.findings) for r in serial] == \
        [(r.state, r.new, r.findings) for r in parallel]
    assert all(r.state == engine.CHANGED for r in serial)


def test_write_atomic_keeps_mode_and_leaves_no_temp(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text("old\n")
    os.chmod(p, 0o755)
    engine.write_atomic(p, b"new\n")
    assert p.read_bytes() == b"new\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o755
    assert [x.name for x in tmp_path.iterdir()] == ["run.sh"]


def test_every_changed_output_parses(tmp_path):
    src = b"from torch.cuda import synchronize, jiterator\nimport torch as th\nth.cuda.synchronize()\n"
    res = _process(tmp_path, "s.py", src)
    cst.parse_module(res.new)
    assert res.new.startswith(b"import torch_npu\nfrom torch.npu import synchronize\n"
                              b"from torch.cuda import jiterator\n")


def test_bom_and_missing_final_newline_kept(tmp_path):
    res = _process(tmp_path, "bom.py", b"\xef\xbb\xbfimport torch\ntorch.cuda.synchronize()")
    assert res.new == b"\xef\xbb\xbfimport torch\nimport torch_npu\ntorch.npu.synchronize()"


def test_a_crash_on_one_file_is_a_failed_file_not_a_crash(tmp_path, monkeypatch):
    def boom(data, rules, path, suppressed=None):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(engine, "migrate_python", boom)
    data = b"import torch\ntorch.cuda.synchronize()\n"
    res = _process(tmp_path, "deep.py", data)
    assert res.state == engine.FAILED and res.new == data
    assert res.findings[0].code == "NPU003"
    assert "RecursionError" in res.findings[0].message
