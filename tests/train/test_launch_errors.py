"""Launcher errors a user meets, each one line with the fix, from real processes: a
rendezvous port already in use, a rank killed by a signal (named, with what it usually
means), and Ctrl-C at any moment of start-up without a Python traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from titan_train.runtime import launch

from .conftest import FAST, run_trainer, trainer_cmd, trainer_env


@pytest.fixture
def taken_port():
    """A port another process listens on, as a running job's rank 0 would."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.multirank
def test_a_master_port_in_use_is_one_line_before_any_rank_starts(tmp_path, taken_port):
    proc = run_trainer(
        tmp_path, nproc=2, overrides=FAST + ["training.steps=2"], extra=["--master-port", str(taken_port)], timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"titan-train: error: port {taken_port} (MASTER_PORT) is already in use on this host: another "
        f"job or a leftover rank holds it (see `ss -ltnp | grep :{taken_port}`); fix: pass another "
        "--master-port, or leave it out to take a free one"
    ], proc.stderr
    assert not (tmp_path / "outputs" / "llama_debug" / "logs").exists()  # no rank was started


def test_a_port_taken_under_a_rank_is_named_in_the_summary(taken_port):
    """The race the launcher's check cannot close (and a second static node): rank 0's own
    TCPStore error, from a real process, becomes the same one line."""
    code = f"import torch.distributed as d; d.TCPStore('127.0.0.1', {taken_port}, 1, True)"
    rank_log = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stderr
    assert "EADDRINUSE" in rank_log
    assert launch.last_error_line(rank_log, 1) == launch.port_in_use_error(taken_port)


@pytest.mark.multirank
def test_a_rank_killed_by_sigkill_names_the_oom_killer_and_the_fix(tmp_path):
    proc = run_trainer(
        tmp_path, nproc=2, overrides=FAST + ["training.steps=4"], env={"TITAN_TRAIN_FAULT": "kill@1:2"}, timeout=300
    )
    assert proc.returncode == 1
    err = proc.stderr.splitlines()
    assert err[0].startswith("titan-train: rank 1 failed first (killed by SIGKILL) after ")
    assert err[1].startswith(
        "  error: killed by SIGKILL (no Python error): often the kernel's OOM killer (check `dmesg -T"
    )
    assert "fix: lower training.batch_size or seq_len" in err[1]


def test_every_signal_has_a_name_and_the_common_ones_a_cause():
    assert launch.signal_error(-signal.SIGSEGV).startswith("killed by SIGSEGV (no Python error): a crash in native")
    assert "/dev/shm" in launch.signal_error(-signal.SIGBUS)
    assert launch.signal_error(-signal.SIGUSR1) == "killed by SIGUSR1 (no Python error)"
    assert launch.signal_error(-77) == "killed by signal 77 (no Python error)"  # not a named signal: no crash


def _interrupt_when(tmp_path, ready) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Start a 2-rank run, send SIGINT to the launcher (as Ctrl-C does) once `ready()`."""
    proc = subprocess.Popen(
        trainer_cmd(2, FAST + ["training.steps=50"]),
        cwd=tmp_path,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    logs = sorted((tmp_path / "outputs" / "llama_debug" / "logs").glob("rank*.log"))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), [p.read_text() for p in logs]


@pytest.mark.multirank
@pytest.mark.parametrize("moment", [0.5, 1.0, "ranks starting"])
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path, moment):
    """Before the loop's graceful stop is installed, a KeyboardInterrupt lands anywhere in
    start-up: in the launcher's preflight (it used to end in a SystemError traceback from
    importing torch again in an except clause), while it forks the ranks (Python ignored it
    there and the run went on), or in the ranks' `import torch` (a duplicate-operator
    traceback in the rank log and exit 1)."""
    started = time.monotonic()
    logs_dir = tmp_path / "outputs" / "llama_debug" / "logs"
    ready = (
        (lambda: (logs_dir / "rank1.log").exists())
        if moment == "ranks starting"
        else (lambda: time.monotonic() - started > moment)
    )
    proc, logs = _interrupt_when(tmp_path, ready)
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "failed first" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    if moment == "ranks starting":  # a rank's own log may show where Python was when it got the signal
        assert last.startswith("titan-train: stopped on SIGINT (exit 130)"), last
    else:
        assert last in ("titan-train: interrupted by SIGINT before any rank started; nothing ran",) or last.startswith(
            "titan-train: stopped on SIGINT (exit 130)"
        ), last
        assert all("Traceback" not in log for log in logs), logs


@pytest.mark.multirank
def test_a_forwarded_stop_says_what_was_saved_not_always_resume(tmp_path):
    """Ctrl-C while the ranks were still starting used to print 'the same command resumes from
    the last checkpoint' although no step ran and nothing was saved."""
    log = tmp_path / "rank0.log"
    result = launch.LaunchResult([launch.RankOutcome(0, log)], "", 0)
    log.write_text("[titan-train] backend auto: cpu+gloo\n")
    assert launch.stop_note(result).startswith("during start-up, before any step: nothing was trained or saved")
    log.write_text(
        "step 3/50 | loss 6.1\ntitan-train: stopped by SIGINT after step 3 (checkpoint saved; run the "
        "same command to resume)\n"
    )
    assert launch.stop_note(result) == "after step 3, checkpoint saved; the same command resumes there"
    log.write_text("titan-train: stopped by SIGTERM after step 7 (no checkpoint configured)\n")
    assert "after step 7; no checkpoint configured" in launch.stop_note(result) and "starts over" in launch.stop_note(
        result
    )


@pytest.mark.multirank
def test_a_rank_that_click_aborted_on_the_forwarded_ctrl_c_is_not_a_failure(tmp_path):
    """SIGINT landing while click parses a rank's command line: click prints `Aborted!` and
    exits 1, which was then reported as 'rank 0 failed first (exit 1)' (a race, seen ~1 in 6)."""
    log = tmp_path / "rank0.log"
    log.write_text("Aborted!\n")
    assert launch._ended_by(signal.SIGINT, 1, log)
    assert not launch._ended_by(0, 1, log) and not launch._ended_by(signal.SIGTERM, 1, log)
    log.write_text("titan-train: error: something real\n")
    assert not launch._ended_by(signal.SIGINT, 1, log)


def test_the_oom_hint_gives_the_estimate_command_for_this_job_not_a_placeholder():
    opts = launch.LaunchOptions(nproc=2)
    cmd = [
        sys.executable,
        "-m",
        "titan_train.cli",
        "run",
        "--config",
        "/c/my run.toml",
        "--set",
        "training.seq_len=64",
        "--set",
        'data.dataset="a b.txt"',
    ]
    text = "  error: " + launch.signal_error(-signal.SIGKILL)
    done = launch._with_estimate_command(text, cmd, opts)
    assert "--config ..." not in done
    assert (
        "titan-doctor diagnose --config '/c/my run.toml' --world-size 2 --device CARD --set training.seq_len=64 "
        "--set 'data.dataset=\"a b.txt\"'"
    ) in done
