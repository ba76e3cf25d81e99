"""Fault injection for tests of the safety machinery, driven by one environment variable.

    TITAN_TRAIN_FAULT="KIND@RANK:STEP[:SECONDS]"   e.g. "hang@1:3:60", "kill@1:2", "raise@0:4"

    hang   sleep SECONDS (default 3600) inside the step: the hang watchdog must fire
    kill   SIGKILL this rank inside the step: the launcher must name it
    raise  raise RuntimeError inside the step: the failure summary must show its last line
    term   send SIGTERM to this rank only: every rank must still stop at the same step
    stop   send SIGSTOP to this rank inside the step: it can write no stack dump, and the
           hang summary must still name it
    kill_in_save   SIGKILL this rank in the checkpoint save of STEP, right after it wrote its
           own files and before the save is complete: resume must skip that checkpoint
    slow_save      sleep SECONDS in this rank's checkpoint save of STEP (STEP 0: every save):
           tokens/s must not count the time
    kill_before_rename   SIGKILL rank 0 once its async save of STEP is completely written,
           before step-N.tmp is renamed: the next run must keep that checkpoint
    kill_after_rename    SIGKILL rank 0 right after its async save of STEP was renamed to
           step-N, while training goes on: the next run must resume from it
    slow_start     sleep SECONDS in this rank's start-up (STEP 0: process group and run lock
           held, model not built yet): a SIGTERM there must end every rank with 143
    enospc raise the real OSError(ENOSPC) in this rank's checkpoint save of STEP, after it wrote
           its files (a disk that filled up during the write): the run must end with one
           line, the partial step-N.tmp removed and the previous checkpoint untouched

A fault fires in a job's first attempt only (TORCHELASTIC_RESTART_COUNT unset or 0), so a
run restarted by `--max-restarts` (or torchrun's) meets it once, as a real crash is met;
TITAN_TRAIN_FAULT_EVERY_ATTEMPT=1 injects it in every attempt (restarts that run out).

Called at the end of a rank's start-up (train.py, STEP 0), at the start of every watched step (`Watchdog.watch`), in the checkpoint writer and
where an async save completes (checkpoint/manager.py), so the loop carries no hook of its own. Unset (always, outside tests) it
costs one dict lookup.
"""

from __future__ import annotations

import errno
import os
import signal
import time

ENV = "TITAN_TRAIN_FAULT"
EVERY_ATTEMPT_ENV = "TITAN_TRAIN_FAULT_EVERY_ATTEMPT"
KINDS = (
    "hang",
    "kill",
    "raise",
    "term",
    "kill_in_save",
    "slow_save",
    "kill_before_rename",
    "kill_after_rename",
    "enospc",
    "stop",
    "slow_start",
)
# where a kind is injected; the others at the start of a step
SITES = {
    "kill_in_save": "save",
    "slow_save": "save",
    "enospc": "save",
    "kill_before_rename": "written",
    "kill_after_rename": "renamed",
    "slow_start": "start",
}


def parse(spec: str) -> tuple[str, int, int, float]:
    """'hang@1:3:60' -> ('hang', 1, 3, 60.0); a malformed spec is a ValueError naming the format."""
    try:
        kind, where = spec.split("@", 1)
        parts = where.split(":")
        rank, step = int(parts[0]), int(parts[1])
        seconds = float(parts[2]) if len(parts) > 2 else 3600.0
    except (ValueError, IndexError):
        raise ValueError(f"{ENV}={spec!r}: expected KIND@RANK:STEP[:SECONDS], e.g. hang@1:3:60") from None
    if kind not in KINDS:
        raise ValueError(f"{ENV}={spec!r}: KIND must be one of {', '.join(KINDS)}")
    return kind, rank, step, seconds


def maybe_inject(step: int, rank: int, site: str = "step", where: str | None = None) -> None:
    """`site`: "start" (the end of start-up), "step" (the start of a training step), "save" (inside a checkpoint write),
    "written" / "renamed" (an async save complete, before / after its rename); `where`: the
    file an injected write error names."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    kind, at_rank, at_step, seconds = parse(spec)
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and not os.environ.get(EVERY_ATTEMPT_ENV):
        return  # a restarted attempt: the fault already happened
    every_save = kind == "slow_save" and at_step == 0
    if rank != at_rank or (step != at_step and not every_save) or SITES.get(kind, "step") != site:
        return
    if kind in ("hang", "slow_save", "slow_start"):
        time.sleep(seconds)
    elif kind in ("kill", "kill_in_save", "kill_before_rename", "kill_after_rename"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "raise":
        raise RuntimeError(f"injected fault ({ENV}) on rank {rank} at step {step}")
    elif kind == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), where)
    elif kind == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    elif kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
