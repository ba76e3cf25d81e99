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

Outside that block (a rank's start-up: imports, process group, model build, checkpoint load;
and after the loop) there is no step to finish: a rank's SIGTERM raises `Terminated` at once,
as Python raises KeyboardInterrupt for SIGINT, so the rank unwinds (its run lock released, no
step saved half) and the CLI exits 143 with one line, under torchrun too, where a rank killed
by the signal itself would leave a stale lock and no line in torchrun's error file.

Exit codes (128 + signal number, the shell's convention): SIGTERM -> 143, SIGINT -> 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

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


class Terminated(BaseException):
    """SIGTERM outside GracefulStop: raised where the rank is, like KeyboardInterrupt (a
    BaseException, so no `except Exception` on the way, torch's @record included, takes it
    for a crash)."""

    def __init__(self, signum: int = signal.SIGTERM):
        self.signum = int(signum)
        super().__init__(
            f"stopped by {signal.Signals(self.signum).name} outside the training loop (start-up, or the end of "
            "the run): no step was saved by this stop; the same command resumes from the newest complete checkpoint"
        )

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


BACKSTOP_S = 10.0  # how long a rank may take to unwind after a SIGTERM outside the loop
_graceful = threading.Event()  # set while a GracefulStop block is in place: a SIGTERM then means "finish the step"


def _raise_terminated(signum, _frame) -> None:
    signal.signal(
        signum, signal.SIG_IGN
    )  # a repeat (the launcher and a terminal both sent it) cannot interrupt the unwinding
    raise Terminated(signum)


def raise_on_sigterm(backstop_s: float = BACKSTOP_S) -> None:
    """A rank's SIGTERM handler outside the loop (GracefulStop puts it back when it ends).

    Python runs a handler only between bytecodes: a rank blocked in a C call (a store wait or
    a collective whose peer is gone, an HCCL / NCCL wait) would not raise until that call
    timed out, minutes later, where the default handler ended it at once. So the signal also
    wakes a thread (signal.set_wakeup_fd), which ends the rank with the same line and exit code
    when it is still there `backstop_s` later. Only the main thread can install either."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=_backstop, args=(read, backstop_s), name="titan-sigterm-backstop", daemon=True).start()


def _backstop(read: int, backstop_s: float) -> None:
    while True:
        got = os.read(read, 64)
        if signal.SIGTERM in got and not _graceful.is_set():
            break
    time.sleep(backstop_s)  # the main thread unwinds meanwhile; exiting ends this daemon thread
    if _graceful.is_set():
        return  # the loop's graceful stop began meanwhile: it finishes the step and saves
    from titan_train.runtime import error_file

    line = (
        f"titan-train: {Terminated()} (the rank was still inside a call {backstop_s:g} s after the signal, "
        "waiting for a peer that had gone: ended there)"
    )
    with contextlib.suppress(OSError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    error_file.note(line)
    os._exit(EXIT_SIGTERM)


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
        _graceful.set()
        return self

    def __exit__(self, *exc) -> None:
        _graceful.clear()
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
