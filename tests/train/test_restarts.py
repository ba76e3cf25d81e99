"""--max-restarts: after a rank dies every rank starts again and resumes from the newest
complete checkpoint (real processes), and what must not be restarted is not."""

from __future__ import annotations

import pytest

from titan_train.runtime import restarts

from .conftest import FAST, losses, ok, run_trainer

COMMON = FAST + ["training.steps=6", "checkpoint.save_interval=2"]


class _Result:
    def __init__(self, code: int, forwarded: int = 0):
        self.exit_code, self.forwarded = code, forwarded


def _fake(codes, tmp_path, max_restarts, forwarded=()):
    seen, lines = [], []
    (tmp_path / "rank0.log").write_text("attempt log")
    (tmp_path / "launcher_node0.log").write_text(f"    rank 0   {tmp_path / 'rank0.log'}  (failed first)\n")

    def attempt(k):
        seen.append(k)
        return _Result(
            codes[k], k in forwarded and 15
        ), f"titan-train: rank 1 failed first (exit {codes[k]})\n  error: boom"

    code = restarts.run(
        attempt,
        max_restarts,
        never=(0, 2, 3, 130, 143),
        log_dir=tmp_path,
        resumes_from=lambda: "step 4",
        say=lines.append,
    )
    return code, seen, lines


def test_failures_are_restarted_until_one_attempt_succeeds(tmp_path):
    code, seen, lines = _fake([1, 124, 0], tmp_path, 2)
    assert (code, seen) == (0, [0, 1, 2])
    assert lines[0].startswith(
        "titan-train: restart 1 of 2: attempt 0 died (titan-train: rank 1 failed first (exit 1); error: boom); "
        "every rank starts again and resumes from step 4"
    )
    assert (tmp_path / "attempt-0" / "rank0.log").read_text() == "attempt log"  # the died attempt's logs are kept
    summary = (tmp_path / "attempt-0" / "launcher_node0.log").read_text()  # and its summary names where they are now
    assert summary == f"    rank 0   {tmp_path / 'attempt-0' / 'rank0.log'}  (failed first)\n"


@pytest.mark.parametrize("code", [0, 2, 3, 130, 143])
def test_a_clean_end_a_refusal_a_nan_stop_and_a_signal_stop_are_never_restarted(tmp_path, code):
    assert _fake([code, 0], tmp_path, 2)[:2] == (code, [0])


def test_a_forwarded_signal_is_not_restarted_and_restarts_run_out(tmp_path):
    assert _fake([1, 0], tmp_path, 2, forwarded=(0,))[:2] == (1, [0])
    code, seen, lines = _fake([1, 1, 1], tmp_path, 2)
    assert (code, seen) == (1, [0, 1, 2])
    assert lines[-1] == "titan-train: giving up after 2 restart(s): attempt 2 failed too (exit 1)"


@pytest.mark.multirank
def test_a_rank_killed_mid_run_is_restarted_and_trains_the_losses_of_an_uninterrupted_run(tmp_path, reference_run):
    want = losses(reference_run(nproc=2, overrides=COMMON))
    proc = run_trainer(
        tmp_path, nproc=2, overrides=COMMON, extra=["--max-restarts", "2"], env={"TITAN_TRAIN_FAULT": "kill@1:3"}
    )
    ok(proc)
    assert "titan-train: rank 1 failed first (killed by SIGKILL)" in proc.stderr  # the died attempt's summary
    assert (
        "titan-train: restart 1 of 2: attempt 0 died (titan-train: rank 1 failed first (killed by SIGKILL)"
        in proc.stderr
    )
    assert "resumes from step 2 (" in proc.stderr and "restart 2 of 2" not in proc.stderr
    logs = tmp_path / "outputs" / "llama_debug" / "logs"
    assert (logs / "attempt-0" / "rank1.log").is_file() and (logs / "attempt-0" / "launcher_node0.log").is_file()
    assert "logs/attempt-0/rank1.log  (failed first)" in (logs / "attempt-0" / "launcher_node0.log").read_text()
    assert "(step 2)" in (logs / "rank0.log").read_text()  # the new attempt resumed there
    got = losses(tmp_path)
    assert sorted(got) == list(range(1, 7))
    for step in range(1, 7):
        assert got[step] == pytest.approx(want[step], abs=1e-6), (step, got, want)


@pytest.mark.multirank
def test_a_refusal_in_a_rank_is_not_restarted(tmp_path):
    """A disk that fills during a save is a refusal (exit 2): running again cannot help."""
    proc = run_trainer(
        tmp_path, nproc=2, overrides=COMMON, extra=["--max-restarts", "2"], env={"TITAN_TRAIN_FAULT": "enospc@0:2"}
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "restart" not in proc.stderr
    assert not (tmp_path / "outputs" / "llama_debug" / "logs" / "attempt-0").exists()


def test_restarts_across_nodes_and_with_stop_after_are_refused_in_one_line(tmp_path, monkeypatch):
    from .conftest import run_in_process

    proc = run_in_process(tmp_path, monkeypatch, nproc=1, extra=["--max-restarts", "1", "--stop-after", "2"])
    assert proc.returncode == 2 and "--max-restarts with --stop-after" in proc.stderr
    proc = run_in_process(
        tmp_path, monkeypatch, extra=["--max-restarts", "1", "--nnodes", "2", "--master-addr", "127.0.0.1"]
    )
    assert proc.returncode == 2 and "let the scheduler restart the whole job" in proc.stderr


@pytest.mark.multirank
def test_both_node_launchers_refuse_restarts_across_nodes_before_any_rendezvous(tmp_path):
    """Two node launchers of one job (c10d rendezvous, as test_node_agreement starts them) with
    --max-restarts: each exits 2 with the one line naming the scheduler's requeue, without
    waiting for the other node and without starting a rank."""
    from titan_train.runtime.launch import free_port

    from .conftest import start_node

    where = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--max-restarts", "1"]
    nodes = [
        start_node(tmp_path, nproc=1, overrides=COMMON, extra=[*where, "--node-rank", str(k), "--rdzv-timeout", "600"])
        for k in (0, 1)
    ]
    ends = [p.communicate(timeout=120) for p in nodes]  # far below --rdzv-timeout: nobody waited
    for p, (_, err) in zip(nodes, ends):
        assert p.returncode == 2, err[-2000:]
        assert err.strip().splitlines()[-1] == (
            "titan-train: error: --max-restarts restarts the ranks of one node; with --nnodes > 1 let the "
            "scheduler restart the whole job (Slurm: sbatch --requeue, scontrol requeue): every node then resumes "
            "from the newest complete checkpoint"
        )
    assert not (tmp_path / "outputs" / "llama_debug" / "logs").exists()  # no rank was started
