"""Helpers that run the real trainer in real processes and read what it wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

def _shared_data() -> Path:
    """The read-only test assets: $TITAN_SHARED_DATA, else `shared/data` beside the checkout
    (or beside its parent folder, for a git worktree under wt/). Tests skip when absent."""
    if os.environ.get("TITAN_SHARED_DATA"):
        return Path(os.environ["TITAN_SHARED_DATA"])
    for base in (REPO.parent, REPO.parent.parent):
        if (base / "shared" / "data").is_dir():
            return base / "shared" / "data"
    return REPO.parent / "shared" / "data"


SHARED_DATA = _shared_data()
TOKENIZER_2K = SHARED_DATA / "tokenizer-2k" / "tokenizer.json"
TINYSHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
needs_tokenizer_2k = pytest.mark.skipif(not TOKENIZER_2K.is_file(), reason="shared test assets absent")

# The debug model's shape with short sequences: real multi-rank runs in seconds on 2 cores.
FAST = ["training.seq_len=64", "training.batch_size=8", "metrics.log_every=1",
        "training.warmup_steps=2", "checkpoint.save_interval=0"]


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RANK", None), env.pop("WORLD_SIZE", None), env.pop("LOCAL_RANK", None)
    env["OMP_NUM_THREADS"] = "1"  # ranks share 2 cores; keep runs comparable and quick
    return env


def run_trainer(workdir: Path, *, nproc: int = 1, overrides=(), torchrun: bool = False,
                extra=(), timeout: int = 300) -> subprocess.CompletedProcess:
    args = ["run", "--config", str(REPO / "configs" / "llama_debug.toml"), *extra]
    for o in overrides:
        args += ["--set", o]
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", "titan_train.cli", *args]
    else:
        cmd = [sys.executable, "-m", "titan_train.cli", *args, "--nproc", str(nproc)]
    return subprocess.run(cmd, cwd=workdir, env=trainer_env(), capture_output=True, text=True, timeout=timeout)


def losses(workdir: Path, name: str = "llama_debug") -> dict[int, float]:
    """step -> loss from the run's metrics.jsonl (the last record per step wins)."""
    out = {}
    for line in (workdir / "outputs" / name / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "step" in rec:
            out[rec["step"]] = rec["loss"]
    return out


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"trainer failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
