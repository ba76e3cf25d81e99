"""The seams later work plugs into: build + train_step run under FakeTensorMode with a fake
process group (what the memory planner does), and the gradient norm costs exactly one
explicit all-reduce per mesh dim, with no DTensor collectives."""

from __future__ import annotations

import pytest
import torch

from titan_train.build import build
from titan_train.config import job as config
from titan_train.config.parallel_dims import ParallelDims
from titan_train.step import train_step

from .conftest import REPO


def _cfg(*overrides: str):
    return config.load(REPO / "configs" / "llama_debug.toml", ["training.seq_len=64", "model.n_layers=2", *overrides])


@pytest.mark.parametrize("tp,ac", [(2, "selective"), (1, "none")])
def test_build_and_step_under_fake_tensors(tp, ac, fake_world):
    """Nothing in build or train_step reads a value back to the host: under FakeTensorMode
    a `.item()` would raise DataDependentOutputException."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    fake_world(4)
    cfg = _cfg(f"distributed.tp_size={tp}", f'training.activation_checkpoint="{ac}"')
    config.validate(cfg, 4)
    dims = ParallelDims.for_world(4, tp=tp)
    with FakeTensorMode(allow_non_fake_inputs=True):
        parts = build(cfg, dims, torch.device("cpu"))
        tokens = torch.randint(0, 2048, (8 // dims.dp, 65))
        stats = train_step(parts, [(tokens[:, :-1], tokens[:, 1:])])
    assert isinstance(stats.loss, FakeTensor) and isinstance(stats.grad_norm, FakeTensor)
    assert all(isinstance(p.to_local(), FakeTensor) for p in parts.parameters())
    assert stats.loss_scale is None and not stats.skipped


@pytest.mark.parametrize("world,tp,want", [(4, 2, 2), (4, 1, 1), (2, 2, 2)])
def test_grad_norm_is_one_all_reduce_per_mesh_dim(world, tp, want, fake_world):
    """dp x tp: one over dp, one over tp. tp alone (no FSDP): the sequence-parallel norm
    weights' pending sums are finished in one flattened all-reduce, then one for the norm."""
    from torch.distributed.tensor.debug import CommDebugMode

    from titan_train.components.optim import global_grad_norm, reduce_partial_grads_

    fake_world(world)
    parts = build(_cfg(f"distributed.tp_size={tp}"), ParallelDims.for_world(world, tp=tp), torch.device("cpu"))
    tokens = torch.randint(0, 2048, (2, 65))
    parts.forward_backward(tokens[:, :-1], tokens[:, 1:])
    with CommDebugMode() as comm:
        reduce_partial_grads_(parts.parameters())
        global_grad_norm(parts.parameters(), parts.mesh, parts.device)
    counts = {str(op): n for op, n in comm.get_comm_counts().items()}
    assert counts == {"c10d.allreduce_": want}, counts


def test_compile_per_block_trains_like_eager(world_of_one):
    """training.compile = true compiles each block in place (names unchanged) and gives the
    eager losses."""
    results = {}
    for compile_ in (False, True):
        parts = build(_cfg(f"training.compile={str(compile_).lower()}"), ParallelDims(dp=1), torch.device("cpu"))
        tokens = torch.randint(0, 2048, (2, 65), generator=torch.Generator().manual_seed(0))
        results[compile_] = [train_step(parts, [(tokens[:, :-1], tokens[:, 1:])]).loss.item() for _ in range(3)]
        blocks = list(parts.model_parts[0].layers.values())
        assert all((b._compiled_call_impl is not None) == compile_ for b in blocks)
    assert results[True] == pytest.approx(results[False], abs=1e-4)


def test_tp_logits_are_vocabulary_sharded(fake_world):
    """Loss parallel: under tp the output projection leaves each rank V/tp of the logits (a
    DTensor sharded on its last dim), never the full vocabulary; the loss is a plain tensor."""
    from torch.distributed.tensor import DTensor, Shard

    from titan_train.components.loss import cross_entropy, loss_context

    fake_world(2)
    parts = build(_cfg("distributed.tp_size=2"), ParallelDims.for_world(2, tp=2), torch.device("cpu"))
    tokens = torch.randint(0, 2048, (2, 65))
    with loss_context(True):
        logits = parts.model_parts[0](tokens[:, :-1])
        loss = cross_entropy(logits, tokens[:, 1:])
    assert isinstance(logits, DTensor) and logits.placements == (Shard(2),)
    assert logits.to_local().shape == (2, 64, 1024)
    assert not isinstance(loss, DTensor) and loss.shape == ()
