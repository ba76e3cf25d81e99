"""`--exact`: the trainer's own build + train_step under FakeTensorMode on a fake process group.
It must run the very functions `titan-train run` runs, agree with a real run, and its depth
extrapolation must agree with running every layer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from titan_doctor.diagnose import memory_exact as mx  # noqa: E402
from titan_train.config.job import load, validate  # noqa: E402
from titan_train.config.paths import configs_dir  # noqa: E402
from titan_train.memory import estimate as me  # noqa: E402

from .conftest import run_json  # noqa: E402

TINY = [
    "model.d_model=64",
    "model.n_heads=4",
    "model.n_kv_heads=4",
    "model.vocab_size=256",
    "model.multiple_of=32",
    "model.max_seq_len=64",
    "training.seq_len=32",
    "training.batch_size=8",
]


def tiny(*overrides: str):
    return load(configs_dir() / "llama_debug.toml", TINY + list(overrides))


def test_the_planner_runs_the_functions_the_trainer_loop_runs():
    from titan_train import build, step, train

    planner_build, planner_step = mx.trainer_seams()
    assert planner_build is build.build is train.build
    assert planner_step is step.train_step is train.train_step


def test_a_change_to_the_trainers_step_or_build_changes_the_plan(monkeypatch):
    from titan_train import build as build_mod
    from titan_train import step as step_mod

    cfg = tiny("model.n_layers=2")
    before = mx.exact_peaks(cfg, 2)[0].peak_bytes
    extra = 4 * 2**20
    real_step, real_build, builds = step_mod.train_step, build_mod.build, []

    def step_holding_more(parts, batches):
        held = torch.empty(extra // 4)  # a trainer change that keeps 4 MiB more through the step
        stats = real_step(parts, batches)
        del held
        return stats

    def counted_build(*args, **kwargs):
        builds.append(args[1])
        return real_build(*args, **kwargs)

    monkeypatch.setattr(step_mod, "train_step", step_holding_more)
    monkeypatch.setattr(build_mod, "build", counted_build)
    after = mx.exact_peaks(cfg, 2)[0].peak_bytes
    assert after == before + extra
    assert len(builds) == 1 and builds[0].dp == 2


@pytest.mark.multirank
@pytest.mark.parametrize(
    "world,overrides",
    [
        (2, ['training.mixed_precision="bf16"', 'training.activation_checkpoint="selective"']),
        (2, ["distributed.pp_size=2"]),
        (2, ["distributed.tp_size=2", "model.vocab_size=4096"]),  # loss_parallel: the loss is most of the peak
    ],
)
def test_exact_equals_the_same_step_with_real_tensors_on_real_ranks(world, overrides):
    cfg = tiny("model.n_layers=4", *overrides)
    validate(cfg, world)
    exact = {p.stage: p.peak_bytes for p in mx.exact_peaks(cfg, world)}
    measured = {p.stage: p.peak_bytes for p in mx.measured_peaks(cfg, world)}
    assert exact == measured


@pytest.mark.parametrize(
    "world,overrides",
    [
        (2, []),
        (2, ['training.mixed_precision="bf16"', 'training.activation_checkpoint="full"']),
        (2, ["distributed.tp_size=2", "training.grad_accum_steps=2"]),
    ],
)
def test_depth_extrapolation_matches_running_every_layer(world, overrides):
    cfg = tiny("model.n_layers=8", *overrides)
    assert mx.can_extrapolate(cfg, 1)
    full = mx.exact_peaks(cfg, world, extrapolate=False)[0]
    guess = mx.exact_peaks(cfg, world)[0]
    assert "5 and 6 layers per stage" in guess.method and full.method == "full depth"
    for phase, value in guess.phases.items():
        assert value == pytest.approx(full.phases[phase], abs=64), phase
    assert guess.peak_bytes == pytest.approx(full.peak_bytes, abs=64)


def test_extrapolation_is_only_used_where_it_holds():
    assert not mx.can_extrapolate(tiny("model.n_layers=6"), 1)  # not deeper than the small runs
    assert not mx.can_extrapolate(
        tiny("model.n_layers=12", 'training.activation_checkpoint="full"', "training.ac_every=2"), 1
    )  # which blocks are checkpointed varies
    assert mx.can_extrapolate(tiny("model.n_layers=14", "distributed.pp_size=2"), 2)


def test_exact_and_analytic_agree_on_small_layouts():
    for world, overrides in (
        (2, []),
        (4, ["distributed.tp_size=2", 'training.mixed_precision="bf16"']),
        (2, ['training.activation_checkpoint="full"']),
        (2, ["training.loss_chunks=4", 'training.mixed_precision="bf16"']),
        (2, ["distributed.tp_size=2", "training.loss_chunks=4"]),
    ):
        cfg = tiny("model.n_layers=3", *overrides)
        exact = mx.exact_peaks(cfg, world)[0].peak_bytes
        analytic = me.estimate(me.layout(cfg, world, "gloo"), accelerator=False).peak_bytes
        assert analytic == pytest.approx(exact, rel=0.05), overrides


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ['training.mixed_precision="bf16"'],
        ["distributed.tp_size=2"],
        ["distributed.tp_size=2", 'training.mixed_precision="bf16"'],
    ],
)
def test_exact_and_analytic_agree_where_the_loss_is_most_of_the_peak(overrides):
    """Full-vocabulary logits: the loss's fp32 temporaries are most of the peak, so each one
    miscounted is 10-20%. (--exact once counted DTensor's global-shape metadata run in the
    loss_parallel handlers as an allocation; the analytic estimate an fp32 copy of the logits
    that aten._log_softmax does not make.)"""
    cfg = tiny("model.n_layers=3", "model.vocab_size=8192", *overrides)
    exact = mx.exact_peaks(cfg, 2)[0].peak_bytes
    analytic = me.estimate(me.layout(cfg, 2, "gloo"), accelerator=False)
    assert analytic.peak_bytes == pytest.approx(exact, rel=0.005), overrides
    assert analytic.worst.phase.startswith("backward start (loss gradient)")


def test_scalar_reads_of_fake_values_take_the_every_step_path():
    assert mx._hallucinated_scalar(torch.bool) is False
    assert mx._hallucinated_scalar(torch.int32) == 1
    assert mx._hallucinated_scalar(torch.float32) == 0.0


@pytest.mark.multirank
def test_doctor_exact_reports_both_methods():
    code, rows = run_json(
        "--config",
        "llama_debug",
        "--world-size",
        "2",
        "--device-memory",
        "4GiB",
        "--exact",
        *[a for o in TINY + ["model.n_layers=2"] for a in ("--set", o)],
    )
    assert code == 0
    exact = rows["memory.exact"]
    assert exact["status"] == "ok" and exact["data"]["verdict"] == "fits"
    assert exact["data"]["ranks"][0]["method"] == "full depth"
    assert "analytic" in exact["title"] and "FakeTensorMode" in exact["title"]
    tensors = exact["data"]["tensor_bytes"]
    analytic = rows["memory.plan"]["data"]["stages"][0]["tensor_bytes"]
    assert analytic == pytest.approx(tensors, rel=0.05)


@pytest.mark.multirank
@pytest.mark.parametrize("layers", [4, 14])
def test_1f1b_micro_batch_extrapolation_matches_running_them_all(layers):
    cfg = tiny(
        f"model.n_layers={layers}", "distributed.pp_size=2", "distributed.pp_microbatches=8", "training.batch_size=16"
    )
    guess = mx.exact_peaks(cfg, 2)
    assert all("3 and 4 of 8 pipeline micro-batches" in p.method for p in guess)
    assert ("layers per stage" in guess[0].method) == (layers == 14)
    full = mx.exact_peaks(cfg, 2, extrapolate=False)
    for g, f in zip(guess, full):
        assert g.peak_bytes == pytest.approx(f.peak_bytes, abs=256), g.stage


@pytest.mark.multirank
def test_interleaved_stages_are_measured_and_the_estimate_follows_them():
    """Interleaved 1F1B runs two stages per rank: the tracker must keep one stage's module
    statistics while the other runs forward (it raised KeyError in the first stage's backward),
    and the analytic estimate must hold what torch's schedule holds per stage (it counted
    (pp - rank) micro-batches on every stage: +12% here)."""
    cfg = tiny(
        "model.n_layers=8",
        "distributed.pp_size=2",
        'distributed.pp_schedule="interleaved_1f1b"',
        "distributed.pp_microbatches=4",
    )
    validate(cfg, 2)
    measured = {p.stage: p.peak_bytes for p in mx.measured_peaks(cfg, 2)}
    exact = {p.stage: p.peak_bytes for p in mx.exact_peaks(cfg, 2, extrapolate=False)}
    analytic = {s.stage: s.peak_bytes for s in me.estimate(me.layout(cfg, 2, "gloo"), accelerator=False).stages}
    assert sorted(measured) == sorted(exact) == [0, 1]
    for stage in (0, 1):
        assert exact[stage] == pytest.approx(measured[stage], rel=0.05), stage
        assert analytic[stage] == pytest.approx(measured[stage], rel=0.05), stage
