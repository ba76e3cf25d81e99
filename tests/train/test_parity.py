"""Loss parity across meshes, with real processes on gloo: the same global batch and data
order must give the same fp32 losses on 1 rank, 2 ranks FSDP and 4 ranks FSDP x TP."""

from __future__ import annotations

import pytest

from .conftest import FAST, PARITY_STEPS, assert_same_run, losses, ok, parity_run, run_trainer

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


@pytest.mark.parametrize(
    "name,nproc,layout,shown",
    [
        ("tp2", 2, ["distributed.tp_size=2"], "dp 1 x pp 1 x tp 2"),
        ("pp2tp2", 4, ["distributed.tp_size=2", "distributed.pp_size=2"], "dp 1 x pp 2 x tp 2"),
        ("tp2chunks4", 2, ["distributed.tp_size=2", "training.loss_chunks=4"], "dp 1 x pp 1 x tp 2"),
        ("fsdp2chunks4", 2, ["training.loss_chunks=4"], "dp 2 x pp 1 x tp 1"),
    ],
)
def test_loss_parallel_and_chunked_loss_match_one_rank(one_rank, shared_runs, name, nproc, layout, shown):
    """Vocabulary-sharded logits and loss_parallel, alone, on the last pipeline stage and in
    sequence pieces (training.loss_chunks, also under FSDP): the fp32 losses of one rank
    within 1e-5 (grad norms within 1e-3, as for dp x tp)."""
    run = parity_run(shared_runs, name, nproc, layout)
    assert shown in run.stdout
    assert sorted(run.losses) == list(range(1, PARITY_STEPS + 1))
    for step in run.losses:
        assert run.losses[step] == pytest.approx(one_rank.losses[step], abs=1e-5), (step, run.losses)
        assert run.grad_norms[step] == pytest.approx(one_rank.grad_norms[step], abs=1e-3), step


def test_hsdp_two_replicas_of_two_shards_match_one_rank(one_rank, shared_runs):
    """HSDP on 4 ranks: FSDP shards over 2, replicates over 2 (the 2-D mesh); the fp32 losses
    of one rank within 1e-5, grad norms within 1e-3 (as for the other layouts: the replicas'
    all-reduce adds the shards' sums in another order)."""
    run = parity_run(shared_runs, "hsdp2x2", 4, ["distributed.dp_replicate_size=2", "distributed.dp_shard_size=2"])
    assert "dp 4 (replicate 2 x shard 2) x pp 1 x tp 1" in run.stdout
    assert sorted(run.losses) == list(range(1, PARITY_STEPS + 1))
    print("hsdp 2x2 vs 1 rank, max |loss diff|", max(abs(run.losses[k] - one_rank.losses[k]) for k in run.losses))
    print("max |grad norm diff|", max(abs(run.grad_norms[k] - one_rank.grad_norms[k]) for k in run.losses))
    for step in run.losses:
        assert run.losses[step] == pytest.approx(one_rank.losses[step], abs=1e-5), (step, run.losses)
        assert run.grad_norms[step] == pytest.approx(one_rank.grad_norms[step], abs=1e-3), step


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
