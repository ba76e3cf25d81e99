"""The tree stays as `ruff check` and `ruff format` leave it (configured in pyproject.toml,
also run by .pre-commit-config.yaml), and the pre-commit pin matches the test extra's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.is_file():
        return [str(exe)]
    if shutil.which("ruff"):
        return ["ruff"]
    pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")


@pytest.mark.parametrize(
    "args", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]], ids=["check", "format"]
)
def test_ruff_is_clean_on_the_tree(args):
    proc = subprocess.run(_ruff() + args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_pre_commit_runs_the_pinned_ruff():
    pinned = re.search(r'"ruff==([\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    rev = re.search(r"ruff-pre-commit\s+rev: v([\d.]+)", (REPO / ".pre-commit-config.yaml").read_text()).group(1)
    assert rev == pinned
