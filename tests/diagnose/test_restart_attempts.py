"""`diagnose --log <run folder>` of a run that `titan-train run --max-restarts` restarted: the
died attempts' logs sit in logs/attempt-K/ (titan_train/runtime/restarts.py), and the cause
explained is the last failed attempt's, not the first one found in the tree."""

from __future__ import annotations

from pathlib import Path

from titan_doctor.diagnose import log_lines, logs

KILLED = """titan-train: rank 1 failed first (killed by SIGKILL) after 14.3 s
  error: killed by SIGKILL (no Python error): often the kernel's OOM killer (check `dmesg -T | grep -i -e oom -e 'killed process'`)
  rank logs (2 on this node):
    rank 0   outputs/llama_debug/logs/rank0.log  (stopped by the launcher)
    rank 1   outputs/llama_debug/logs/rank1.log  (failed first)
  next: titan-doctor diagnose --log outputs/llama_debug
"""
RAISED = """titan-train: rank 1 failed first (exit 1) after 17.0 s
  error: RuntimeError: injected fault (TITAN_TRAIN_FAULT) on rank 1 at step 2
  rank logs (2 on this node):
    rank 0   outputs/llama_debug/logs/rank0.log  (stopped by the launcher)
    rank 1   outputs/llama_debug/logs/rank1.log  (failed first)
  next: titan-doctor diagnose --log outputs/llama_debug
"""
PEER_GONE = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/work/main/titan_train/step.py", line 89, in train_step
[rank0]:     loss += parts.forward_backward(inputs, targets)
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:3820. This is typically caused by a remote worker crashing.
"""
RAISE_TRACEBACK = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/work/main/titan_train/runtime/faults.py", line 99, in maybe_inject
[rank1]:     raise RuntimeError(f"injected fault ({ENV}) on rank {rank} at step {step}")
[rank1]: RuntimeError: injected fault (TITAN_TRAIN_FAULT) on rank 1 at step 2
"""
TRAINED = "2026-12-02T17:52:54.021Z step 6/6 (100%) | loss 4.6057 | grad_norm 3.025\n"


def _write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def _restarted_run(tmp_path: Path, now: dict[str, str]) -> Path:
    """A run folder: attempt 0 SIGKILLed, attempt 1 raised, the current attempt's logs `now`."""
    run = tmp_path / "outputs" / "llama_debug"
    _write(run / "logs" / "attempt-0", {"launcher_node0.log": KILLED, "rank0.log": PEER_GONE, "rank1.log": TRAINED})
    _write(
        run / "logs" / "attempt-1", {"launcher_node0.log": RAISED, "rank0.log": PEER_GONE, "rank1.log": RAISE_TRACEBACK}
    )
    _write(run / "logs", now)
    return run


def _cited(findings) -> str:
    return "\n".join(f"{f.message}\n{f.detail}" for f in findings)


def test_a_run_that_finished_after_restarts_is_explained_by_its_last_failed_attempt(tmp_path):
    run = _restarted_run(tmp_path, {"rank0.log": TRAINED, "rank1.log": TRAINED})
    assert [p.relative_to(run).as_posix() for p in log_lines.expand([run])] == [
        "logs/attempt-1/launcher_node0.log",
        "logs/attempt-1/rank0.log",
        "logs/attempt-1/rank1.log",
    ]
    findings = logs.explain([run])
    assert findings[0].message.startswith("root cause: ")
    assert "logs/attempt-1/launcher_node0.log:1 (rank 1)" in findings[0].message, findings[0].message
    assert "attempt-0" not in _cited(findings) and "SIGKILL" not in _cited(findings)


def test_a_current_attempt_that_failed_too_is_the_one_explained(tmp_path):
    run = _restarted_run(tmp_path, {"launcher_node0.log": KILLED, "rank0.log": PEER_GONE, "rank1.log": TRAINED})
    assert [p.relative_to(run).as_posix() for p in log_lines.expand([run])] == [
        "logs/launcher_node0.log",
        "logs/rank0.log",
        "logs/rank1.log",
    ]
    findings = logs.explain([run / "logs"])  # the logs folder itself reads the same
    assert "killed by a signal" in findings[0].message and "/logs/launcher_node0.log:1" in findings[0].message
    assert "attempt-" not in _cited(findings)


def test_logs_without_restart_attempts_are_all_read(tmp_path):
    _write(tmp_path / "logs", {"launcher_node0.log": RAISED, "rank1.log": RAISE_TRACEBACK})
    _write(tmp_path / "torchrun" / "attempt_0" / "1", {"error.json": "{}"})  # torchrun's tree is not ours
    assert len(log_lines.expand([tmp_path])) == 3
