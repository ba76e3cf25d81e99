"""Preemption: SIGTERM / SIGINT stop the run at a step boundary that every rank agrees on.

    with signals.GracefulStop() as stop:
        while step < last:
            ... one training step ...
            if (signum := stop.agreed()):         # one 4-byte all-reduce (MAX) per step
                checkpointer.save(step)           # every rank is at the same step
                raise signals.Stopped(step, signum)

A handler only sets a flag: the step in flight finishes, its collectives stay matched, and
the all-reduce makes a rank that got no signal (a node Slurm signalled later) stop at the
same step. The flag travels as a host tensor on a gloo group, so asking costs no wait for
the accelerator's queue. The CLI turns `Stopped` into one line and the exit code below, so a job script
can tell "preempted, resume me" from "failed".

Exit codes (128 + signal number, the shell's convention): SIGTERM -> 143, SIGINT -> 130.
"""

from __future__ import annotations

import signal
import sys
import threading

HANDLED = (signal.SIGTERM, signal.SIGINT)
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143: preempted (scancel, kill, the launcher forwarding it)
EXIT_SIGINT = 128 + signal.SIGINT  # 130: Ctrl-C


def exit_code(signum: int) -> int:
    return 128 + int(signum)


class Handlers:
    """`handler` for `signums` while in the `with` block, the previous handlers restored after.
    Only the main thread can install handlers; elsewhere the block installs nothing. The
    launcher's StopSignals and the ranks' GracefulStop both note signals through it."""

    def __init__(self, signums, handler):
        self.signums, self.handler = tuple(signums), handler
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Handlers:
        if threading.current_thread() is threading.main_thread():
            for s in self.signums:
                self._previous[s] = signal.signal(s, self.handler)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()


class Stopped(Exception):
    """The run stopped cleanly on a signal after saving `step`; the next run resumes there."""

    def __init__(self, step: int, signum: int, saved: bool = True):
        self.step, self.signum, self.saved = step, int(signum), saved
        name = signal.Signals(self.signum).name
        where = "checkpoint saved; run the same command to resume" if saved else "no checkpoint configured"
        super().__init__(f"stopped by {name} after step {step} ({where})")

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


class GracefulStop:
    """Installs flag-setting handlers for SIGTERM and SIGINT while in the `with` block and
    restores the previous ones after. Only the main thread can install handlers; elsewhere
    the block is a no-op that never asks to stop. Entering is collective when a process
    group with another backend than gloo exists (it makes the gloo group the flag uses)."""

    def __init__(self, signums=HANDLED, announce=True):
        self.signums = tuple(signums)
        self.signum = 0  # first signal received on this rank (0 = none)
        self.announce = announce
        self.group = None  # gloo group for the flag (None: the default group is gloo)
        self._handlers = Handlers(self.signums, self._handle)

    def _handle(self, signum, _frame) -> None:
        if self.signum:
            return  # a repeat (the launcher forwards what the terminal also sent): one stop is enough
        self.signum = signum
        if self.announce:
            sys.stderr.write(
                f"titan-train: {signal.Signals(signum).name} received: finishing this step; every rank "
                "stops after the same one (saving it when checkpointing)\n"
            )
            sys.stderr.flush()

    def __enter__(self) -> GracefulStop:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_backend() != "gloo":
            self.group = dist.new_group(backend="gloo")
        self._handlers.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._handlers.__exit__(*exc)

    def agreed(self) -> int:
        """Collective: the signal any rank received (0 if none), the same on every rank."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return self.signum
        flag = torch.tensor([self.signum], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return int(flag.item())
