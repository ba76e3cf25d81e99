"""[validation]: the held-out loss every N steps, forward only, the same number on one rank,
FSDP, TP (vocabulary-sharded logits under loss_parallel) and the pipeline (real processes,
fp32 on gloo), in metrics.jsonl and TensorBoard."""

from __future__ import annotations

import json
import math

import pytest

from .conftest import parity_run, run_in_process

VALIDATION = ['validation.dataset="builtin"', "validation.every=5", "validation.batches=2", "metrics.tensorboard=true"]


def _validation(run) -> dict[int, dict]:
    records = [
        json.loads(line) for line in (run.workdir / "outputs/llama_debug/metrics.jsonl").read_text().splitlines()
    ]
    return {r["step"]: r for r in records if r.get("event") == "validation"}


@pytest.fixture(scope="module")
def validated(shared_runs):
    pytest.importorskip("tensorboard")
    return {
        "one": parity_run(shared_runs, "val-one", 1, VALIDATION),
        "fsdp2": parity_run(shared_runs, "val-fsdp2", 2, VALIDATION),
        "pp2": parity_run(shared_runs, "val-pp2", 2, VALIDATION + ["distributed.pp_size=2"]),
        "tp2": parity_run(shared_runs, "val-tp2", 2, VALIDATION + ["distributed.tp_size=2"]),
    }


@pytest.mark.multirank
def test_validation_loss_is_the_same_on_one_rank_fsdp_tp_and_the_pipeline(validated):
    one = _validation(validated["one"])
    assert sorted(one) == [5, 10]
    assert one[10]["validation_loss"] < one[5]["validation_loss"] < math.log(257)  # it learns
    for rec in one.values():
        assert rec["validation_perplexity"] == pytest.approx(math.exp(rec["validation_loss"]), rel=1e-9)
        assert rec["validation_tokens"] == 2 * 8 * 64
    assert "dp 1 x pp 2 x tp 1" in validated["pp2"].stdout and "dp 2 x pp 1 x tp 1" in validated["fsdp2"].stdout
    assert "dp 1 x pp 1 x tp 2" in validated["tp2"].stdout
    for name in ("fsdp2", "pp2", "tp2"):
        got = _validation(validated[name])
        assert sorted(got) == [5, 10], name
        for step in (5, 10):
            assert got[step]["validation_loss"] == pytest.approx(one[step]["validation_loss"], abs=1e-5), (name, step)
    # validation leaves training alone: every step still has its training record
    assert sorted(validated["pp2"].losses) == list(range(1, 11))
    assert "[titan-train] validation step 5 | loss " in validated["one"].stdout


@pytest.mark.multirank
def test_validation_goes_to_tensorboard_too(validated):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = validated["one"]
    acc = EventAccumulator(str(run.workdir / "outputs/llama_debug/tb"))
    acc.Reload()
    want = _validation(run)
    for key, tag in (
        ("validation_loss", "validation_metrics/loss"),
        ("validation_perplexity", "validation_metrics/perplexity"),
    ):
        got = [(e.step, e.value) for e in acc.Scalars(tag)]  # torchtitan's tag names
        assert got == [(s, pytest.approx(want[s][key], rel=1e-6)) for s in (5, 10)]


@pytest.mark.parametrize("missing", ["no/such/folder", "short.txt"])
def test_a_validation_dataset_that_cannot_be_read_is_one_line_before_any_rank_starts(tmp_path, monkeypatch, missing):
    (tmp_path / "short.txt").write_text("too short for one sample")
    proc = run_in_process(tmp_path, monkeypatch, overrides=[f'validation.dataset="{missing}"'])
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("titan-train: error: ") and missing in line
    if missing == "short.txt":
        assert "fewer than training.seq_len + 1" in line
    else:
        assert "validation.dataset: no/such/folder not found" in line


@pytest.mark.parametrize("accum", [1, 2])
def test_the_chunked_loss_and_accumulation_give_the_same_validation_loss(world_of_one, accum):
    """In one process: training.loss_chunks = 4 and grad_accum_steps cut the same batches
    differently; the validation loss is the same mean token loss (and the model is untouched)."""
    import torch

    from titan_train.build import build
    from titan_train.config import job as config
    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.validation import Validator

    from .conftest import REPO

    got = []
    for chunks in (1, 4):
        sets = ["training.seq_len=64", "model.n_layers=2", f"training.loss_chunks={chunks}"]
        sets += [f"training.grad_accum_steps={accum}", 'validation.dataset="builtin"', "validation.batches=2"]
        cfg = config.load(REPO / "configs" / "llama_debug.toml", sets)
        parts = build(cfg, ParallelDims.for_world(1), torch.device("cpu"))
        before = [p.detach().clone() for p in parts.parameters()]
        validator = Validator(cfg, parts, 0, torch.device("cpu"), say=lambda *a, **k: None)
        got.append(validator.loss())
        assert all(torch.equal(a, p) for a, p in zip(before, parts.parameters()))
        assert all(p.grad is None for p in parts.parameters())  # forward only
    assert got[0] == pytest.approx(got[1], abs=1e-5) and 5 < got[0] < 10  # ln(2048) = 7.6 at init
