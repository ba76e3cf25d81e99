"""The trainer with [checkpoint] initial_load_path and export_final, run for real: a run exports
HF safetensors; new runs on 2 ranks start from that export and from the same run's own DCP
step folder and train identically; a checkpoint that does not fit is refused before any rank
starts, naming the config field."""

from __future__ import annotations

import pytest
import torch

from titan_train.checkpoint.formats import dcp_io, detect
from titan_train.checkpoint.formats.sources import Source

from .conftest import FAST, losses, ok, run_in_process, run_trainer

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes

pytest.importorskip("safetensors")


def test_start_from_hf_export_equals_start_from_native_dcp(tmp_path):
    first, from_hf, from_dcp = (tmp_path / d for d in ("first", "from_hf", "from_dcp"))
    for d in (first, from_hf, from_dcp):
        d.mkdir()
    proc = ok(
        run_trainer(
            first, overrides=FAST + ["training.steps=2", "checkpoint.save_interval=2", "checkpoint.export_final=hf"]
        )
    )
    folder = first / "outputs" / "llama_debug" / "checkpoints"
    assert f"exported the final model to {folder.relative_to(first)}/export-step-2" in proc.stdout
    export, step = folder / "export-step-2", folder / "step-2"
    info = detect.describe(export)
    assert info.format == "hf" and info.declared["n_heads"] == 16
    saved = dcp_io.load_everything(step)
    native = saved["model"]  # the flat layout: model.<fqn>
    source = Source(info, heads={"n_heads": 16, "n_kv_heads": 16})
    assert all(torch.equal(source.read(k), native[k]) for k in native)

    common = FAST + ["training.steps=2"]
    hf_run = ok(run_trainer(from_hf, nproc=2, overrides=common + [f"checkpoint.initial_load_path={export}"]))
    assert "HuggingFace safetensors, HF names mapped, q/k un-permuted, 57 tensors" in hf_run.stdout
    dcp_run = ok(run_trainer(from_dcp, nproc=2, overrides=common + [f"checkpoint.initial_load_path={folder}"]))
    assert "DCP checkpoint" in dcp_run.stdout
    assert losses(from_hf) == losses(from_dcp) and sorted(losses(from_hf)) == [1, 2]
    fresh = losses(first)[1]
    assert losses(from_hf)[1] < fresh  # it really started from the trained weights


def test_checkpoint_that_does_not_fit_is_refused_before_any_rank_starts(tmp_path, monkeypatch):
    """The first refusal in a real process; the other two are the same preflight, in this one."""
    ok(run_trainer(tmp_path, overrides=FAST + ["training.steps=1", "checkpoint.export_final=torch"]))
    export = tmp_path / "outputs" / "llama_debug" / "checkpoints" / "export-step-1"
    assert (export / "model.pt").is_file()
    other = tmp_path / "other"
    other.mkdir()
    proc = run_trainer(
        other, nproc=2, overrides=FAST + ["model.vocab_size=4096", f"checkpoint.initial_load_path={export}"]
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"titan-train: error: checkpoint {export} does not fit the config: vocab_size: checkpoint 2048, config 4096 "
        "(tok_embeddings.weight [2048, 256]); set [model] vocab_size = 2048"
    ]
    assert not (other / "outputs").exists()
    proc = run_in_process(other, monkeypatch, overrides=FAST + [f"checkpoint.initial_load_path={tmp_path}/missing"])
    assert proc.returncode == 2 and "missing: no such file or folder" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_in_process(
        other,
        monkeypatch,
        nproc=2,
        overrides=FAST + [f"checkpoint.initial_load_path={export}", "checkpoint.initial_load_model_only=false"],
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"initial_load_model_only = false needs a DCP checkpoint with optimizer state; {export} is a " in proc.stderr
    ) and "; fix: set checkpoint.initial_load_model_only = true (weights only)" in proc.stderr
    assert not (other / "outputs").exists()


def test_rerun_of_a_finished_job_writes_a_missing_export_and_keeps_an_existing_one(tmp_path):
    """export_final set only after the run ended: the rerun trains nothing but exports the
    resumed weights; a second rerun keeps that export; the other format is written beside it."""
    run = FAST + ["training.steps=2", "checkpoint.save_interval=2"]
    first = ok(run_trainer(tmp_path, overrides=run))
    # FAST warms up for 2 steps: on a 2-step run that is worth a warning, not a refusal
    assert "[titan-train] warning: training.warmup_steps = 2 >= training.steps = 2: " in first.stdout
    folder = tmp_path / "outputs" / "llama_debug" / "checkpoints"
    export = folder / "export-step-2"
    assert not export.exists()

    proc = ok(run_trainer(tmp_path, nproc=2, overrides=run + ["checkpoint.export_final=torch"]))
    assert "nothing to train" in proc.stdout and "warning: training.warmup_steps" not in proc.stdout
    assert f"exported the final model to {export.relative_to(tmp_path)}" in proc.stdout
    assert sorted(losses(tmp_path)) == [1, 2]  # no step trained again
    native = dcp_io.load_everything(folder / "step-2")["model"]
    exported = torch.load(export / "model.pt", weights_only=True)
    assert sorted(exported) == sorted(k.removeprefix("model.") for k in native)
    assert all(torch.equal(exported[k.removeprefix("model.")], v) for k, v in native.items())

    before = (export / "model.pt").stat().st_mtime_ns
    proc = ok(run_trainer(tmp_path, nproc=2, overrides=run + ["checkpoint.export_final=torch"]))
    assert (
        f"{export.relative_to(tmp_path)} already holds the final model (torch); delete it to export again"
        in proc.stdout
    )
    assert (export / "model.pt").stat().st_mtime_ns == before

    proc = ok(run_trainer(tmp_path, overrides=run + ["checkpoint.export_final=hf"]))
    beside = folder / "export-step-2-hf"  # the torch export stays where it was (issue 18)
    assert f"exported the final model to {beside.relative_to(tmp_path)}" in proc.stdout
    assert detect.describe(beside).format == "hf" and (beside / "config.json").is_file()
    assert (export / "model.pt").stat().st_mtime_ns == before


# A tiny GQA LLaMA for the pipeline runs: 2 blocks, so pp = 2 puts one block on each stage.
PP_MODEL = ["model.d_model=64", "model.n_heads=4", "model.n_kv_heads=2", "model.n_layers=2", "model.multiple_of=16"]
# One micro-batch and no clipping: the pipeline then does exactly the 1-rank arithmetic (the
# activations cross between stages unchanged), so the exports can be compared bit for bit.
PP_EXACT = ["distributed.pp_schedule=gpipe", "distributed.pp_microbatches=1", "training.max_norm=0"]


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory):
    """An HF-layout LLaMA (HF names, permuted q/k, written here) as initial_load_path, trained
    2 steps on 1 rank (saving step-2) and on pp = 2 (with another init seed, so only the load
    can make the two agree); both export_final = torch."""
    from titan_train.config.model_args import ModelArgs

    from ..checkpoints import weights, write_hf

    root = tmp_path_factory.mktemp("hf_runs")
    args = ModelArgs(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, multiple_of=16)
    source = weights(args, seed=5)
    hf = write_hf(root / "hf", source, args)
    common = (
        FAST
        + PP_MODEL
        + PP_EXACT
        + ["training.steps=2", f"checkpoint.initial_load_path={hf}", "checkpoint.export_final=torch"]
    )
    one, pp = root / "one", root / "pp"
    for d in (one, pp):
        d.mkdir()
    one_run = ok(run_trainer(one, overrides=common + ["checkpoint.save_interval=2"]))
    pp_run = ok(run_trainer(pp, nproc=2, overrides=common + ["distributed.pp_size=2", "training.seed=99"]))
    return root, source, one_run.stdout, pp_run.stdout


def _export(workdir, step: int) -> dict[str, torch.Tensor]:
    return torch.load(
        workdir / "outputs" / "llama_debug" / "checkpoints" / f"export-step-{step}" / "model.pt", weights_only=True
    )


def test_pipeline_stages_load_their_own_part_of_an_hf_llama_and_export_the_whole_model(hf_runs):
    """On pp = 2 each stage loads only its own tensors and the first loss equals the 1-rank
    run's; export_final gathers both stages into a file bit-identical to the 1-rank export."""
    root, source, one_out, pp_out = hf_runs
    whole = len(source)  # 1 embedding + 2 x 9 block tensors + norm + output
    assert f"HF names mapped, q/k un-permuted, {whole} tensors\n" in one_out
    # rank 0 is stage 0: the embedding and block 0 only
    assert f"HF names mapped, q/k un-permuted, {1 + 9} tensors\n" in pp_out
    assert losses(root / "pp")[1] == losses(root / "one")[1]

    want, got = _export(root / "one", 2), _export(root / "pp", 2)
    assert list(got) == list(want) and set(got) == set(source)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert not all(torch.equal(got[k], source[k]) for k in source)  # two real steps were taken


def test_pipeline_stages_start_from_a_dcp_step_with_its_optimizer_state(hf_runs):
    """initial_load_model_only = false from the 1-rank run's step-2 folder: on pp = 2 each stage
    loads its weights and AdamW moments; the next step (which uses the moments) and the export
    are those of the same start on 1 rank, and differ from a weights-only start."""
    root = hf_runs[0]
    step2 = root / "one" / "outputs" / "llama_debug" / "checkpoints" / "step-2"
    common = (
        FAST
        + PP_MODEL
        + PP_EXACT
        + [
            "training.steps=1",
            f"checkpoint.initial_load_path={step2}",
            "checkpoint.export_final=torch",
            "training.warmup_steps=0",
        ]
    )
    runs = {}
    for name, nproc, extra in (
        ("one_opt", 1, ["checkpoint.initial_load_model_only=false"]),
        ("pp_opt", 2, ["checkpoint.initial_load_model_only=false", "distributed.pp_size=2"]),
        ("pp_weights", 2, ["distributed.pp_size=2"]),
    ):
        (root / name).mkdir()
        runs[name] = ok(run_trainer(root / name, nproc=nproc, overrides=common + extra)).stdout
    assert "DCP checkpoint" in runs["pp_opt"] and "+ optimizer state" in runs["pp_opt"]
    assert "+ optimizer state" not in runs["pp_weights"]
    assert losses(root / "pp_opt")[1] == losses(root / "one_opt")[1] == losses(root / "pp_weights")[1]
    want, got = _export(root / "one_opt", 1), _export(root / "pp_opt", 1)
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    fresh_moments = _export(root / "pp_weights", 1)
    assert not all(torch.equal(fresh_moments[k], got[k]) for k in got)


def test_fsdp_times_pipeline_loads_and_exports_every_shard_of_every_stage(hf_runs):
    """dp 2 x pp 2 (4 ranks, FSDP inside each stage): the HF start and the export's gather
    cross both dimensions. The export equals the run's own DCP save of the same step bit for
    bit, and the 1-rank run to float32 rounding (FSDP sums the two half-batch gradients)."""
    root, source = hf_runs[0], hf_runs[1]
    hf = root / "hf"
    run = root / "dp2_pp2"
    run.mkdir()
    out = ok(
        run_trainer(
            run,
            nproc=4,
            overrides=FAST
            + PP_MODEL
            + PP_EXACT
            + [
                "training.steps=2",
                "distributed.pp_size=2",
                "checkpoint.save_interval=2",
                f"checkpoint.initial_load_path={hf}",
                "checkpoint.export_final=torch",
            ],
        )
    ).stdout
    assert "world 4 = dp 2 x pp 2 x tp 1" in out and f"q/k un-permuted, {1 + 9} tensors\n" in out
    assert losses(run)[1] == pytest.approx(losses(root / "one")[1], abs=1e-5)
    exported = _export(run, 2)
    saved = dcp_io.load_everything(run / "outputs" / "llama_debug" / "checkpoints" / "step-2")["model"]
    assert list(exported) == list(_export(root / "one", 2)) and set(saved) == set(exported) == set(source)
    assert all(torch.equal(exported[k], saved[k]) for k in saved)
    one = _export(root / "one", 2)
    assert all(torch.allclose(exported[k], one[k], rtol=0, atol=1e-5) for k in one)
