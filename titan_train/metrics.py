"""Loss, tokens/s, MFU and memory: computing them, printing them, writing metrics.jsonl.

Peak FLOPs come from rules/devices.toml for accelerators; for a CPU there is no datasheet
number that means anything, so a short matmul probe measures what this machine reaches.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from titan_knowledge import lookup_device


def measure_matmul_flops(dtype_name: str, seconds: float = 0.3, n: int = 1024) -> float:
    """FLOP/s of square matmuls in this process (its threads), the CPU's practical peak."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm up (oneDNN picks its kernel)
    reps, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        reps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and reps >= 3:
            return 2 * n ** 3 * reps / elapsed


def peak_flops(device_type: str, device_name: str, dtype_name: str, override_tflops: float = 0.0) -> tuple[float, str]:
    """(peak FLOP/s per device, where the figure came from)."""
    if override_tflops > 0:
        return override_tflops * 1e12, "metrics.peak_tflops"
    if device_type == "cpu":
        return measure_matmul_flops(dtype_name), f"measured {dtype_name} matmul probe"
    entry = lookup_device(device_name)
    if entry and dtype_name in entry["peak_tflops"]:
        return entry["peak_tflops"][dtype_name] * 1e12, f"rules/devices.toml: {entry['name']}"
    return 0.0, f"unknown device {device_name!r}: add it to rules/devices.toml or set metrics.peak_tflops"


def mfu(tokens_per_s_per_device: float, flops_per_token: float, peak: float) -> float | None:
    if peak <= 0:
        return None
    return tokens_per_s_per_device * flops_per_token / peak


def format_line(m: dict[str, Any]) -> str:
    """One human line per logged step (rank 0)."""
    parts = [f"step {m['step']:>5}", f"loss {m['loss']:.4f}", f"grad_norm {m['grad_norm']:.3f}",
             f"lr {m['lr']:.2e}",
             f"tok/s {m['tokens_per_s']:,.0f} ({m['tokens_per_s_per_rank']:,.0f}/rank)"]
    parts.append(f"mfu {m['mfu'] * 100:.1f}%" if m.get("mfu") is not None else "mfu n/a")
    parts.append(f"mem {m['peak_mem_gib']:.2f} GiB")
    return " | ".join(parts)


class MetricsFile:
    """Appends one JSON object per logged step, flushed each time, so a crashed run keeps
    what it measured."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class MetricsLogger:
    """The loop's metrics, one `log(step, stats)` call per step (every rank calls it).

    On a logging step (every `log_every`, and the run's last) it sums the loss over ranks,
    reads the figures to the host once, prints the rank-0 line and appends metrics.jsonl;
    other steps cost nothing. Tokens/s is measured over the window since the last logged
    step; time spent inside `paused()` (saving a checkpoint) is left out of it.
    """

    def __init__(self, cfg, *, dims, dev, tokens_per_step: int, flops_per_token: float, peak: float,
                 last_step: int, rank: int, say=print):
        self.every, self.last_step, self.say = cfg.log_every, last_step, say
        self.dims, self.dev, self.tokens_per_step = dims, dev, tokens_per_step
        self.flops_per_token, self.peak = flops_per_token, peak
        self.file = MetricsFile(cfg.output) if rank == 0 else None
        self.window_start, self.window_tokens = time.perf_counter(), 0

    def start(self, record: dict[str, Any]) -> None:
        """Write the run's start record and open the first throughput window."""
        from titan_train import device

        if self.file:
            self.file.write({"event": "start", **record})
        device.reset_peak_memory(self.dev)
        self.window_start, self.window_tokens = time.perf_counter(), 0

    def log(self, step: int, stats) -> dict[str, Any] | None:
        import torch.distributed as dist

        from titan_train import device

        self.window_tokens += self.tokens_per_step
        if step % self.every and step != self.last_step:
            return None
        loss = stats.loss.detach().clone()
        dist.all_reduce(loss)  # held by the last pipeline stage; tp ranks hold equal copies
        device.synchronize(self.dev)
        elapsed = time.perf_counter() - self.window_start
        tps = self.window_tokens / elapsed
        world = self.dims.world_size
        record = {"step": step, "loss": loss.item() / (self.dims.dp * self.dims.tp),
                  "grad_norm": stats.grad_norm.item(), "lr": stats.lr, "tokens_per_s": tps,
                  "tokens_per_s_per_rank": tps / world, "mfu": mfu(tps / world, self.flops_per_token, self.peak),
                  "peak_mem_gib": device.peak_memory_bytes(self.dev) / 2 ** 30, "elapsed_s": elapsed}
        if stats.loss_scale is not None:
            record["loss_scale"] = stats.loss_scale
        self.say(format_line(record), flush=True)
        if self.file:
            self.file.write(record)
        self.window_start, self.window_tokens = time.perf_counter(), 0
        return record

    @contextlib.contextmanager
    def paused(self):
        """Time spent in this block is not training time (checkpoint saves)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.window_start += time.perf_counter() - start

    def close(self) -> None:
        if self.file:
            self.file.close()
