"""`convert STEP_DIR OUT --to hf` without --config: a trainer step folder's titan-run.json
records the run's config, so its [model] gives the head counts (and is checked against the
weights like a --config would be)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from titan_train.checkpoint import lineage
from titan_train.config import job as config_mod

from ..checkpoints import TINY, hf_state_dict, weights, write_trainer_dcp
from ..checkpoints import doctor_convert as convert

safetensors = pytest.importorskip("safetensors")
from safetensors.torch import load_file  # noqa: E402


def _record(step_dir: Path, **model) -> None:
    cfg = config_mod.JobConfig()
    cfg.model = dataclasses.replace(TINY, **model)
    lineage.write_record(step_dir, lineage.record("test", 3, config_mod.to_dict(cfg)))


def test_a_step_folder_gives_its_own_model_shape(tmp_path):
    step = write_trainer_dcp(tmp_path / "run", weights(), step=3)
    _record(step)
    for src, out in ((step, "hf"), (tmp_path / "run", "hf-from-run")):  # the step folder, or the run's newest
        p = convert(src, tmp_path / out, "--to", "hf")
        assert p.returncode == 0, p.stderr
        config = json.loads((tmp_path / out / "config.json").read_text())
        assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
        got = {}
        for f in (tmp_path / out).glob("*.safetensors"):
            got.update(load_file(str(f)))
        want = hf_state_dict(weights())  # q/k permuted with the recorded head counts
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_a_record_that_does_not_fit_the_weights_is_one_line(tmp_path):
    step = write_trainer_dcp(tmp_path / "run", weights(), step=3)
    _record(step, vocab_size=65)
    p = convert(step, tmp_path / "hf", "--to", "hf")
    assert p.returncode == 1 and "vocab_size: checkpoint 64, config 65" in p.stderr, p.stderr
    assert "titan-run.json records another" in p.stderr
    assert not (tmp_path / "hf").exists()
