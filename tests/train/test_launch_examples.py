"""The launch examples are valid bash and use only options the CLIs have."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from titan_doctor.cli import main as doctor_main
from titan_train.cli import main as train_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = [EXAMPLES / "train_8npu.sh", EXAMPLES / "slurm_64npu.sbatch"]


def _commands(text: str, prefix: str) -> list[str]:
    """Each `prefix ...` command, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [line[line.index(prefix) :] for line in text.splitlines() if prefix in line]


def _options(command) -> set[str]:
    return {opt for p in command.params for opt in getattr(p, "opts", [])}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_uses_only_real_options(script):
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    checks = [
        ("titan-train run", _options(train_main.get_command(None, "run"))),
        ("titan-doctor diagnose", _options(doctor_main.get_command(None, "diagnose"))),
    ]
    for prefix, known in checks:
        commands = _commands(text, prefix)
        assert commands, f"{script.name} runs no `{prefix}`"
        for cmd in commands:
            used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", cmd))
            assert used <= known, (cmd, used - known)
    assert 'source "$ASCEND_TOOLKIT/set_env.sh"' in text
    assert {"HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_BUFFSIZE"} <= set(re.findall(r"export (HCCL_\w+)", text))


def test_slurm_script_takes_the_rendezvous_from_the_allocation():
    text = (EXAMPLES / "slurm_64npu.sbatch").read_text()
    assert "#SBATCH --nodes=8" in text and "--nproc 8" in text
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in text
    assert '--node-rank "$SLURM_NODEID"' in text and '--master-port "$MASTER_PORT"' in text
    assert "#SBATCH --signal=TERM@300" in text  # the graceful-stop signal before the time limit
