"""Every bad config is refused before any process group starts: one line, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from titan_train.cli import main
from titan_train.config import job as config

from .conftest import REPO, trainer_env

DEBUG = str(REPO / "configs" / "llama_debug.toml")

BAD = [
    (["modle.d_model=1"], 1, "unknown section [modle]"),
    (["model.dmodel=256"], 1, "unknown key model.dmodel; valid keys in [model]: name, vocab_size, d_model"),
    (['model.d_model="big"'], 1, "model.d_model = 'big': expected int, got str"),
    (["training.steps=1.5"], 1, "training.steps = 1.5: expected int, got float"),
    (["model.n_heads=12"], 1, "model.n_heads = 12 must divide model.d_model = 256"),
    (["model.n_kv_heads=5"], 1, "model.n_kv_heads = 5 must divide model.n_heads = 16"),
    (["distributed.tp_size=3"], 6, "distributed.tp_size = 3 must divide model.n_heads = 16"),
    (["distributed.tp_size=4"], 6, "distributed.tp_size = 4 must divide the world size 6"),
    (["distributed.tp_size=2", "model.n_kv_heads=1"], 2, "distributed.tp_size = 2 must divide model.n_kv_heads = 1"),
    (['distributed.backend="mpi"'], 1, "distributed.backend = 'mpi' is not valid; use one of: auto, hccl, nccl, gloo"),
    (["training.batch_size=6"], 4, "training.batch_size = 6 (global) must be a multiple of data-parallel ranks (4)"),
    (["training.seq_len=4096"], 1, "training.seq_len = 4096 exceeds model.max_seq_len = 2048"),
    (
        ["training.loss_chunks=3", "distributed.tp_size=2"],
        2,
        "training.loss_chunks = 3 must divide the 128 tokens of a rank's sequence (training.seq_len 256 / "
        "distributed.tp_size 2)",
    ),
    (["training.loss_chunks=2", "distributed.pp_size=2"], 2, "training.loss_chunks = 2 is for the eager step"),
    (["distributed.pp_size=2"], 1, "distributed.pp_size = 2 must divide the world size 1"),
    (
        ["distributed.pp_size=2", "distributed.tp_size=2"],
        6,
        "distributed.tp_size x pp_size = 2 x 2 = 4 must divide the world size 6",
    ),
    (["distributed.pp_size=8"], 8, "distributed.pp_size = 8 makes 8 pipeline stages, but model.n_layers = 6"),
    (
        ["distributed.pp_size=4", 'distributed.pp_schedule="interleaved_1f1b"'],
        4,
        "makes 8 pipeline stages (2 per rank with pp_schedule = 'interleaved_1f1b'), but model.n_layers = 6",
    ),
    (
        ["distributed.pp_size=2", "distributed.pp_microbatches=3"],
        4,
        "distributed.pp_microbatches = 3 must divide the 4 sequences each pipeline step gets",
    ),
    (
        ["distributed.pp_size=2", "distributed.pp_microbatches=1"],
        2,
        "distributed.pp_schedule = '1f1b' needs distributed.pp_microbatches >= pp_size = 2 (got 1)",
    ),
    (
        ["distributed.pp_size=2", 'distributed.pp_schedule="zb"'],
        2,
        "distributed.pp_schedule = 'zb' is not valid; use one of: gpipe, 1f1b, interleaved_1f1b",
    ),
    (
        ['training.activation_checkpoint="op"'],
        1,
        "training.activation_checkpoint = 'op' is not valid; use one of: none, full, selective",
    ),
    (["training.ac_every=0"], 1, "training.ac_every = 0 must be >= 1"),
    (
        ['training.selective_ac_option="half"'],
        1,
        "training.selective_ac_option = 'half' is not valid; use one of: all_mm, op",
    ),
    (
        ["distributed.dp_replicate_size=3"],
        4,
        "distributed.dp_replicate_size = 3 must divide the 4 data-parallel ranks (world size 4 / "
        "(tp_size 1 x pp_size 1)); valid: 1, 2, 4",
    ),
    (
        ["distributed.dp_replicate_size=2", "distributed.dp_shard_size=3"],
        4,
        "distributed.dp_replicate_size x dp_shard_size x tp_size x pp_size = 2 x 3 x 1 x 1 = 6 must equal "
        "the world size 4",
    ),
    (
        ["distributed.dp_replicate_size=2", "distributed.dp_shard_size=2", "distributed.tp_size=2"],
        4,
        "distributed.dp_replicate_size x dp_shard_size x tp_size x pp_size = 2 x 2 x 2 x 1 = 8 must equal "
        "the world size 4",
    ),
    (["distributed.dp_replicate_size=0"], 1, "distributed.dp_replicate_size = 0 must be >= 1"),
    (
        ['training.mixed_precision="fp8"'],
        1,
        "training.mixed_precision = 'fp8' is not valid; use one of: fp32, bf16, fp16",
    ),
    (["optimizer.betas=[0.9]"], 1, "optimizer.betas = [0.9]: expected two numbers"),
    (['data.dataset="/no/such/corpus.txt"'], 1, "data.dataset: /no/such/corpus.txt not found"),
    (["model.vocab_size=100"], 1, "model.vocab_size = 100 is smaller than the tokenizer's 257 ids"),
    (["training"], 1, "expected section.key=value"),
    (["distributed.cpu_offload=true"], 2, "distributed.cpu_offload = true needs an accelerator"),
    # ranges declared in the field metadata (issue 10): each of these trained into NaN or a traceback
    (["model.norm_eps=0"], 1, "model.norm_eps = 0.0 must be in (0, 1)"),
    (["model.norm_eps=-1e-5"], 1, "model.norm_eps = -1e-05 must be in (0, 1)"),
    (["model.rope_theta=0"], 1, "model.rope_theta = 0.0 must be > 1"),
    (["model.rope_theta=-10000"], 1, "model.rope_theta = -10000.0 must be > 1"),
    (["optimizer.eps=0"], 1, "optimizer.eps = 0.0 must be in (0, 1)"),
    (["optimizer.eps=-1e-8"], 1, "optimizer.eps = -1e-08 must be in (0, 1)"),
    (["training.min_lr_ratio=-0.5"], 1, "training.min_lr_ratio = -0.5 must be in [0, 1]"),
    (["training.min_lr_ratio=2"], 1, "training.min_lr_ratio = 2.0 must be in [0, 1]"),
    (["model.ffn_dim_multiplier=0"], 1, "model.ffn_dim_multiplier = 0.0 must be > 0"),
    (["model.ffn_dim_multiplier=-1.3"], 1, "model.ffn_dim_multiplier = -1.3 must be > 0"),
    (["model.ffn_dim_multiplier=0.0001"], 1, "model.ffn_dim_multiplier = 0.0001 makes a SwiGLU width of 0"),
    (["model.ffn_dim_multiplier=nan"], 1, "model.ffn_dim_multiplier = nan must be a finite number"),
    (["optimizer.lr=inf"], 1, "optimizer.lr = inf must be a finite number"),
    (["optimizer.lr=-1e-3"], 1, "optimizer.lr = -0.001 must be in (0, 1e+30]"),
    (["optimizer.lr=1e39"], 1, "optimizer.lr = 1e+39 must be in (0, 1e+30]"),  # was an overflow traceback in AdamW
    (["optimizer.betas=[0.9, 1.0]"], 1, "optimizer.betas = [0.9, 1.0]: every element must be in [0, 1)"),
    (["metrics.peak_tflops=-1"], 1, "metrics.peak_tflops = -1.0 must be >= 0"),
    (["watchdog.factor=1"], 1, "watchdog.factor = 1.0 must be > 1"),
    (["distributed.pp_microbatches=-1"], 1, "distributed.pp_microbatches = -1 must be >= 0"),
    (["model.max_seq_len=0"], 1, "model.max_seq_len = 0 must be >= 1"),
    # cross-field: the model's own SwiGLU width formula and the vocabulary, split over tp ranks
    (
        ["distributed.tp_size=4", "model.multiple_of=1"],
        4,
        "distributed.tp_size = 4 must divide the SwiGLU width 682 (from model.d_model = 256",
    ),
    (
        [
            "distributed.tp_size=2",
            "model.d_model=192",
            "model.n_heads=8",
            "model.n_kv_heads=8",
            "model.multiple_of=1",
            "model.ffn_dim_multiplier=1.3",
        ],
        2,
        "distributed.tp_size = 2 must divide the SwiGLU width 665",
    ),
    (
        ["distributed.tp_size=2", "model.vocab_size=2049"],
        2,
        "distributed.tp_size = 2 must divide model.vocab_size = 2049 (the embedding and output are split by "
        "vocabulary rows); set model.vocab_size = 2050",
    ),
]


@pytest.mark.parametrize("overrides,nproc,message", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_config_is_one_line_exit_2(overrides, nproc, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["run", "--config", DEBUG, "--nproc", str(nproc)] + [a for o in overrides for a in ("--set", o)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("titan-train: error: "), result.output
    assert message in lines[0]
    assert not (tmp_path / "outputs").exists()  # refused before anything ran


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "titan_train.cli", *args],
        cwd=cwd,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.multirank
def test_hccl_without_npu_is_a_clear_error_in_a_real_process(tmp_path):
    proc = _cli("run", "--config", DEBUG, "--set", 'distributed.backend="hccl"', cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "distributed.backend = 'hccl' needs an Ascend NPU" in proc.stderr
    assert "titan-doctor diagnose" in proc.stderr


@pytest.mark.multirank
def test_missing_and_malformed_files_are_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nd_model = 1\n")
    proc = _cli("run", "--config", str(bad), cwd=tmp_path)
    assert proc.returncode == 2 and "invalid TOML" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli("run", "--config", str(tmp_path / "nope.toml"), cwd=tmp_path)
    assert proc.returncode == 2 and "config file not found" in proc.stderr


def test_shipped_configs_are_valid_for_their_card_counts():
    cards = {"llama_debug": 2, "llama_7b": 8, "llama_13b": 16, "llama_70b": 64, "llama_70b_long": 64}
    cards |= {"llama3_8b": 8, "llama3_70b": 64}
    for name, world in cards.items():
        cfg = config.load(REPO / "configs" / f"{name}.toml")
        config.validate(cfg, world)
        assert config.advisories(cfg) == [], name
    c70 = config.load(REPO / "configs" / "llama_70b.toml")
    assert (c70.model.n_kv_heads, c70.distributed.tp_size, c70.model.n_layers) == (8, 8, 80)
    long = config.load(REPO / "configs" / "llama_70b_long.toml")
    assert (long.distributed.tp_size, long.distributed.pp_size, long.training.seq_len) == (8, 4, 8192)
    assert long.training.activation_checkpoint == "full" and long.model == c70.model.__class__(
        **{**vars(c70.model), "max_seq_len": 8192}
    )  # the same 70B, only a longer RoPE table


def test_warmup_as_long_as_the_run_is_a_warning_not_an_error(tmp_path, monkeypatch):
    """It runs (short smoke runs do this on purpose) but the LR never reaches its peak."""
    short = config.load(DEBUG, ["training.steps=4", "training.warmup_steps=4"])
    assert config.advisories(short) == [
        "training.warmup_steps = 4 >= training.steps = 4: the learning rate never reaches optimizer.lr (it ends at "
        "80% of it) and never decays; set warmup_steps below steps (often 1-10% of them)"
    ]
    assert config.advisories(config.load(DEBUG, ["training.steps=5", "training.warmup_steps=4"])) == []
    assert config.advisories(config.load(DEBUG, ["training.steps=3", "training.warmup_steps=0"])) == []
    # the trainer says it in its start-up lines (test_initial_load.py), never in a refusal
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--config",
            DEBUG,
            "--set",
            "training.steps=2",
            "--set",
            "training.warmup_steps=2",
            "--set",
            "model.n_layers=0",
        ],
    )
    assert result.exit_code == 2 and "warmup_steps" not in result.output


def test_overrides_are_typed_like_the_file():
    assert config.parse_override("training.steps=20") == ("training", "steps", 20)
    assert config.parse_override("optimizer.betas=[0.9, 0.99]") == ("optimizer", "betas", [0.9, 0.99])
    assert config.parse_override("distributed.backend=gloo") == ("distributed", "backend", "gloo")
    cfg = config.load(REPO / "configs" / "llama_debug.toml", ["optimizer.lr=1", "training.steps=3"])
    assert cfg.optimizer.lr == 1.0 and isinstance(cfg.optimizer.lr, float) and cfg.training.steps == 3
    assert cfg.checkpoint.folder == "outputs/llama_debug/checkpoints"


def test_print_config_resolves_shipped_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--config", "llama_70b", "--print-config"])
    assert result.exit_code == 0, result.output
    assert '"d_model": 8192' in result.output and '"tp_size": 8' in result.output
