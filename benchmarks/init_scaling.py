"""Weight init on ONE rank of an FSDP job, as the number of ranks sharing the model grows:
the trainer's per-shard tiled init next to the naive "draw the full parameter, keep my
slice" (what the trainer did before). Prints figures; never passes or fails.

    python benchmarks/init_scaling.py [--config llama_7b] [--layers 1] [--worlds 1 8 32 64]

The model is built on meta and sharded with FSDP2 over a fake process group of each world
size (this process is rank 0), then materialized, as `titan-train run` does. Memory is
torch's MemTracker peak of tensors during init (not RSS). One intra-op thread, so the
timings are comparable on a shared machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def naive_init(model, seed: int) -> int:
    """The old way: every rank draws each full parameter, then copies its shard."""
    import torch
    from torch import nn

    from titan_train.models.llama import init_std
    from titan_train.models.sharded_init import shard_box, stable_name

    drawn = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            std = init_std(stable_name(name), model.args)
            local = param.to_local()
            if std is None:
                local.fill_(1.0)
                continue
            global_shape, local_shape, offset = shard_box(param)
            full = nn.init.trunc_normal_(
                torch.empty(global_shape), std=std, a=-3 * std, b=3 * std, generator=torch.Generator().manual_seed(seed)
            )
            drawn += full.numel()
            index = tuple(slice(o, o + n) for o, n in zip(offset, local_shape))
            local.copy_(full[index])
    return drawn


def one_rank(cfg, world: int, method: str) -> tuple[int, int, float, float]:
    """(values held, values drawn, seconds, peak MiB) of rank 0's init."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.distributed.parallelize import apply_fsdp
    from titan_train.models.llama import Transformer

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        with torch.device("meta"):
            model = Transformer(cfg.model)
        apply_fsdp(
            model,
            ParallelDims(dp=world).build_mesh("cpu")["dp"],
            param_dtype=torch.float32,
            cpu_offload=False,
            sum_reductions_only=True,
        )
        model.to_empty(device="cpu")
        held = sum(p.to_local().numel() for p in model.parameters())
        start = time.perf_counter()
        drawn = model.init_weights(0) if method == "tiled" else naive_init(model, 0)
        seconds = time.perf_counter() - start
        model.to_empty(device="cpu")  # again, under the tracker, for the memory figure
        tracker = MemTracker()
        tracker.track_external(model)
        with tracker:
            model.init_weights(0) if method == "tiled" else naive_init(model, 0)
        peak = sum(v["Total"] for v in tracker.get_tracker_snapshot("peak").values()) / 2**20
        return held, drawn, seconds, peak
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="llama_7b", help="a shipped config name (its real shapes)")
    ap.add_argument("--layers", type=int, default=1, help="transformer blocks to keep (memory of this machine)")
    ap.add_argument("--worlds", type=int, nargs="+", default=[1, 8, 32, 64])
    a = ap.parse_args()

    import torch
    from tabulate import tabulate

    from titan_train.config import job as config

    torch.set_num_threads(1)
    cfg = config.load(REPO / "configs" / f"{a.config}.toml", [f"model.n_layers={a.layers}"])
    print(f"{a.config} shapes with {a.layers} block(s); rank 0 of N FSDP ranks; torch {torch.__version__}, 1 thread")
    rows = []
    for world in a.worlds:
        held, drawn, secs, peak = one_rank(cfg, world, "tiled")
        _, naive_drawn, naive_secs, naive_peak = one_rank(cfg, world, "naive")
        rows.append(
            (
                world,
                f"{held / 1e6:,.1f}M",
                f"{drawn / 1e6:,.1f}M",
                f"{secs:.2f}",
                f"{peak:,.0f}",
                f"{naive_drawn / 1e6:,.1f}M",
                f"{naive_secs:.2f}",
                f"{naive_peak:,.0f}",
            )
        )
        print(f"  world {world} done", flush=True)
    print(
        tabulate(
            rows,
            headers=["ranks", "values held", "tiled: drawn", "s", "peak MiB", "naive: drawn", "s", "peak MiB"],
            colalign=("right",) * 8,
        )
    )


if __name__ == "__main__":
    main()
