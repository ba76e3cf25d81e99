"""A torchtitan TOML's [validation] and metrics.enable_wandb map to this trainer's keys."""

from __future__ import annotations

from titan_train.config import torchtitan as torchtitan_config
from titan_train.config.job import from_raw

BASE = {"model": {"name": "llama3", "flavor": "debugmodel"}, "training": {"local_batch_size": 2, "seq_len": 64}}


def _convert(**sections):
    conv = torchtitan_config.convert({**BASE, **sections}, 1)
    return from_raw(conv.raw), conv.ignored


def test_an_enabled_validation_section_becomes_dataset_every_and_batches():
    cfg, ignored = _convert(
        validation={"enable": True, "dataset_path": "val.jsonl", "freq": 5, "steps": 3, "local_batch_size": 4},
        metrics={"enable_wandb": True},
    )
    assert (cfg.validation.dataset, cfg.validation.every, cfg.validation.batches) == ("val.jsonl", 5, 3)
    assert cfg.metrics.wandb is True and cfg.metrics.wandb_mode == "offline"
    assert "validation.local_batch_size = 4: a validation batch has the training batch's shape here" in ignored


def test_validation_without_a_path_or_with_every_step_says_what_it_does_instead():
    cfg, ignored = _convert(validation={"enable": True, "dataset": "c4_validation", "steps": -1})
    assert cfg.validation.dataset == "builtin" and cfg.validation.batches == 10
    assert any(
        line.startswith("validation.dataset = 'c4_validation': HF datasets are not downloaded") for line in ignored
    )
    assert "validation.steps = -1: the whole dataset is not read; validation.batches applies" in ignored


def test_a_disabled_validation_section_changes_nothing():
    cfg, ignored = _convert(validation={"enable": False, "dataset_path": "val.jsonl", "freq": 5})
    assert cfg.validation.dataset == "" and not [line for line in ignored if "validation" in line]
