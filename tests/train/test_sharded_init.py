"""Init draws only the rank's shard: the same values on every layout, and the work and
tensor memory of one rank fall with the number of ranks sharing a large model."""

from __future__ import annotations

import pytest
import torch

from titan_train.config import job as config
from titan_train.models.sharded_init import fill_trunc_normal_

from .conftest import REPO


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """The (start, stop) of each chunk, as DTensor / FSDP2 Shard cuts a dim (torch.chunk)."""
    chunks = torch.arange(n).chunk(parts)
    return [(int(c[0]), int(c[-1]) + 1) for c in chunks]


@pytest.mark.parametrize("shape", [(100, 1100), (70,), (33, 512)])
def test_any_cut_of_a_parameter_has_the_same_values(shape):
    full = torch.empty(shape)
    fill_trunc_normal_(full, shape, (0,) * len(shape), std=0.02, seed=7, key="layers.0.feed_forward.w1.weight")
    assert full.abs().max() <= 0.06 and full.std() > 0.01
    cols = shape[1] if len(shape) == 2 else 1
    for row_parts in (1, 2, 3, 5):
        for col_parts in (1, 2, 3) if len(shape) == 2 else (1,):
            for r0, r1 in _ranges(shape[0], row_parts):
                for c0, c1 in _ranges(cols, col_parts):
                    block = torch.empty((r1 - r0, c1 - c0)[: len(shape)])
                    offset = (r0, c0)[: len(shape)]
                    fill_trunc_normal_(block, shape, offset, std=0.02, seed=7, key="layers.0.feed_forward.w1.weight")
                    want = full[r0:r1, c0:c1] if len(shape) == 2 else full[r0:r1]
                    assert torch.equal(block, want), (row_parts, col_parts, r0, c0)
    other = torch.empty(shape)
    fill_trunc_normal_(other, shape, (0,) * len(shape), std=0.02, seed=7, key="layers.1.feed_forward.w1.weight")
    assert not torch.equal(other, full)  # each parameter has its own stream


def _init_one_rank_of(world: int, fake_world) -> tuple[int, int, float]:
    """(values held, values drawn, peak tensor MiB during init) on rank 0 of `world` FSDP
    ranks sharing one block of LLaMA-2 70B plus its embedding and output (1.4B params),
    built on meta and materialized, as the trainer does."""
    from torch.distributed._tools.mem_tracker import MemTracker

    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.distributed.parallelize import apply_fsdp
    from titan_train.models.llama import Transformer

    fake_world(world)
    cfg = config.load(REPO / "configs" / "llama_70b.toml", ["model.n_layers=1"])
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
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        drawn = model.init_weights(seed=0)
    peak = tracker.get_tracker_snapshot("peak")
    torch.distributed.destroy_process_group()
    return held, drawn, sum(v["Total"] for v in peak.values()) / 2**20


def test_init_work_and_memory_are_per_shard(fake_world):
    results = {world: _init_one_rank_of(world, fake_world) for world in (32, 64, 128)}
    print({w: (held, drawn, round(mib, 1)) for w, (held, drawn, mib) in results.items()})
    for world, (held, drawn, mib) in results.items():
        assert held <= 1.4e9 / world * 1.01
        assert held <= drawn <= 1.05 * held, (world, held, drawn)  # only tile borders are extra
        assert mib <= 1.3 * held * 4 / 2**20, (world, mib)  # the shard, plus one param's staging
    for small, large in ((32, 64), (64, 128)):
        assert results[large][1] == pytest.approx(results[small][1] / 2, rel=0.05)
        assert results[large][2] == pytest.approx(results[small][2] / 2, rel=0.1)
