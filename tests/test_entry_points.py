"""Both tools start the same three ways: the console script, `python -m <package>`, and
`python -m <package>.cli` (what torchrun and the launcher use for the trainer)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "module, prog",
    [
        ("titan_train", "titan-train"),
        ("titan_train.cli", "titan-train"),
        ("titan_doctor", "titan-doctor"),
        ("titan_doctor.cli", "titan-doctor"),
    ],
)
def test_python_dash_m_runs_the_cli(module, prog):
    if module.endswith(".cli"):
        code = f"import sys; sys.argv[0] = {prog!r}; from {module} import main; main()"
        argv = [sys.executable, "-c", code, "--version"]
    else:
        argv = [sys.executable, "-m", module, "--version"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{prog}, version ")


def test_python_dash_m_titan_train_refuses_an_unknown_command_as_the_script_does():
    proc = subprocess.run(
        [sys.executable, "-m", "titan_train", "trian"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "No such command 'trian'" in proc.stderr
