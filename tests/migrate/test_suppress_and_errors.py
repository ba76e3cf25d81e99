"""Inline suppression for pre-commit use, and where a parse error is reported."""
from __future__ import annotations

import json

from click.testing import CliRunner

from titan_doctor.cli import main
from titan_doctor.migrate import engine
from titan_doctor.migrate.suppress import is_suppressed, suppressions

from .helpers import rules

REVIEWED = ('import torch\n\nNAMES = {"cuda": "NVIDIA"}  # titan-doctor: ignore[NPU108]\n'
            'torch.cuda.synchronize()  # titan-doctor: ignore\n')


def run(*args):
    return CliRunner().invoke(main, ["migrate", *map(str, args)])


def test_comment_forms():
    table = suppressions(b"a = 1  # titan-doctor: ignore\nb = 2  #titan-doctor:ignore[NPU108, NPU2]\n"
                         b"c = 3  # titan-doctor: ignore[]\nd = '# not titan'\n")
    assert is_suppressed(table, 1, "NPU101")
    assert is_suppressed(table, 2, "NPU108") and is_suppressed(table, 2, "NPU201")
    assert not is_suppressed(table, 2, "NPU101")
    assert is_suppressed(table, 3, "NPU999")      # empty list = every code
    assert not is_suppressed(table, 4, "NPU108")
    assert suppressions(b"x = 1\n") == {}


def test_reviewed_lines_pass_check_and_are_counted(tmp_path):
    (tmp_path / "names.py").write_text(REVIEWED)
    res = run("--check", tmp_path)
    assert res.exit_code == 0, res.output
    assert "2 finding(s) suppressed" in res.output
    data = json.loads(run("--check", "--format", "json", tmp_path).output)
    assert data["suppressed"] == 2 and data["findings"] == [] and data["files"]["changed"] == 0


def test_a_suppression_for_another_code_does_not_hide_the_finding(tmp_path):
    (tmp_path / "t.py").write_text("import torch\ntorch.cuda.synchronize()  # titan-doctor: ignore[NPU108]\n")
    res = run("--check", tmp_path)
    assert res.exit_code == 1 and "NPU101 [fixed]" in res.output


def test_parse_error_points_at_the_line_the_parser_names(tmp_path):
    path = tmp_path / "broken.py"
    path.write_bytes(b"import torch\nx = foo(1,\n        2\ntorch.cuda.synchronize()\ny = 3\n")
    [finding] = engine.process_file(path, rules(), "broken.py").findings
    assert (finding.code, finding.line, finding.col) == ("NPU001", 2, 8)
    assert "'(' was never closed" in finding.message
