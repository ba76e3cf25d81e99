"""Pipeline parallel with real processes on gloo: the debug model in fp32 gives the losses
of one rank (within 1e-4 over 10 steps) under every schedule and 3-D layout, and a
checkpoint saved by a pipeline resumes on a layout without one."""

from __future__ import annotations

import pytest

from titan_train.config.parallel_dims import stage_layers
from titan_train.distributed.pipeline import local_stage_ids

from .conftest import FAST, PARITY_STEPS, assert_same_run, losses, ok, parity_run, run_trainer


def test_stages_split_layers_evenly_and_interleave():
    assert stage_layers(6, 2) == [[0, 1, 2], [3, 4, 5]]
    assert stage_layers(7, 3) == [[0, 1, 2], [3, 4], [5, 6]]  # remainder to the early stages
    assert stage_layers(80, 8)[-1] == list(range(70, 80))
    assert local_stage_ids(0, 2, 2) == [0] and local_stage_ids(1, 2, 4) == [1, 3]


@pytest.mark.multirank
@pytest.mark.parametrize(
    "schedule,nproc,extra,layout",
    [
        ("gpipe", 2, [], "dp 1 x pp 2 x tp 1"),
        ("1f1b", 2, [], "dp 1 x pp 2 x tp 1"),
        ("interleaved_1f1b", 2, [], "dp 1 x pp 2 x tp 1"),
        ("1f1b", 4, ["distributed.tp_size=2"], "dp 1 x pp 2 x tp 2"),
        ("1f1b", 4, [], "dp 2 x pp 2 x tp 1"),
    ],
)
def test_pipeline_matches_one_rank(schedule, nproc, extra, layout, one_rank, shared_runs):
    run = parity_run(
        shared_runs,
        f"pp-{schedule}-{nproc}",
        nproc,
        ["distributed.pp_size=2", f'distributed.pp_schedule="{schedule}"', *extra],
    )
    assert layout in run.stdout and f"pp {schedule} x 2 micro-batches" in run.stdout
    assert_same_run(run, one_rank, 1e-4)


@pytest.mark.multirank
def test_pipeline_checkpoint_resumes_on_data_parallel(one_rank, tmp_path):
    """Saved with pp=2 (stage 0 and stage 1 write disjoint keys), resumed with dp=2 (FSDP):
    DCP reshards because each parameter's key is its FQN in the whole model."""
    common = FAST + [f"training.steps={PARITY_STEPS}", "checkpoint.save_interval=5"]
    ok(
        run_trainer(
            tmp_path,
            nproc=2,
            overrides=common + ["distributed.pp_size=2", "distributed.pp_microbatches=4"],
            extra=["--stop-after", "5"],
        )
    )
    proc = ok(run_trainer(tmp_path, nproc=2, overrides=common))
    assert "dp 2 x pp 1 x tp 1" in proc.stdout and "(step 5)" in proc.stdout
    got = losses(tmp_path)
    assert sorted(got) == list(range(1, PARITY_STEPS + 1))
    for step in range(1, PARITY_STEPS + 1):
        assert got[step] == pytest.approx(one_rank.losses[step], abs=1e-4), (step, got[step], one_rank.losses[step])
