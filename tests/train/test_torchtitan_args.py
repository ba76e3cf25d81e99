"""torchtitan's command-line spellings (config/torchtitan_args.py) and torchtitan's keys in
`--set` with a torchtitan TOML (config/torchtitan.py): read as torchtitan v0.2.2 reads them,
or refused in one line naming what to use; and one real run of torchtitan's debug config
driven by torchtitan's own override flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from titan_train.config import torchtitan as tt
from titan_train.config import torchtitan_args as ta
from titan_train.config.job import ConfigError

from .conftest import REPO, trainer_env

DEBUG = Path(__file__).with_name("fixtures") / "torchtitan" / "debug_model.toml"


def test_torchtitan_flags_become_config_and_set_lines():
    got = ta.translate(
        [
            "--job.config_file",
            "t.toml",
            "--training.steps=3",
            "--training.local_batch_size",
            "2",
            "--parallelism.pipeline-parallel-schedule=1F1B",
            "--compile.enable",
            "--checkpoint.no-enable",
            "--profiling.no_enable_memory_snapshot",
            "--metrics.enable_tensorboard=True",
            "--model.converters=quantize.linear.float8,mx",
        ]
    )
    assert got.config == "t.toml"
    assert got.overrides == [
        "training.steps=3",
        "training.local_batch_size=2",
        "parallelism.pipeline_parallel_schedule=1F1B",
        "compile.enable=true",
        "checkpoint.enable=false",
        "profiling.enable_memory_snapshot=false",
        "metrics.enable_tensorboard=true",
        "model.converters=quantize.linear.float8,mx",
    ]
    assert ta.translate(["--job.config-file=t.toml"]).config == "t.toml"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nprc", "2"], "'--nprc': not an option of titan-train run"),
        (["stray"], "'stray': not an option of titan-train run"),
        (["--job.config_file"], "--job.config_file: expected a TOML path"),
    ],
)
def test_what_is_no_torchtitan_flag_is_one_line(args, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        ta.translate(args)


def test_a_torchtitan_tomls_own_keys_apply_before_the_conversion():
    """local_batch_size 2 on 2 ranks is a global batch of 4, as in torchtitan; a trainer key
    (data.dataset) still applies after the conversion."""
    cfg, _ = tt.load(DEBUG, ["training.local_batch_size=2", "training.steps=3", 'data.tokenizer="byte"'], 2)
    assert (cfg.training.batch_size, cfg.training.grad_accum_steps, cfg.training.steps) == (4, 1, 3)
    cfg, _ = tt.load(DEBUG, ["lr_scheduler.warmup_steps=7", "optimizer.beta1=0.8", "checkpoint.enable=true"], 2)
    assert (cfg.training.warmup_steps, cfg.optimizer.betas, cfg.checkpoint.save_interval) == (7, [0.8, 0.95], 10)


@pytest.mark.parametrize(
    "override, message",
    [
        ("training.local_bach_size=2", "did you mean training.local_batch_size?"),
        ("training.dtype=bfloat16", "torchtitan key this trainer does not support (training.dtype = 'bfloat16': full"),
        ("parallelism.context_parallel_degree=2", "context parallel is not supported; set it to 1"),
    ],
)
def test_an_unsupported_or_misspelled_torchtitan_key_is_refused_in_one_line(override, message):
    with pytest.raises(ConfigError) as e:
        tt.load(DEBUG, [override], 2)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_torchtitan_key_with_a_trainer_config_names_the_trainers_key():
    with pytest.raises(ConfigError) as e:
        tt.load_either(REPO / "configs" / "llama_debug.toml", ["training.local_batch_size=2"], 2)
    assert "training.local_batch_size is torchtitan's key" in str(e.value)
    assert "use training.batch_size (the GLOBAL batch" in str(e.value)


@pytest.mark.multirank
def test_a_torchtitan_toml_runs_with_torchtitans_own_override_flags(tmp_path):
    """torchtitan v0.2.2's debug config as torchtitan's run_train.sh passes it (--job.config_file)
    with torchtitan's override flags, on 2 ranks."""
    cmd = [
        sys.executable,
        "-m",
        "titan_train",
        "run",
        "--nproc",
        "2",
        "--job.config_file",
        str(DEBUG),
        "--training.steps=3",
        "--training.local_batch_size=2",
        "--training.seq_len",
        "64",
        "--activation_checkpoint.mode=none",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "debug_model.toml: torchtitan config, converted" in proc.stdout
    assert "world 2 = dp 2 x pp 1 x tp 1" in proc.stdout and "ac none" in proc.stdout
    assert "global batch 4 x 64 tokens" in proc.stdout  # local 2 x dp 2
    records = [json.loads(x) for x in (tmp_path / "outputs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]


def test_a_trainer_tomls_validation_section_is_not_read_as_torchtitans(tmp_path):
    """[validation] is a section of both trainers: dataset / every / batches are this
    trainer's, enable / freq / steps torchtitan's."""
    ours = tmp_path / "ours.toml"
    ours.write_text('[training]\nsteps = 2\n[validation]\ndataset = "builtin"\nevery = 5\n')
    cfg, conversion = tt.load_either(ours, [], 1)
    assert conversion is None and (cfg.validation.dataset, cfg.validation.every) == ("builtin", 5)
    assert cfg.model.rope_theta == 10000.0  # the trainer's default, not llama3's 500000
    theirs = tmp_path / "theirs.toml"
    theirs.write_text('[model]\nname = "llama3"\n[validation]\nenable = true\nfreq = 5\n')
    assert tt.is_torchtitan(tt.config_mod.read_toml(theirs))
