"""The profiler as one context manager around the loop, and `span(name)` for the phases of a step.

    with profiling.Profiler(cfg.profiling, dev, rank) as prof:
        for step in ...:
            with span("forward"): ...
            with span("backward"): ...
            with span("optimizer"): ...
            prof.step()

torch.profiler (CPU + CUDA) everywhere but NPU, where device.profiler_api hands us
torch_npu.profiler with its experimental config. Each rank writes its own Chrome trace
(Perfetto / chrome://tracing) under <folder>/rank<N>/. `span` also names the phase a rank
is in, which the hang watchdog reports; outside a profiled window it only sets that name.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from titan_train.runtime import device

_recording = False  # a profiler is running: spans become record_function ranges
_current = ["idle"]  # the phase the main thread is in (read by the watchdog thread)


def current_phase() -> str:
    return _current[0]


@contextlib.contextmanager
def span(name: str):
    """Annotate a phase of the step: a record_function range while profiling, and the phase
    name the hang watchdog reports. Costs a list store when not profiling."""
    outer, _current[0] = _current[0], name
    try:
        if _recording:
            import torch

            with torch.profiler.record_function(name):
                yield
        else:
            yield
    finally:
        _current[0] = outer


class Profiler:
    """Context manager for the whole loop; call `.step()` once per optimizer step.
    Disabled, it is a no-op, so the loop never branches on it."""

    def __init__(self, cfg, dev: device.Device, rank: int):
        self.cfg, self.dev, self.rank = cfg, dev, rank
        self.folder = Path(cfg.folder) / f"rank{rank}"
        self.traces: list[Path] = []
        self.snapshot: Path | None = None
        self._prof = None
        self._history = False

    def describe(self) -> str:
        """One line for the start of the run (rank 0)."""
        c = self.cfg
        if not c.enabled:
            return "profiling off"
        first = c.wait + c.warmup + 1
        cycles = "every cycle until the end" if c.repeat == 0 else f"{c.repeat} cycle(s)"
        return (
            f"profiling steps {first}-{first + c.active - 1} ({cycles} of wait {c.wait} + warmup {c.warmup} "
            f"+ active {c.active}) -> {Path(c.folder) / 'rank<N>'}"
        )

    def announce(self, say) -> None:
        """The start-of-run lines (when profiling): which steps, where, and a missing snapshot."""
        if self.cfg.enabled:
            say(f"[titan-train] {self.describe()}")
        if self.memory_snapshot_note:
            say(f"[titan-train] {self.memory_snapshot_note}")

    def __enter__(self) -> Profiler:
        global _recording
        if not self.cfg.enabled:
            return self
        c = self.cfg
        self.folder.mkdir(parents=True, exist_ok=True)
        mod, activities, extra, npu_handler = device.profiler_api(self.dev, c.npu_level)
        handler = (
            npu_handler(str(self.folder), worker_name=f"rank{self.rank}") if npu_handler else self._export_chrome_trace
        )
        self._prof = mod.profile(
            activities=activities,
            schedule=mod.schedule(wait=c.wait, warmup=c.warmup, active=c.active, repeat=c.repeat),
            on_trace_ready=handler,
            record_shapes=c.record_shapes,
            profile_memory=c.profile_memory,
            with_stack=c.with_stack,
            **extra,
        )
        self._prof.__enter__()
        _recording = True
        if c.memory_snapshot:
            self._history = device.record_memory_history(self.dev, True)
        return self

    @property
    def recording(self) -> bool:
        """Whether `step()` drives a profiler (and may flush a trace)."""
        return self._prof is not None

    def step(self) -> None:
        if self._prof is not None:
            self._prof.step()

    def _export_chrome_trace(self, prof) -> None:
        path = self.folder / f"trace_step{prof.step_num}.json"
        prof.export_chrome_trace(str(path))
        self.traces.append(path)

    def __exit__(self, *exc) -> None:
        global _recording
        if self._prof is None:
            return
        _recording = False
        try:
            self._prof.__exit__(*exc)
        finally:
            self._prof = None
            if self._history:
                path = self.folder / "memory_snapshot.pickle"
                if device.dump_memory_snapshot(self.dev, str(path)):
                    self.snapshot = path
                device.record_memory_history(self.dev, False)

    @property
    def memory_snapshot_note(self) -> str:
        """Why a requested snapshot is missing (cpu has no caching allocator history)."""
        if self.cfg.memory_snapshot and not self._history and self.cfg.enabled:
            return f"profiling.memory_snapshot: {self.dev.type} has no allocator history; use profile_memory"
        return ""
