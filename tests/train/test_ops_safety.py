"""Run safety with real gloo ranks: the launcher's failure summary, the hang watchdog, and
a graceful stop on SIGTERM. The ranks run tests/train/ops_loop.py, a tiny loop that uses
the same pieces the trainer's loop does."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from titan_train import faults, launch
from titan_train.signals import EXIT_SIGTERM
from titan_train.watchdog import EXIT_HANG

from .conftest import REPO, trainer_env

LOOP = Path(__file__).with_name("ops_loop.py")


def _launcher(run_dir: Path, cfg: dict, fault: str = "", nproc: int = 2, opts: str = "") -> subprocess.Popen:
    """The launcher in its own process (as `titan-train run` is), running the stand-in loop."""
    env = trainer_env()
    env["OPS_CFG"] = json.dumps({"run_dir": str(run_dir), **cfg})
    if fault:
        env[faults.ENV] = fault
    code = ("import sys; from titan_train import launch; "
            f"sys.exit(launch.run_and_report([sys.executable, {str(LOOP)!r}], "
            f"launch.LaunchOptions({opts or f'nproc={nproc}'}), {str(run_dir)!r}, timeout_s=240))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def test_killed_rank_is_named_first_with_logs_and_diagnose_command(tmp_path):
    rc, out, err = _finish(_launcher(tmp_path, {"steps": 6}, fault="kill@1:3"))
    assert rc == 1, err
    head = err.splitlines()
    assert head[0].startswith("titan-train: rank 1 failed first (killed by SIGKILL)"), err
    assert "error: killed by SIGKILL" in head[1]
    logs = tmp_path / "logs"
    assert f"rank 0   {logs / 'rank0.log'}  (stopped by the launcher)" in err
    assert f"rank 1   {logs / 'rank1.log'}  (failed first)" in err
    assert f"next: titan-doctor diagnose --log {tmp_path}" in err
    # rank 0 lost its peer and has the gloo traceback in its own log, never on the console
    rank0 = (logs / "rank0.log").read_text()
    assert launch.peer_lost(rank0) and "Traceback" in rank0
    assert "Traceback" not in err and "Traceback" not in out and "Connection reset" not in err
    assert out.splitlines()[:2] == ["step 1 loss 4.644937", "step 2 loss 4.662199"]   # rank 0 echoed live


def test_raising_rank_summary_shows_its_exception_before_its_traceback(tmp_path):
    rc, _, err = _finish(_launcher(tmp_path, {"steps": 6}, fault="raise@0:2"))
    assert rc == 1
    summary, _, tail = err.partition("---- last")
    assert summary.startswith("titan-train: rank 0 failed first (exit 1)")
    assert "error: RuntimeError: injected fault (TITAN_TRAIN_FAULT) on rank 0 at step 2" in summary
    assert "Traceback" not in summary
    assert "Traceback (most recent call last)" in tail    # the failed rank's own, after the summary
    assert "Connection" not in tail                       # not a peer's secondary error


def test_hang_dumps_every_rank_and_names_the_stuck_one(tmp_path):
    cfg = {"steps": 8, "watchdog": {"factor": 5, "floor_s": 2, "startup_s": 30}, "grace_s": 1.5}
    start = time.monotonic()
    rc, _, err = _finish(_launcher(tmp_path, cfg, fault="hang@1:5:120"))
    took = time.monotonic() - start
    assert rc == EXIT_HANG, err
    assert took < 60, took   # the sleeping rank would have held the job for 120 s
    dumps = {p.name: p.read_text() for p in (tmp_path / "hang").iterdir()}
    assert sorted(dumps) == ["rank0.txt", "rank1.txt"]
    assert dumps["rank1.txt"].startswith("rank 1: step 5 has run")
    assert "in collective: none" in dumps["rank1.txt"]
    assert "faults.py" in dumps["rank1.txt"] and "in maybe_inject" in dumps["rank1.txt"]   # the sleeping frame
    assert "in collective: all_reduce (called from " in dumps["rank0.txt"]
    assert "ops_loop.py" in dumps["rank0.txt"]
    assert err.startswith("titan-train: hang: a step ran past the watchdog limit (exit 124); 2 rank(s) dumped")
    assert "stuck: rank 1 (not waiting in a collective" in err
    assert f"next: titan-doctor diagnose --log {tmp_path}" in err


def test_sigterm_to_one_rank_stops_every_rank_at_the_same_step(tmp_path):
    rc, _, err = _finish(_launcher(tmp_path, {"steps": 8}, fault="term@1:3"))
    assert rc == EXIT_SIGTERM, err
    results = [json.loads((tmp_path / f"result_rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["stopped_at"] for r in results] == [3, 3]
    assert sorted(p.name for p in tmp_path.glob("saved_step*")) == ["saved_step3_rank0", "saved_step3_rank1"]
    assert "stopped by SIGTERM after step 3" in (tmp_path / "logs" / "rank1.log").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and prctl")
def test_sigterm_to_the_launcher_is_forwarded_and_ranks_save_at_one_step(tmp_path):
    proc = _launcher(tmp_path, {"steps": 200, "step_sleep": 0.2})
    for line in proc.stdout:
        if line.startswith("step 2 "):
            break
    proc.send_signal(signal.SIGTERM)
    rc, _, err = _finish(proc)
    assert rc == EXIT_SIGTERM, err
    assert "stopped on SIGTERM (exit 143); the same command resumes from the last checkpoint" in err
    stops = {json.loads((tmp_path / f"result_rank{r}.json").read_text())["stopped_at"] for r in (0, 1)}
    assert len(stops) == 1 and 2 <= stops.pop() < 200


def test_fault_spec_is_checked():
    assert faults.parse("hang@1:3:60") == ("hang", 1, 3, 60.0)
    with pytest.raises(ValueError, match="KIND@RANK:STEP"):
        faults.parse("hang-1-3")
    with pytest.raises(ValueError, match="one of hang, kill, raise, term"):
        faults.parse("boom@1:3")


def test_last_error_line_and_peer_classification():
    log = ("step 1\nTraceback (most recent call last):\n  File \"x.py\", line 1\n    f()\n"
           "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:123\n"
           "[W1130 rank0] ProcessGroupGloo destroyed\n")
    assert launch.last_error_line(log, 1).startswith("RuntimeError: [../gloo")
    assert launch.peer_lost(log)
    assert launch.last_error_line("", -9).startswith("killed by SIGKILL")
    prefixed = "[rank3]: Traceback (most recent call last):\n[rank3]:   File \"t.py\"\n[rank3]: KeyError: 'w'\n"
    assert launch.last_error_line(prefixed, 1) == "KeyError: 'w'"
    assert launch.last_error_line("all good\n", 3) == "all good"
    assert not launch.peer_lost("ValueError: bad shape")


def test_two_static_nodes_match_one_node(tmp_path):
    """--master-addr/--node-rank (the Slurm script's rendezvous): ranks node_rank x nproc + local."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    rc, _, err = _finish(_launcher(one, {"steps": 3}, nproc=4))
    assert rc == 0, err
    port = launch.free_port()
    nodes = [_launcher(two, {"steps": 3}, opts=f"nproc=2, nnodes=2, node_rank={k}, master_addr='127.0.0.1', "
                                                 f"master_port={port}") for k in (0, 1)]
    for node in nodes:
        rc, _, err = _finish(node)
        assert rc == 0, err
    assert sorted(p.name for p in (two / "logs").iterdir()) == [f"rank{r}.log" for r in range(4)]
    results = lambda d: [json.loads((d / f"result_rank{r}.json").read_text())["losses"] for r in range(4)]  # noqa: E731
    assert results(two) == results(one)


def test_ctrl_c_on_the_real_trainer_exits_130_without_a_traceback(tmp_path):
    env = trainer_env()
    cmd = [sys.executable, "-m", "titan_train.cli", "run", "--config", str(REPO / "configs" / "llama_debug.toml"),
           "--nproc", "2", "--set", "training.seq_len=64", "--set", "training.steps=500",
           "--set", "metrics.log_every=1", "--set", "checkpoint.save_interval=0"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for line in proc.stdout:
        if line.startswith("step     1"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    assert err.strip().splitlines()[-1].startswith("titan-train: stopped on SIGINT (exit 130)")
    for r in (0, 1):
        log = (tmp_path / "outputs" / "llama_debug" / "logs" / f"rank{r}.log").read_text()
        assert "Traceback" not in log and "titan-train: interrupted (Ctrl-C)" in log
