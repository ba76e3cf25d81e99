"""Hang watchdog: a step that runs far longer than usual fails the run with evidence,
instead of leaving 64 cards waiting in a collective until someone notices.

    with watchdog.Watchdog(cfg.watchdog, run_dir, rank) as wd:
        while step < last:
            with wd.watch(step + 1):
                stats = train_step(parts, batches)

A thread checks the step in flight. When it has run longer than
max(floor_s, factor x median of recent steps) (startup_s for the first steps), each rank
writes <run>/hang/rank<N>.txt: the phase (profiling.span), the collective its main thread
is blocked in or the last one seen, how many collectives it issued on the default group
(a rank behind its peers is the one that hung), and every thread's Python stack
(faulthandler). Ranks run in lock-step, so every rank's watchdog fires within moments of
the others; each waits `grace_s` for its peers to dump too, then exits with EXIT_HANG.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path

from titan_train.runtime import faults, profiling

EXIT_HANG = 124  # the `timeout` command's code for "took too long"
_RECENT = 20  # steps in the median
_MIN_SAMPLES = 3  # before this many steps, the limit is startup_s
_WRAPPERS = {"wrapper", "inner", "_fn", "decorator"}  # torch's logging/exception decorators


def diagnose_command(run_dir: str | Path) -> str:
    return f"titan-doctor diagnose --log {run_dir}"


def read_dumps(run_dir: str | Path) -> list[dict]:
    """The header of every rank's dump: rank, whether it waits in a collective, how many it issued."""
    out = []
    for path in sorted((Path(run_dir) / "hang").glob("rank*.txt")):
        head = "\n".join(path.read_text(errors="replace").splitlines()[:8])
        issued = re.search(r"issued on the default group: (\d+)", head)
        out.append(
            {
                "rank": int(path.stem[4:]),
                "path": path,
                "waiting": "in collective: none" not in head,
                "issued": int(issued.group(1)) if issued else None,
            }
        )
    return out


def stuck_ranks(dumps: list[dict], ranks=()) -> tuple[list[int], str]:
    """(the ranks the others wait for, why), by the strongest evidence first: a rank of
    `ranks` that wrote no dump at all (stopped, or stuck where Python's handler cannot run:
    the others, waiting for it, all dumped); else ranks not waiting for peers; else those
    that issued fewer collectives."""
    dumped = {d["rank"] for d in dumps}
    silent = [r for r in ranks if r not in dumped]
    if silent and dumps:
        return silent, "wrote no stack dump: stopped, or stuck outside Python; the others wait for it"
    idle = [d["rank"] for d in dumps if not d["waiting"]]
    if idle:
        return idle, "not waiting in a collective; the others wait for it"
    counts = [d["issued"] for d in dumps if d["issued"] is not None]
    if counts and min(counts) != max(counts):
        return [d["rank"] for d in dumps if d["issued"] == min(counts)], "issued fewer collectives than the others"
    return [], ""


def collective_frames(frame) -> tuple[str, str] | None:
    """(collective, 'file:line' that called it) if `frame`'s stack is inside torch.distributed."""
    sep = os.sep
    inner = caller = None
    while frame is not None:
        path = frame.f_code.co_filename
        in_dist = f"{sep}torch{sep}distributed{sep}" in path
        if in_dist and inner is None and frame.f_code.co_name not in _WRAPPERS:
            inner = frame.f_code.co_name
        if inner is not None and not in_dist and f"{sep}torch{sep}" not in path:
            caller = f"{path}:{frame.f_lineno}"
            break
        frame = frame.f_back
    return (inner, caller or "?") if inner else None


def _issued_collectives() -> int | None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())
    except Exception:  # noqa: BLE001 - evidence is best effort; never break the dump
        return None
    return None


class Watchdog:
    def __init__(self, cfg, run_dir: str | Path, rank: int, *, grace_s: float = 5.0, exit_fn=os._exit):
        self.cfg, self.rank = cfg, rank
        self.run_dir = Path(run_dir)
        self.dump_path = self.run_dir / "hang" / f"rank{rank}.txt"
        self.grace_s, self._exit = grace_s, exit_fn
        self.durations: collections.deque[float] = collections.deque(maxlen=_RECENT)  # the median's window
        self.last_collective = "none seen"
        self._step = 0
        self._started: float | None = None
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    def limit_s(self) -> float:
        c = self.cfg
        if len(self.durations) < _MIN_SAMPLES:
            return c.startup_s
        return max(c.floor_s, c.factor * statistics.median(self.durations))

    def __enter__(self) -> Watchdog:
        self.dump_path.unlink(missing_ok=True)  # a dump from an earlier run must not be read as this one's
        if self.cfg.enabled:
            self._thread = threading.Thread(target=self._run, name="titan-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @contextlib.contextmanager
    def watch(self, step: int):
        """Time one training step (also where TITAN_TRAIN_FAULT injects a fault)."""
        self._step, self._started = step, time.monotonic()
        try:
            faults.maybe_inject(step, self.rank)
            yield
        finally:
            self.durations.append(time.monotonic() - self._started)
            self._started = None

    def _poll_s(self) -> float:
        return max(0.05, min(1.0, self.cfg.floor_s / 20, self.cfg.startup_s / 20))

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s()):
            started = self._started
            if started is None:
                continue
            self._sample_collective()
            elapsed, limit = time.monotonic() - started, self.limit_s()
            if elapsed > limit:
                self._fire(elapsed, limit)
                return

    def _sample_collective(self) -> None:
        frame = sys._current_frames().get(self._main)
        found = collective_frames(frame) if frame is not None else None
        if found:
            self.last_collective = f"{found[0]} (called from {found[1]})"

    def _fire(self, elapsed: float, limit: float) -> None:
        self.fired = True
        frame = sys._current_frames().get(self._main)
        now = collective_frames(frame) if frame is not None else None
        median = statistics.median(self.durations) if self.durations else None
        rule = (
            f"{self.cfg.factor:g} x median {median:.2f} s, at least {self.cfg.floor_s:g} s"
            if len(self.durations) >= _MIN_SAMPLES
            else f"watchdog.startup_s before {_MIN_SAMPLES} steps"
        )
        lines = [
            f"rank {self.rank}: step {self._step} has run {elapsed:.1f} s; limit {limit:.1f} s ({rule})",
            f"phase: {profiling.current_phase()}",
            ("in collective: " + f"{now[0]} (called from {now[1]})")
            if now
            else "in collective: none (this rank is not waiting for its peers: look at its stack below)",
            f"last collective seen: {self.last_collective}",
            f"collectives issued on the default group: {_issued_collectives()}",
            f"pid: {os.getpid()}",
            "",
        ]
        self.dump_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dump_path, "w") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            faulthandler.dump_traceback(file=fh, all_threads=True)
        sys.stderr.write(
            f"titan-train: hang: {lines[0]}; stacks in {self.dump_path}. Run: {diagnose_command(self.run_dir)}\n"
        )
        sys.stderr.flush()
        time.sleep(self.grace_s)  # peers are firing too; let them finish their dumps
        self._exit(EXIT_HANG)
