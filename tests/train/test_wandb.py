"""metrics.wandb: the records go to Weights & Biases, offline by default; without the extra
the run is refused in one line before any rank starts."""

from __future__ import annotations

import importlib.util

import pytest

from titan_train.components import metrics, wandb_sink

from .conftest import run_in_process

HAVE_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.mark.skipif(HAVE_WANDB, reason="wandb is installed: the refusal cannot happen")
def test_without_the_extra_the_run_is_refused_in_one_line(tmp_path, monkeypatch):
    proc = run_in_process(tmp_path, monkeypatch, overrides=["metrics.wandb=true"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "titan-train: error: metrics.wandb = true needs wandb, which is not installed: pip install "
        "'titan-npu[wandb]' (or set metrics.wandb = false)"
    ]
    with pytest.raises(metrics.MissingExtra, match=r"titan-npu\[wandb\]"):
        wandb_sink.require_wandb()


@pytest.mark.skipif(not HAVE_WANDB, reason="the wandb extra is not installed")
def test_offline_records_are_written_under_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = wandb_sink.WandbSink(tmp_path, "titan-npu-test", "run", mode="offline")
    sink.write({"event": "start", "config": {"model": {"d_model": 256}}})
    sink.write({"step": 1, "loss": 5.5, "lr": 1e-4, "peak_mem_kind": "rss"})
    sink.write({"step": 1, "event": "validation", "validation_loss": 5.0})
    sink.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))
