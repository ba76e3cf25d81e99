"""The trainer under a torchrun the user starts, as torchtitan users run it: `python -m
titan_train` as torchrun's module, torch's `@record` error file naming the rank that failed
(read back by torchrun's summary), a refusal's one line in it, and a SIGTERM to
torchrun ending every rank with the code the README documents (143), the step saved."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from titan_train.runtime import faults
from titan_train.runtime.signals import EXIT_SIGTERM

from .conftest import FAST, REPO, losses, trainer_env

pytestmark = pytest.mark.multirank

STEPS = 6
COMMON = FAST + [f"training.steps={STEPS}"]


def torchrun(log_dir: Path, module: str, overrides, *extra: str) -> list[str]:
    """torchrun --standalone for 2 ranks of `python -m <module> run` on the debug config,
    with torchrun's per-rank files (error.json, rank output) under `log_dir`."""
    args = ["run", "--config", str(REPO / "configs" / "llama_debug.toml")]
    for o in overrides:
        args += ["--set", o]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--log-dir",
        str(log_dir),
        *extra,
        "-m",
        module,
        *args,
    ]


def error_files(log_dir: Path) -> dict[int, dict]:
    """local rank -> the JSON torchrun's ranks wrote to attempt_0/<rank>/error.json."""
    return {int(p.parent.name): json.loads(p.read_text()) for p in log_dir.rglob("attempt_0/*/error.json")}


def _start_40_steps(tmp_path: Path, logs: Path, exits: Path, env: dict | None = None) -> subprocess.Popen:
    """torchrun over the exit-code worker for 40 steps (no save before the end), each rank
    writing its exit code under `exits`; the caller signals it."""
    exits.mkdir()
    cmd = torchrun(
        logs,
        "tests.train.exit_code_worker",
        [*COMMON, "training.steps=40", "checkpoint.save_interval=100"],
        "--tee",
        "3",
    )
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env={**trainer_env(), "TITAN_TEST_EXIT_DIR": str(exits), **(env or {})},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_torchrun_error_file_names_the_failing_rank(tmp_path):
    """Rank 1 raises at step 2 (under `-m titan_train`): torchrun's summary shows its error file
    (not `<N/A>`) with the error and the stack torch's @record wrote."""
    logs = tmp_path / "torchrun"
    proc = subprocess.run(
        torchrun(logs, "titan_train", COMMON),
        cwd=tmp_path,
        env={**trainer_env(), faults.ENV: "raise@1:2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    injected = "RuntimeError: injected fault (TITAN_TRAIN_FAULT) on rank 1 at step 2"
    root = proc.stderr[proc.stderr.index("Root Cause (first observed failure)") :]
    assert "rank      : 1 (local_rank: 1)" in root, root
    assert "error_file: <N/A>" not in root and injected in root, root
    written = error_files(logs)
    assert written[1]["message"]["message"] == injected
    assert "raise RuntimeError" in written[1]["message"]["extraInfo"]["py_callstack"]


def test_a_refusal_under_torchrun_exits_2_with_its_line_in_the_error_file(tmp_path):
    """A setup error is not a crash: the rank exits 2, and torchrun's summary shows the CLI's
    one line (from the error file), not a stack."""
    logs = tmp_path / "torchrun"
    proc = subprocess.run(
        torchrun(logs, "titan_train", [*COMMON, "distributed.tp_size=3"]),
        cwd=tmp_path,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # torchrun's own code for "a rank failed"
    # both ranks refuse; torchrun stops the second once the first has exited, so only the first is sure
    said = [line for line in proc.stderr.splitlines() if line.startswith("titan-train: error: distributed.tp_size = 3")]
    assert said, proc.stderr[-3000:]  # the rank's own line (torchrun's summary quotes it again)
    root = proc.stderr[proc.stderr.index("Root Cause (first observed failure)") :]
    assert "exitcode  : 2 (pid:" in root, root
    assert "traceback : titan-train: error: distributed.tp_size = 3 must divide the world size 2" in root, root
    failed = int(root.split("rank      : ")[1].split(" ")[0])
    data = error_files(logs)[failed]
    assert data["message"]["message"].startswith("titan-train: error: distributed.tp_size = 3")
    assert "py_callstack" not in data["message"]["extraInfo"]  # a refusal, not a crash: no stack
    assert "Traceback" not in proc.stderr.split("Root Cause")[0].split("Failures:")[-1]


def test_sigterm_to_torchrun_stops_every_rank_with_143_and_the_step_saved(tmp_path):
    """What scancel does to a torchrun job: torchrun forwards SIGTERM to its ranks, each
    finishes its step, they save the step they agree on and each exits 143 without a
    traceback (torchrun itself then exits with its own SignalException)."""
    logs, exits = tmp_path / "torchrun", tmp_path / "exits"
    proc = _start_40_steps(tmp_path, logs, exits)
    for line in proc.stdout:
        if "step 2/40 " in line:
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=240)
    codes = {p.stem: int(p.read_text()) for p in exits.glob("rank*")}
    assert codes == {"rank0": EXIT_SIGTERM, "rank1": EXIT_SIGTERM}, (codes, err[-3000:])

    stopped = max(losses(tmp_path))
    assert 2 <= stopped < 40
    assert sorted(p.name for p in (tmp_path / "outputs" / "llama_debug" / "checkpoints").iterdir()) == [
        f"step-{stopped}"
    ]
    rank_err = {int(p.parent.name): p.read_text() for p in logs.rglob("attempt_0/*/stderr.log")}
    assert sorted(rank_err) == [0, 1]
    for text in rank_err.values():
        assert "titan-train: SIGTERM received: finishing this step" in text
        assert "Traceback" not in text, text
    assert f"titan-train: stopped by SIGTERM after step {stopped} (checkpoint saved" in rank_err[0]
    assert error_files(logs)[0]["message"]["message"].startswith(
        f"titan-train: stopped by SIGTERM after step {stopped}"
    )


def test_sigterm_to_torchrun_during_start_up_exits_143_with_nothing_saved(tmp_path):
    """scancel while the ranks still start (rank 0 slowed after taking the run lock, rank 1
    waiting for it in a collective): no step to finish, so each rank unwinds at once and exits
    143 with one line and no traceback; the run lock is released and no step-N was written."""
    logs, exits = tmp_path / "torchrun", tmp_path / "exits"
    folder = tmp_path / "outputs" / "llama_debug" / "checkpoints"
    proc = _start_40_steps(tmp_path, logs, exits, {faults.ENV: "slow_start@0:0:600"})
    try:
        while not (folder / "run.lock").exists():  # rank 0 holds the lock: both ranks are past init_process_group
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    codes = {p.stem: int(p.read_text()) for p in exits.glob("rank*")}
    assert codes == {"rank0": EXIT_SIGTERM, "rank1": EXIT_SIGTERM}, (codes, err[-3000:])
    assert not folder.exists()  # the lock released, and the folder it made removed: no step-N, no step-N.tmp
    rank_err = {int(p.parent.name): p.read_text() for p in logs.rglob("attempt_0/*/stderr.log")}
    assert "Traceback" not in rank_err[0] + rank_err[1], rank_err
    line = "titan-train: stopped by SIGTERM outside the training loop (start-up, or the end of the run)"
    assert line in rank_err[0], rank_err[0]
    for data in error_files(logs).values():  # what torchrun's summary and diagnose --log read
        assert data["message"]["message"].startswith(line)


BLOCKED_RANK = """
import sys
from datetime import timedelta
import torch.distributed as dist
from titan_train.runtime import signals
import signal
signals.raise_on_sigterm(backstop_s=1)
# Whether a blocked C call sees EINTR (and lets the Python handler raise) depends on which thread
# the kernel hands the signal to. Blocking SIGTERM here, after the backstop thread started with it
# unblocked, makes that thread the only receiver: the main thread stays inside the wait, the case
# the backstop exists for (the other case, the handler raising Terminated, the cli's tests cover).
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
try:
    print("waiting", flush=True)
    store.wait(["a-peer-that-is-gone"], timedelta(seconds=600))  # C++: runs no Python handler until it returns
except signals.Terminated:
    # Python runs its handler in the main thread at the next bytecode: a SIGTERM that lands after
    # the print but before the wait began raises here (the test's timing, not the case under test).
    # The handler has set SIGTERM to ignored; the wait below is the blocked call the backstop ends.
    store.wait(["a-peer-that-is-gone"], timedelta(seconds=600))
"""


def test_a_rank_blocked_in_a_c_call_still_ends_143_soon_after_sigterm(tmp_path):
    """A store wait (or a collective) whose peer is gone runs no Python handler until it times
    out; the backstop thread, woken by the signal itself, ends the rank with its line and 143."""
    err_file = tmp_path / "error.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_RANK],
        env={**trainer_env(), "TORCHELASTIC_ERROR_FILE": str(err_file)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline() == "waiting\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)  # far below the wait's own 600 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_SIGTERM, err
    assert "titan-train: stopped by SIGTERM outside the training loop" in err and "Traceback" not in err, err
    assert "still inside a call 1 s after the signal" in json.loads(err_file.read_text())["message"]["message"]
