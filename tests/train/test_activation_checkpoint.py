"""Activation checkpointing: none / full / selective train identically and AC lowers the
tensor peak memory (torch's MemTracker, not RSS). Correct under FSDP and FSDP x TP with
real processes."""

from __future__ import annotations

import pytest
import torch

from titan_train.build import build
from titan_train.config import job as config
from titan_train.config.parallel_dims import ParallelDims
from titan_train.step import train_step

from .conftest import REPO, assert_same_run, parity_run

MODES = ("none", "full", "selective")


def _steps_and_peak(mode: str, every: int = 1) -> tuple[list[float], float]:
    """Three steps on fixed batches; the peak tensor memory (MiB) of the second one."""
    from torch.distributed._tools.mem_tracker import MemTracker

    cfg = config.load(
        REPO / "configs" / "llama_debug.toml",
        [f'training.activation_checkpoint="{mode}"', f"training.ac_every={every}", "training.seq_len=256"],
    )
    parts = build(cfg, ParallelDims(dp=1), torch.device("cpu"))
    tokens = torch.randint(0, 2048, (4, 257), generator=torch.Generator().manual_seed(0))
    batches = [(tokens[:, :-1], tokens[:, 1:])]
    losses = [train_step(parts, batches).loss.item()]
    tracker = MemTracker()
    tracker.track_external(*parts.model_parts, *parts.optimizers.optimizers)
    with tracker:
        losses.append(train_step(parts, batches).loss.item())
    losses.append(train_step(parts, batches).loss.item())
    peak = tracker.get_tracker_snapshot("peak")
    return losses, sum(v["Total"] for v in peak.values()) / 2**20


def test_ac_modes_same_losses_lower_peak(world_of_one):
    results = {mode: _steps_and_peak(mode) for mode in MODES}
    every_other = _steps_and_peak("full", every=2)
    for mode in ("full", "selective"):
        assert results[mode][0] == pytest.approx(results["none"][0], abs=1e-5), mode
    assert every_other[0] == pytest.approx(results["none"][0], abs=1e-5)
    peak = {mode: results[mode][1] for mode in MODES}
    print("peak MiB", peak, "full every 2nd block", every_other[1])
    # full keeps only block inputs; selective keeps matmul/attention outputs; none keeps all
    assert peak["full"] < every_other[1] < peak["none"]
    assert peak["full"] < peak["selective"] < 0.9 * peak["none"], peak


def test_ac_keeps_checkpoint_keys(world_of_one):
    """The wrapper must not leak into the FQN contract (model.layers.0.attention.wq.weight)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    keys = {}
    for mode in ("none", "selective"):
        cfg = config.load(REPO / "configs" / "llama_debug.toml", [f'training.activation_checkpoint="{mode}"'])
        parts = build(cfg, ParallelDims(dp=1), torch.device("cpu"))
        keys[mode] = sorted(get_model_state_dict(parts.model_parts[0]))
    assert keys["selective"] == keys["none"] and "layers.0.attention.wq.weight" in keys["none"]


@pytest.mark.multirank
def test_full_ac_under_fsdp(fsdp_two, shared_runs):
    run = parity_run(shared_runs, "ac-full-fsdp", 2, ['training.activation_checkpoint="full"'])
    assert "ac full" in run.stdout
    assert_same_run(run, fsdp_two, 1e-5)


@pytest.mark.multirank
def test_selective_ac_under_fsdp_x_tp(fsdp_tp_four, shared_runs):
    run = parity_run(
        shared_runs, "ac-sel-fsdp-tp", 4, ['training.activation_checkpoint="selective"', "distributed.tp_size=2"]
    )
    assert "dp 2 x pp 1 x tp 2" in run.stdout and "ac selective" in run.stdout
    assert_same_run(run, fsdp_tp_four, 1e-5)
