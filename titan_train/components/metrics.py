"""Loss, tokens/s, MFU and memory: computing them, printing them (with progress and ETA),
writing them to metrics.jsonl and, optionally, TensorBoard.

Peak FLOPs come from rules/devices.toml for accelerators; for a CPU there is no datasheet
number that means anything, so a short matmul probe measures what this machine reaches.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from titan_knowledge import lookup_device
from titan_train.config.precision import torch_dtype


def measure_matmul_flops(dtype_name: str, seconds: float = 0.3, n: int = 1024) -> float:
    """FLOP/s of square matmuls in this process (its threads), the CPU's practical peak."""
    import torch

    dtype = torch_dtype(dtype_name)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm up (oneDNN picks its kernel)
    reps, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        reps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and reps >= 3:
            return 2 * n**3 * reps / elapsed


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


def mfu_fields(value: float | None) -> dict[str, Any]:
    """The record's MFU fields. A device cannot beat its own peak, so a figure >= 100% means
    the clock missed work or the peak is wrong: it is never shown as MFU, only kept apart as
    `mfu_over_peak` (and the printed line says the measurement is invalid)."""
    if value is not None and value >= 1.0:
        return {"mfu": None, "mfu_over_peak": value}
    return {"mfu": value}


MEMORY_LABELS = {"tensors": "mem", "rss": "rss"}  # device.peak_memory_kind -> the word printed


def format_line(m: dict[str, Any], eta: Eta | None = None) -> str:
    """One human line per logged step (rank 0); with `eta`, the step out of the total and an ETA."""
    done, left = eta.fields(m["step"]) if eta else (f"{m['step']:>5}", None)
    parts = [
        f"step {done}",
        f"loss {m['loss']:.4f}",
        f"grad_norm {m['grad_norm']:.3f}",
        f"lr {m['lr']:.2e}",
        f"tok/s {m['tokens_per_s']:,.0f} ({m['tokens_per_s_per_rank']:,.0f}/rank)",
    ]
    if m.get("mfu") is not None and m["mfu"] < 1.0:
        parts.append(f"mfu {m['mfu'] * 100:.1f}%")
    elif m.get("mfu_over_peak") is not None or m.get("mfu") is not None:
        parts.append("mfu invalid (>= 100% of peak: see metrics.peak_tflops)")
    else:
        parts.append("mfu n/a")
    parts.append(f"{MEMORY_LABELS[m.get('peak_mem_kind', 'tensors')]} {m['peak_mem_gib']:.2f} GiB")
    if left is not None:
        parts.append(f"eta {left}")
    return " | ".join(parts)


def utc_now() -> str:
    """The wall clock as every metrics.jsonl record carries it ("time"): ISO-8601 UTC, ms."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class MetricsFile:
    """Appends one JSON object per logged step, flushed each time, so a crashed run keeps
    what it measured. Each record gets "time", the UTC wall clock when it was written, so
    records line up with the rank logs' stamped lines and other runs."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps({**record, "time": utc_now()}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class MissingExtra(Exception):
    """An optional dependency a setting needs is not installed (a user error, one line)."""


def require_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401  (torch.utils.tensorboard needs the package itself)
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise MissingExtra(
            "metrics.tensorboard = true needs tensorboard: pip install 'titan-npu[tb]' "
            "(or set metrics.tensorboard = false)"
        ) from None


# metrics.jsonl field -> the TensorBoard tag torchtitan v0.2.2 writes for it
# (torchtitan/components/metrics.py, MetricsProcessor.log / log_validation), with the scale
# torchtitan uses (mfu in percent). A field torchtitan has no tag for keeps its own name;
# validation fields go under torchtitan's validation_metrics/.
TB_TAGS = {
    "loss": "loss_metrics/global_avg_loss",
    "grad_norm": "grad_norm",
    "lr": "lr",
    "tokens_per_s_per_rank": "throughput(tps)",  # torchtitan's tps is per device too
    "mfu": "mfu(%)",
    "validation_loss": "validation_metrics/loss",
    "validation_perplexity": "validation_metrics/perplexity",
    "validation_tokens": "validation_metrics/tokens",
}
TB_SCALE = {"mfu": 100.0}


def tb_scalars(record: dict[str, Any]) -> dict[str, float]:
    """A step record's numeric fields as torchtitan's TensorBoard tags (TB_TAGS). The peak
    memory is torchtitan's memory/max_active(GiB) where it is the device's tensor peak; a
    CPU's process RSS keeps its own name."""
    out = {}
    for key, value in record.items():
        if key == "step" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key == "peak_mem_gib" and record.get("peak_mem_kind", "tensors") == "tensors":
            out["memory/max_active(GiB)"] = value
        else:
            out[TB_TAGS.get(key, key)] = value * TB_SCALE.get(key, 1.0)
    return out


class TensorBoardSink:
    """The metrics.jsonl records as TensorBoard scalars at the record's step, under
    torchtitan's tag names (tb_scalars), so a torchtitan user's dashboards read them; the
    start record (config) as text. A resumed run purges events past its starting step, so a
    crashed run's extra steps do not linger."""

    def __init__(self, folder: str | Path, resumed_from: int = 0):
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(folder)
        self._w = SummaryWriter(log_dir=str(self.folder), purge_step=resumed_from + 1 if resumed_from else None)

    def write(self, record: dict[str, Any]) -> None:
        if "step" not in record:
            if record.get("event") == "start":
                self._w.add_text(
                    "start", "```\n" + json.dumps(record, indent=2) + "\n```", record.get("resumed_from", 0)
                )
            return
        for tag, value in tb_scalars(record).items():
            self._w.add_scalar(tag, value, record["step"])
        self._w.flush()

    def close(self) -> None:
        self._w.close()


def open_sinks(cfg, rank: int, resumed_from: int = 0) -> list:
    """Where rank 0's records go (`cfg`: the [metrics] section): metrics.jsonl, and
    TensorBoard and W&B when enabled. Other ranks: none."""
    if rank != 0:
        return []
    sinks = [MetricsFile(cfg.output)]
    if cfg.tensorboard:
        sinks.append(TensorBoardSink(cfg.tb_folder, resumed_from))
    if cfg.wandb:
        from titan_train.components.wandb_sink import WandbSink

        run = Path(cfg.output).parent
        sinks.append(WandbSink(run, cfg.wandb_project, run.name, cfg.wandb_mode))
    return sinks


def format_duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m, 2d03h."""
    s = int(round(max(seconds, 0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


class Eta:
    """Where the run is ('12/40 (30%)') and when it ends, for the rank-0 line. The rate is
    measured from the end of this run's first logged step (which pays for warm-up and
    compilation) and counts only this run's steps, so a resumed run's ETA is not skewed by
    the run before it."""

    def __init__(self, total_steps: int, clock=time.monotonic):
        self.total, self._clock = total_steps, clock
        self._first: tuple[int, float] | None = None

    def fields(self, step: int) -> tuple[str, str]:
        """('12/40 (30%)', '1m23s'); the ETA is '?' until a second step was seen."""
        now = self._clock()
        if self._first is None:
            self._first = (step, now)
        done = f"{step}/{self.total} ({100 * step / self.total:.0f}%)"
        first_step, t0 = self._first
        if step <= first_step:
            return done, "?"
        return done, format_duration((now - t0) / (step - first_step) * (self.total - step))


class ThroughputWindow:
    """Training seconds and the tokens trained in them, since the window opened. Both grow
    only in `step` (the time since the previous mark, and that step's tokens), so the clock
    and the token count always move together; `pause` drops the time spent in its block
    (a checkpoint save, a profiler flush) from the clock, and no tokens belong to it."""

    def __init__(self, clock=None):
        self._clock = clock or (lambda: time.perf_counter())  # looked up at each call (tests swap it)
        self.open()

    def open(self) -> None:
        self.seconds, self.tokens, self._mark = 0.0, 0, self._clock()

    def step(self, tokens: int) -> None:
        now = self._clock()
        self.seconds += now - self._mark
        self.tokens += tokens
        self._mark = now

    @contextlib.contextmanager
    def pause(self, settle=lambda: None):
        """`settle` (a device synchronize) runs first, so work queued by the last step is
        counted as training before the clock stops."""
        settle()
        self.step(0)
        try:
            yield
        finally:
            self._mark = self._clock()

    def rate(self) -> tuple[float, float]:
        """(tokens per second, seconds) of the window."""
        return (self.tokens / self.seconds if self.seconds > 0 else 0.0), self.seconds


class MetricsLogger:
    """The loop's metrics, one `log(step, stats)` call per step (every rank calls it).

    On a logging step (every `log_every`, and the run's last) it sums the loss over ranks,
    reads the figures to the host once, prints the rank-0 line (with progress and ETA
    towards `total_steps`) and hands the record to every sink (`open_sinks`: metrics.jsonl,
    TensorBoard); other steps cost nothing. Tokens/s and MFU come from a `ThroughputWindow`
    since the last logged step; time inside `paused()` (saving, profiler flush) is not in it.
    """

    def __init__(
        self,
        sinks: list,
        *,
        every: int,
        dims,
        dev,
        tokens_per_step: int,
        flops_per_token: float,
        peak: float,
        last_step: int,
        total_steps: int,
        say=print,
    ):
        self.sinks, self.every, self.last_step, self.say = sinks, every, last_step, say
        self.dims, self.dev, self.tokens_per_step = dims, dev, tokens_per_step
        self.flops_per_token, self.peak = flops_per_token, peak
        self.eta = Eta(total_steps)
        self.window = ThroughputWindow()

    def start(self, record: dict[str, Any]) -> None:
        """Write the run's start record and open the first throughput window."""
        from titan_train.runtime import device

        for sink in self.sinks:
            sink.write({"event": "start", **record})
        device.reset_peak_memory(self.dev)
        self.window.open()

    def log(self, step: int, stats) -> dict[str, Any] | None:
        import torch.distributed as dist

        from titan_train.runtime import device

        if step % self.every and step != self.last_step:
            self.window.step(self.tokens_per_step)
            return None
        loss = stats.loss.detach().clone()
        dist.all_reduce(loss)  # held by the last pipeline stage; tp ranks hold equal copies
        device.synchronize(self.dev)
        self.window.step(self.tokens_per_step)
        tps, elapsed = self.window.rate()
        world = self.dims.world_size
        record = {
            "step": step,
            "loss": loss.item() / (self.dims.dp * self.dims.tp),
            "grad_norm": stats.grad_norm.item(),
            "lr": stats.lr,
            "tokens_per_s": tps,
            "tokens_per_s_per_rank": tps / world,
            **mfu_fields(mfu(tps / world, self.flops_per_token, self.peak)),
            "peak_mem_gib": device.peak_memory_bytes(self.dev) / 2**30,
            "peak_mem_kind": device.peak_memory_kind(self.dev),
            "elapsed_s": elapsed,
        }
        if stats.loss_scale is not None:
            record["loss_scale"] = stats.loss_scale
        self.say(format_line(record, self.eta), flush=True)
        for sink in self.sinks:
            sink.write(record)
        self.window.open()
        return record

    @contextlib.contextmanager
    def paused(self, pausing: bool = True):
        """Time spent in this block is not training time (checkpoint saves, profiler flush).
        With `pausing` false the block does nothing worth excluding, so the device is not
        synchronized: the loop's steps that neither save nor profile keep their overlap."""
        from titan_train.runtime import device

        if not pausing:
            yield
            return
        with self.window.pause(settle=lambda: device.synchronize(self.dev)):
            yield

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
