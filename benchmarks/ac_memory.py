"""Peak tensor memory and step time of one training step under each activation
checkpointing mode, side by side, with the losses to show they train identically. Prints
figures; never passes or fails.

    python benchmarks/ac_memory.py [--seq-len 512] [--batch 4] [--layers 6]

Memory is torch's MemTracker peak of all tensors (parameters, gradients, optimizer state,
activations, temporaries) during one step on CPU, not the process RSS. The step goes through
the trainer's own `build` + `train_step` on a one-rank gloo group.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (activation_checkpoint, ac_every, selective_ac_option)
MODES = [
    ("none", 1, "all_mm"),
    ("full", 1, "all_mm"),
    ("full", 2, "all_mm"),
    ("selective", 1, "all_mm"),
    ("selective", 1, "op"),
]


def measure(mode: str, every: int, option: str, seq_len: int, batch: int, layers: int, steps: int):
    """(losses, peak MiB by category, median step seconds)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from titan_train.build import build
    from titan_train.config import job as config
    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.step import train_step

    cfg = config.load(
        REPO / "configs" / "llama_debug.toml",
        [
            f'training.activation_checkpoint="{mode}"',
            f"training.ac_every={every}",
            f'training.selective_ac_option="{option}"',
            f"training.seq_len={seq_len}",
            f"model.n_layers={layers}",
            f"model.max_seq_len={max(seq_len, 2048)}",
        ],
    )
    parts = build(cfg, ParallelDims(dp=1), torch.device("cpu"))
    tokens = torch.randint(0, cfg.model.vocab_size, (batch, seq_len + 1), generator=torch.Generator().manual_seed(0))
    batches = [(tokens[:, :-1], tokens[:, 1:])]
    losses = [train_step(parts, batches).loss.item()]  # creates the optimizer state
    tracker = MemTracker()
    tracker.track_external(*parts.model_parts, *parts.optimizers.optimizers)
    with tracker:
        losses.append(train_step(parts, batches).loss.item())
    peak = {
        str(k).split(".")[-1]: v / 2**20
        for dev in tracker.get_tracker_snapshot("peak").values()
        for k, v in dev.items()
    }
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        losses.append(train_step(parts, batches).loss.item())
        times.append(time.perf_counter() - start)
    return losses, peak, statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--steps", type=int, default=3, help="timed steps (the median is shown)")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    from tabulate import tabulate

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    print(
        f"llama_debug shape with {a.layers} blocks, batch {a.batch} x seq_len {a.seq_len}, fp32, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; peak = MemTracker, all tensors"
    )
    rows, base = [], None
    for mode, every, option in MODES:
        losses, peak, secs = measure(mode, every, option, a.seq_len, a.batch, a.layers, a.steps)
        base = base or (peak["Total"], secs, losses)
        name = mode if every == 1 else f"{mode}, ac_every={every}"
        name += f" ({option})" if mode == "selective" else ""
        rows.append(
            (
                name,
                f"{peak['Total']:,.1f}",
                f"{peak['ACT']:,.1f}",
                f"{peak['Total'] / base[0]:.2f}",
                f"{secs:.3f}",
                f"{secs / base[1]:.2f}",
                f"{max(abs(x - y) for x, y in zip(losses, base[2])):.1e}",
            )
        )
    dist.destroy_process_group()
    print(
        tabulate(
            rows,
            headers=[
                "activation_checkpoint",
                "peak MiB",
                "activations MiB",
                "vs none",
                "step s",
                "vs none",
                "max |loss diff|",
            ],
            colalign=("left", "right", "right", "right", "right", "right", "right"),
        )
    )


if __name__ == "__main__":
    main()
