"""SIGTERM to prepare-data (kill, scancel): it unwinds as on Ctrl-C. Before, the parent died at
once and its tokenizing worker processes went on running, orphaned, with a partial folder left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import TOKENIZER_2K, needs_tokenizer_2k, trainer_env


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@needs_tokenizer_2k
def test_sigterm_stops_the_workers_and_leaves_nothing_written(tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text("\n\n".join(f"document {i} " + "some words of text " * 400 for i in range(4000)))
    out = tmp_path / "tok"
    proc = subprocess.Popen(
        [sys.executable, "-m", "titan_train.cli", "prepare-data", str(src), "--tokenizer", str(TOKENIZER_2K)]
        + ["--out", str(out), "--workers", "2"],
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline, workers = time.monotonic() + 60, set()
    while len(workers) < 3 and time.monotonic() < deadline:  # two tokenizers + the spawn resource tracker
        assert proc.poll() is None, proc.communicate()
        workers = _children(proc.pid)
        time.sleep(0.1)
    time.sleep(1.0)  # the workers are tokenizing
    assert proc.poll() is None, "the corpus was tokenized before the test could stop it; make it larger"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert f"titan-train: stopped by SIGTERM; {out} was not written" in err and "Traceback" not in err
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)], "tokenizing workers outlived prepare-data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]  # no DIR, no .tok.partial-PID
