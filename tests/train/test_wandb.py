"""metrics.wandb: the records go to Weights & Biases, offline by default; without the extra
the run is refused in one line before any rank starts."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path

import pytest

from titan_train.components import metrics, wandb_sink

from .conftest import FAST, losses, ok, run_in_process, run_trainer

HAVE_WANDB = importlib.util.find_spec("wandb") is not None


def test_without_the_extra_the_run_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails, installed or not
    proc = run_in_process(tmp_path, monkeypatch, overrides=["metrics.wandb=true"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "titan-train: error: metrics.wandb = true needs wandb, which is not installed: pip install "
        "'titan-npu[wandb]' (or set metrics.wandb = false)"
    ]
    with pytest.raises(metrics.MissingExtra, match=r"titan-npu\[wandb\]"):
        wandb_sink.require_wandb()


def wandb_records(folder: Path) -> tuple[dict, dict[int, dict]]:
    """(config, step -> logged values) of the one offline run under `folder`, read from its
    .wandb file: wandb's record log (LevelDB's log format: a 7-byte `:W&B` header, then
    32 KiB blocks of chunks with a 7-byte header, crc32c / length / type 1 full, 2 first,
    3 middle, 4 last), each record a wandb_internal_pb2.Record. wandb >= 0.2x has no Python
    reader of its own (the Go wandb-core writes the file), so the test reads the format."""
    from wandb.proto import wandb_internal_pb2

    (path,) = folder.glob("offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    config, history, pos, parts = {}, {}, 7, []
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:  # a block's tail too short for a chunk header is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        parts.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind not in (1, 4):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(b"".join(parts))
        parts = []
        which = record.WhichOneof("record_type")
        if which in ("config", "run"):  # init carries the config (run record); a later update is a config record
            items = record.config.update if which == "config" else record.run.config.update
            config.update({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
        elif which == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history[record.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
    return config, history


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """wandb's own settings and cache in tmp_path, its console quiet; WANDB_MODE is left unset,
    so the offline run the tests find is the sink's own default."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_SERVICE", raising=False)  # an earlier test's wandb.init left its service here
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return {var: str(tmp_path / "wandb-home") for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR")}


@pytest.mark.skipif(not HAVE_WANDB, reason="the wandb extra is not installed")
def test_offline_records_hold_the_logged_values(tmp_path, wandb_home):
    sink = wandb_sink.WandbSink(tmp_path, "titan-npu-test", "run")  # offline: the default
    sink.write({"event": "start", "config": {"model": {"d_model": 256}}})
    sink.write({"step": 1, "loss": 5.5, "lr": 1e-4, "peak_mem_kind": "rss", "nan_skipped": False})
    sink.write({"step": 2, "loss": 5.25, "lr": 2e-4})
    sink.write({"step": 2, "event": "validation", "validation_loss": 5.0, "validation_perplexity": 148.4})
    sink.close()
    config, history = wandb_records(tmp_path / "wandb")
    assert config["model"] == {"d_model": 256}
    assert history == {  # numeric fields only, at their step; a validation record joins its step
        1: {"loss": 5.5, "lr": 1e-4},
        2: {"loss": 5.25, "lr": 2e-4, "validation_loss": 5.0, "validation_perplexity": 148.4},
    }


@pytest.mark.multirank
@pytest.mark.skipif(not HAVE_WANDB, reason="the wandb extra is not installed")
def test_a_run_with_metrics_wandb_logs_the_losses_of_metrics_jsonl(tmp_path, wandb_home):
    """metrics.wandb = true end to end: the trainer's offline W&B run, under the run folder,
    has every step's loss exactly as metrics.jsonl has it, and the job's config."""
    steps = ["training.steps=3", "metrics.wandb=true"]
    ok(run_trainer(tmp_path, overrides=FAST + steps, env=wandb_home))
    config, history = wandb_records(tmp_path / "outputs" / "llama_debug" / "wandb")
    want = losses(tmp_path)
    assert sorted(history) == sorted(want) == [1, 2, 3]
    assert {step: values["loss"] for step, values in history.items()} == want
    assert config["training"]["steps"] == 3 and config["metrics"]["wandb"] is True
