"""Loss parity across meshes, with real processes on gloo: the same global batch and data
order must give the same fp32 losses on 1 rank, 2 ranks FSDP and 4 ranks FSDP x TP."""
from __future__ import annotations

import pytest

from .conftest import FAST, losses, ok, run_trainer

STEPS = 10


@pytest.fixture(scope="module")
def single_rank(tmp_path_factory):
    wd = tmp_path_factory.mktemp("one")
    ok(run_trainer(wd, nproc=1, overrides=FAST + [f"training.steps={STEPS}"]))
    return losses(wd)


def test_single_rank_learns(single_rank):
    assert sorted(single_rank) == list(range(1, STEPS + 1))
    assert single_rank[STEPS] < single_rank[1] - 1.0, single_rank


def test_two_ranks_fsdp_under_plain_torchrun_match_one_rank(single_rank, workdir):
    proc = ok(run_trainer(workdir, nproc=2, torchrun=True, overrides=FAST + [f"training.steps={STEPS}"]))
    assert "dp 2 x pp 1 x tp 1" in proc.stdout
    two = losses(workdir)
    for step in range(1, STEPS + 1):
        assert two[step] == pytest.approx(single_rank[step], abs=1e-4), (step, two[step], single_rank[step])


def test_four_ranks_fsdp_x_tp_match_one_rank(single_rank, workdir):
    proc = ok(run_trainer(workdir, nproc=4, overrides=FAST + [f"training.steps={STEPS}", "distributed.tp_size=2"]))
    assert "dp 2 x pp 1 x tp 2" in proc.stdout
    four = losses(workdir)
    for step in range(1, STEPS + 1):
        assert four[step] == pytest.approx(single_rank[step], abs=1e-4), (step, four[step], single_rank[step])


def test_grad_accumulation_matches_one_big_batch(single_rank, workdir):
    ok(run_trainer(workdir, nproc=2, overrides=FAST + ["training.steps=4", "training.grad_accum_steps=2"]))
    accum = losses(workdir)
    for step in range(1, 5):
        assert accum[step] == pytest.approx(single_rank[step], abs=1e-4)
