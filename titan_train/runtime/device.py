"""The one place that knows about npu / cuda / cpu and hccl / nccl / gloo.

Every NPU-only call lives here. Selection is a pure function of a `Probe` (what this
machine offers), so it is tested by injecting probes instead of faking devices.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
from dataclasses import dataclass

log = logging.getLogger(__name__)

# device type -> its collective backend
BACKEND_FOR = {"npu": "hccl", "cuda": "nccl", "cpu": "gloo"}
DEVICE_FOR = {v: k for k, v in BACKEND_FOR.items()}
PREFERENCE = ("npu", "cuda", "cpu")
BACKEND_CHOICES = ("auto", "hccl", "nccl", "gloo")


class DeviceError(Exception):
    """The configured backend cannot run on this machine (a user error, one line)."""


@dataclass(frozen=True)
class Probe:
    """What this machine offers. `npu_error` says why torch_npu is unusable, if it is."""

    npu_count: int = 0
    cuda_count: int = 0
    npu_error: str | None = None


@dataclass(frozen=True)
class Device:
    type: str  # "npu" | "cuda" | "cpu"
    backend: str  # "hccl" | "nccl" | "gloo"
    count: int  # accelerators on this host (1 for cpu)
    note: str = ""  # why this was chosen when it is a fallback


def _usable(p: Probe) -> dict[str, int]:
    return {"npu": p.npu_count, "cuda": p.cuda_count, "cpu": 1}


def select(requested: str, p: Probe) -> Device:
    """Pick the device for a configured backend ("auto" | "hccl" | "nccl" | "gloo")."""
    if requested not in BACKEND_CHOICES:
        raise DeviceError(f"distributed.backend = {requested!r} is not valid; use one of {', '.join(BACKEND_CHOICES)}")
    counts = _usable(p)
    if requested == "auto":
        for dev in PREFERENCE:
            if counts[dev] > 0:
                skipped = [d for d in PREFERENCE[: PREFERENCE.index(dev)]]
                note = ""
                if skipped:
                    why = {
                        "npu": f"no usable NPU ({p.npu_error or 'torch_npu found no device'})",
                        "cuda": "no CUDA device",
                    }
                    note = "; ".join(why[d] for d in skipped) + f" -> using {dev}+{BACKEND_FOR[dev]}"
                return Device(dev, BACKEND_FOR[dev], counts[dev], note)
    dev = DEVICE_FOR[requested]
    if counts[dev] > 0:
        return Device(dev, requested, counts[dev])
    if dev == "npu":
        reason = p.npu_error or "torch_npu imported but reports no NPU"
        raise DeviceError(
            f"distributed.backend = 'hccl' needs an Ascend NPU, but {reason}; "
            'run `titan-doctor diagnose`, or set distributed.backend = "auto" to fall back'
        )
    raise DeviceError(
        "distributed.backend = 'nccl' needs a CUDA GPU and none is visible; "
        'set distributed.backend = "auto" (or "gloo" for CPU)'
    )


def check_options(dev: Device, *, cpu_offload: bool, mixed_precision: str) -> None:
    """Settings that only make sense on some devices; a DeviceError says which and why."""
    if cpu_offload and dev.type == "cpu":
        raise DeviceError(
            "distributed.cpu_offload = true needs an accelerator (npu or cuda); on cpu the "
            "parameters already live in host memory: set it to false"
        )
    if mixed_precision == "bf16" and not supports_bf16(dev):
        raise DeviceError("training.mixed_precision = 'bf16' is not supported on this device; use 'fp16'")


def probe() -> Probe:
    """Look at this machine. Never raises: a broken torch_npu is reported, not fatal."""
    import torch

    npu_count, npu_error = 0, None
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        npu_count = torch.npu.device_count()
        if npu_count == 0:
            npu_error = "torch_npu imported but reports no NPU"
    except ModuleNotFoundError:
        npu_error = "torch_npu is not installed"
    except Exception as e:  # ImportError: libhccl.so ..., RuntimeError from the driver
        npu_error = f"torch_npu failed to import: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return Probe(npu_count=npu_count, cuda_count=cuda_count, npu_error=npu_error)


def disable_backend_autoload() -> None:
    """A broken torch_npu autoloaded by `import torch` kills the process before we can say
    why; load it ourselves in probe() instead. Must run before torch is imported."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


# ---- per-device runtime calls (the trainer goes through these, never torch.npu/cuda) ----


def _module(dev_type: str):
    import torch

    return getattr(torch, dev_type) if dev_type in ("npu", "cuda") else None


def torch_device(dev: Device, local_rank: int):
    import torch

    if dev.type == "cpu":
        return torch.device("cpu")
    return torch.device(dev.type, local_rank % max(dev.count, 1))


def set_current(dev: Device, local_rank: int) -> None:
    mod = _module(dev.type)
    if mod is not None:
        mod.set_device(local_rank % max(dev.count, 1))


def synchronize(dev: Device) -> None:
    mod = _module(dev.type)
    if mod is not None:
        mod.synchronize()


def supports_bf16(dev: Device) -> bool:
    if dev.type == "cuda":
        return bool(_module("cuda").is_bf16_supported())
    return True  # Ascend 910B/C and CPUs run bf16


def device_name(dev: Device) -> str:
    """A name to look up in rules/devices.toml, e.g. 'Ascend910B3', 'NVIDIA H100 80GB HBM3'."""
    mod = _module(dev.type)
    if mod is not None:
        return str(mod.get_device_name(0))
    return "cpu"


def reset_peak_memory(dev: Device) -> None:
    """Start a new peak: the allocator's on an accelerator; on cpu the process's peak
    resident set (Linux: writing 5 to /proc/self/clear_refs resets VmHWM)."""
    mod = _module(dev.type)
    if mod is not None:
        mod.reset_peak_memory_stats()
        return
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        pass  # not Linux, or not allowed: the peak then covers the process's whole life


def memory_per_rank(dev: Device, local_ranks: int) -> tuple[int, str]:
    """(bytes one rank may use, where the figure comes from): an accelerator's capacity as
    its runtime reports it; on cpu, the host's available memory shared by the local ranks."""
    mod = _module(dev.type)
    if mod is not None:
        total = int(mod.get_device_properties(0).total_memory)
        return total, f"{device_name(dev)}: {total / 2**30:.2f} GiB"
    available = host_available_bytes()
    return available // max(local_ranks, 1), (
        f"host memory available {available / 2**30:.2f} GiB shared by {local_ranks} local rank(s)"
    )


def _proc_kib(path: str, key: str) -> int | None:
    """Bytes of a 'Key:   N kB' line of a /proc file (None off Linux or when absent)."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def host_available_bytes() -> int:
    """MemAvailable (free plus reclaimable cache) from /proc/meminfo; free pages elsewhere."""
    available = _proc_kib("/proc/meminfo", "MemAvailable")
    return available if available is not None else os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def peak_memory_bytes(dev: Device) -> int:
    """Peak memory since `reset_peak_memory`: the tensors the device allocator handed out;
    on cpu there is no tensor tracking, so the process's peak resident set (VmHWM, which
    counts the Python runtime, libraries and allocator caches too; see `peak_memory_kind`)."""
    mod = _module(dev.type)
    if mod is not None:
        return int(mod.max_memory_allocated())
    peak = _proc_kib("/proc/self/status", "VmHWM")
    if peak is not None:
        return peak
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # lifetime peak (no reset possible)
    return int(rss if sys.platform == "darwin" else rss * 1024)


def peak_memory_kind(dev: Device) -> str:
    """What `peak_memory_bytes` measures, for the label next to it: "tensors" or "rss"."""
    return "tensors" if _module(dev.type) is not None else "rss"


# ---- profiling: which profiler, and the allocator's memory history ----


def profiler_api(dev: Device, npu_level: str = "Level1"):
    """(profiler module, activities, extra profile() kwargs, trace handler or None).

    NPU: `torch_npu.profiler` with CPU + NPU activities, its `_ExperimentalConfig` at the
    given level, and its own `tensorboard_trace_handler` (it writes the raw Ascend data and
    then parses it into trace_view.json). Elsewhere: `torch.profiler`, CPU (+ CUDA), and the
    caller exports the Chrome trace itself (handler None)."""
    if dev.type == "npu":
        import torch_npu

        prof = torch_npu.profiler
        config = prof._ExperimentalConfig(
            profiler_level=getattr(prof.ProfilerLevel, npu_level), aic_metrics=prof.AiCMetrics.PipeUtilization
        )
        activities = [prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU]
        return prof, activities, {"experimental_config": config}, prof.tensorboard_trace_handler
    import torch.profiler as prof

    activities = [prof.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(prof.ProfilerActivity.CUDA)
    return prof, activities, {}, None


def _memory_module(dev: Device):
    mod = _module(dev.type)
    memory = getattr(mod, "memory", None) if mod is not None else None
    if memory is None or not hasattr(memory, "_record_memory_history") or not hasattr(memory, "_dump_snapshot"):
        return None
    return memory


def record_memory_history(dev: Device, enabled: bool, max_entries: int = 100_000) -> bool:
    """Start (or stop) the caching allocator's history; False where the device has none (cpu)."""
    memory = _memory_module(dev)
    if memory is None:
        return False
    memory._record_memory_history("all" if enabled else None, max_entries=max_entries)
    return True


def dump_memory_snapshot(dev: Device, path: str) -> bool:
    """Write the allocator history as a pickle for https://pytorch.org/memory_viz."""
    memory = _memory_module(dev)
    if memory is None:
        return False
    memory._dump_snapshot(path)
    return True
