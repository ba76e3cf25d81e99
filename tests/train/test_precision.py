"""bf16 and fp16 training on 2 FSDP ranks: close to fp32, and fp16 reports its loss scale."""

from __future__ import annotations

import json

import pytest

from .conftest import FAST, losses, ok, run_trainer

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes


@pytest.fixture(scope="module")
def fp32(reference_run):
    """The 1-rank fp32 run, shared with test_ops_metrics through the session's cache."""
    return losses(reference_run(overrides=FAST + ["training.steps=4"]))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_low_precision_tracks_fp32(precision, fp32, workdir):
    ok(run_trainer(workdir, nproc=2, overrides=FAST + ["training.steps=4", f'training.mixed_precision="{precision}"']))
    got = losses(workdir)
    for step in range(1, 5):
        assert got[step] == pytest.approx(fp32[step], abs=0.05), (precision, step, got[step], fp32[step])
        assert got[step] != fp32[step]  # it really computed in lower precision
    records = [json.loads(x) for x in (workdir / "outputs/llama_debug/metrics.jsonl").read_text().splitlines()]
    scales = [r.get("loss_scale") for r in records if "step" in r]
    assert (scales == [65536.0] * 4) if precision == "fp16" else (scales == [None] * 4)
