"""Profiler pieces: spans name the phase, a disabled profiler does nothing, the memory
snapshot says why it is missing on CPU, and on NPU the torch_npu profiler is configured as
its docs say (stand-in module). A real profiled run: test_run_safety.py."""

from __future__ import annotations

import sys
import types

from titan_train.config.job import ProfilingConfig
from titan_train.runtime import device, profiling


def test_span_only_names_the_phase_when_not_profiling():
    assert profiling.current_phase() == "idle"
    with profiling.span("forward"):
        assert profiling.current_phase() == "forward"
        with profiling.span("checkpoint"):
            assert profiling.current_phase() == "checkpoint"
        assert profiling.current_phase() == "forward"
    assert profiling.current_phase() == "idle"


def test_disabled_profiler_is_a_no_op(tmp_path):
    cfg = ProfilingConfig(enabled=False, folder=str(tmp_path / "p"))
    with profiling.Profiler(cfg, device.Device("cpu", "gloo", 1), 0) as prof:
        prof.step()
    assert not (tmp_path / "p").exists() and prof.describe() == "profiling off"


def test_memory_snapshot_on_cpu_says_why_not(tmp_path):
    cfg = ProfilingConfig(enabled=True, active=1, wait=0, warmup=1, memory_snapshot=True, folder=str(tmp_path))
    with profiling.Profiler(cfg, device.Device("cpu", "gloo", 1), 0) as prof:
        prof.step()
    assert prof.snapshot is None
    assert prof.memory_snapshot_note == "profiling.memory_snapshot: cpu has no allocator history; use profile_memory"


def _stand_in_torch_npu(calls):
    """torch_npu.profiler as its documentation describes it, recording how it is called."""
    prof = types.SimpleNamespace()
    prof.ProfilerActivity = types.SimpleNamespace(CPU="CPU", NPU="NPU")
    prof.ProfilerLevel = types.SimpleNamespace(Level0=0, Level1=1, Level2=2)
    prof.AiCMetrics = types.SimpleNamespace(PipeUtilization="PipeUtilization")
    prof._ExperimentalConfig = lambda **kw: ("experimental", kw)
    prof.schedule = lambda **kw: ("schedule", kw)
    prof.tensorboard_trace_handler = lambda dir_name, worker_name=None: ("handler", dir_name, worker_name)

    class Profile:
        def __init__(self, **kw):
            calls.append(kw)
            self.steps = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append("exit")

        def step(self):
            self.steps += 1

    prof.profile = Profile
    memory_calls = []
    memory = types.SimpleNamespace(
        _record_memory_history=lambda enabled, max_entries: memory_calls.append(enabled),
        _dump_snapshot=lambda path: (memory_calls.append(path), open(path, "wb").close()),
    )
    return types.SimpleNamespace(profiler=prof), types.SimpleNamespace(memory=memory), memory_calls


def test_npu_uses_torch_npu_profiler_with_its_experimental_config(tmp_path, monkeypatch):
    import torch

    calls = []
    torch_npu, npu_module, memory_calls = _stand_in_torch_npu(calls)
    monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    monkeypatch.setattr(torch, "npu", npu_module, raising=False)
    cfg = ProfilingConfig(
        enabled=True,
        wait=0,
        warmup=1,
        active=3,
        repeat=2,
        folder=str(tmp_path),
        record_shapes=True,
        npu_level="Level2",
        memory_snapshot=True,
    )
    with profiling.Profiler(cfg, device.Device("npu", "hccl", 8), 5) as prof:
        assert profiling._recording
        prof.step()
    assert not profiling._recording
    kw = calls[0]
    assert kw["activities"] == ["CPU", "NPU"]
    assert kw["experimental_config"] == ("experimental", {"profiler_level": 2, "aic_metrics": "PipeUtilization"})
    assert kw["schedule"] == ("schedule", {"wait": 0, "warmup": 1, "active": 3, "repeat": 2})
    assert kw["on_trace_ready"] == ("handler", str(tmp_path / "rank5"), "rank5")
    assert kw["record_shapes"] is True and kw["profile_memory"] is False
    assert calls[-1] == "exit"
    assert memory_calls == ["all", str(tmp_path / "rank5" / "memory_snapshot.pickle"), None]
    assert prof.snapshot == tmp_path / "rank5" / "memory_snapshot.pickle"
