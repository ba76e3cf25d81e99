"""The launcher with real gloo ranks running tests/train/ops_loop.py, a tiny loop with the
trainer's run-operation pieces that starts in a second: the summary of a raising rank, the
static multi-node rendezvous, the fault-spec parser and the log reading. The same behaviour
through the trainer itself (kill -9 mid-save, SIGTERM, hang) is in test_run_safety.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from titan_train.runtime import faults, launch

from .conftest import REPO, trainer_env

LOOP = Path(__file__).with_name("ops_loop.py")


def _launcher(run_dir: Path, cfg: dict, fault: str = "", nproc: int = 2, opts: str = "") -> subprocess.Popen:
    """The launcher in its own process (as `titan-train run` is), running the stand-in loop."""
    env = trainer_env()
    env["OPS_CFG"] = json.dumps({"run_dir": str(run_dir), **cfg})
    if fault:
        env[faults.ENV] = fault
    code = (
        "import sys; from titan_train.runtime import launch; "
        f"sys.exit(launch.run_and_report([sys.executable, {str(LOOP)!r}], "
        f"launch.LaunchOptions({opts or f'nproc={nproc}'}), {str(run_dir)!r}, timeout_s=240))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


@pytest.mark.multirank
def test_raising_rank_summary_shows_its_exception_before_its_traceback(tmp_path):
    rc, _, err = _finish(_launcher(tmp_path, {"steps": 6}, fault="raise@0:2"))
    assert rc == 1
    summary, _, tail = err.partition("---- last")
    assert summary.startswith("titan-train: rank 0 failed first (exit 1)")
    assert "error: RuntimeError: injected fault (TITAN_TRAIN_FAULT) on rank 0 at step 2" in summary
    assert "Traceback" not in summary
    assert "Traceback (most recent call last)" in tail  # the failed rank's own, after the summary
    assert "Connection" not in tail  # not a peer's secondary error


def test_fault_spec_is_checked():
    assert faults.parse("hang@1:3:60") == ("hang", 1, 3, 60.0)
    with pytest.raises(ValueError, match="KIND@RANK:STEP"):
        faults.parse("hang-1-3")
    assert faults.parse("kill_in_save@0:4") == ("kill_in_save", 0, 4, 3600.0)
    with pytest.raises(ValueError, match="one of hang, kill, raise, term, kill_in_save"):
        faults.parse("boom@1:3")


def test_last_error_line_and_peer_classification():
    log = (
        'step 1\nTraceback (most recent call last):\n  File "x.py", line 1\n    f()\n'
        "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:123\n"
        "[W1130 rank0] ProcessGroupGloo destroyed\n"
    )
    assert launch.last_error_line(log, 1).startswith("RuntimeError: [../gloo")
    assert launch.peer_lost(log)
    assert launch.last_error_line("", -9).startswith("killed by SIGKILL")
    prefixed = "[rank3]: Traceback (most recent call last):\n[rank3]:   File \"t.py\"\n[rank3]: KeyError: 'w'\n"
    assert launch.last_error_line(prefixed, 1) == "KeyError: 'w'"
    assert launch.last_error_line("all good\n", 3) == "all good"
    assert not launch.peer_lost("ValueError: bad shape")


@pytest.mark.multirank
def test_two_static_nodes_match_one_node(tmp_path):
    """--master-addr/--node-rank (the Slurm script's rendezvous): ranks node_rank x nproc + local."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    rc, _, err = _finish(_launcher(one, {"steps": 3}, nproc=4))
    assert rc == 0, err
    port = launch.free_port()
    nodes = [
        _launcher(
            two, {"steps": 3}, opts=f"nproc=2, nnodes=2, node_rank={k}, master_addr='127.0.0.1', master_port={port}"
        )
        for k in (0, 1)
    ]
    for node in nodes:
        rc, _, err = _finish(node)
        assert rc == 0, err
    assert sorted(p.name for p in (two / "logs").iterdir()) == [f"rank{r}.log" for r in range(4)]
    results = lambda d: [json.loads((d / f"result_rank{r}.json").read_text())["losses"] for r in range(4)]  # noqa: E731
    assert results(two) == results(one)
