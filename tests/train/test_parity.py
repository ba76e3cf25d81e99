"""Loss parity across meshes, with real processes on gloo: the same global batch and data
order must give the same fp32 losses on 1 rank, 2 ranks FSDP and 4 ranks FSDP x TP."""

from __future__ import annotations

import pytest

from .conftest import FAST, PARITY_STEPS, assert_same_run, losses, ok, run_trainer

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes


def test_single_rank_learns(one_rank):
    assert sorted(one_rank.losses) == list(range(1, PARITY_STEPS + 1))
    assert one_rank.losses[PARITY_STEPS] < one_rank.losses[1] - 1.0, one_rank.losses


def test_two_ranks_fsdp_under_plain_torchrun_match_one_rank(one_rank, fsdp_two):
    assert "dp 2 x pp 1 x tp 1" in fsdp_two.stdout
    assert_same_run(fsdp_two, one_rank, 1e-4)


def test_four_ranks_fsdp_x_tp_match_one_rank(one_rank, fsdp_tp_four):
    assert "dp 2 x pp 1 x tp 2" in fsdp_tp_four.stdout
    assert_same_run(fsdp_tp_four, one_rank, 1e-4)


def test_grad_accumulation_matches_one_big_batch(one_rank, workdir):
    ok(
        run_trainer(
            workdir,
            nproc=2,
            overrides=FAST + [f"training.steps={PARITY_STEPS}", "training.grad_accum_steps=2", "metrics.log_every=4"],
        )
    )
    accum = losses(workdir)
    assert sorted(accum) == [4, 8, 10]  # logged every 4th step and at the last
    for step in accum:
        assert accum[step] == pytest.approx(one_rank.losses[step], abs=1e-4)
