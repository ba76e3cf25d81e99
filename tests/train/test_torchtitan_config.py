"""torchtitan llama3 TOMLs (tests/train/fixtures/torchtitan: our files with the settings of
torchtitan v0.2.2's published configs), converted field by field into the trainer's config,
and one of them trained for a few steps with pipeline parallel and activation checkpointing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from titan_train.config import job as config_mod
from titan_train.config import torchtitan as tt
from titan_train.config.job import ConfigError
from titan_train.config.parallel_dims import ParallelDims

from .conftest import trainer_env

FIXTURES = Path(__file__).with_name("fixtures") / "torchtitan"


def _load(name: str, world: int, overrides=()):
    return tt.load(FIXTURES / f"{name}.toml", list(overrides), world)


def test_debug_model_converts_field_by_field():
    cfg, conv = _load("debug_model", world=8)
    m = cfg.model  # llama3_args["debugmodel"]: dim 256, 6 layers, 16 heads, vocab 2048, rope_theta 500000
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.vocab_size) == (256, 6, 16, 16, 2048)
    assert (m.rope_theta, m.multiple_of, m.ffn_dim_multiplier, m.norm_eps, m.max_seq_len) == (
        500000.0,
        256,
        None,
        1e-5,
        2048,
    )
    assert cfg.model.rope_scaling_factor == 8.0  # torchtitan's llama3 RoPE scales as Llama 3.1 does
    o = cfg.optimizer  # [optimizer] lr 8e-4, eps 1e-8; betas and weight decay from torchtitan's defaults
    assert (o.lr, o.eps, o.betas, o.weight_decay) == (8e-4, 1e-8, [0.9, 0.95], 0.1)
    t = cfg.training  # [lr_scheduler] warmup 2, linear, min 0; [training] local batch 8 x dp 8, seq 2048
    assert (t.warmup_steps, t.lr_schedule, t.min_lr_ratio) == (2, "linear", 0.0)
    assert (t.batch_size, t.grad_accum_steps, t.seq_len, t.max_norm, t.steps) == (64, 1, 2048, 1.0, 10)
    assert t.mixed_precision == "bf16"  # torchtitan's default mixed_precision_param = "bfloat16"
    assert (cfg.distributed.tp_size, cfg.distributed.pp_size, cfg.distributed.cpu_offload) == (1, 1, False)
    assert (cfg.metrics.log_every, cfg.metrics.tensorboard) == (1, False)
    assert (cfg.metrics.output, cfg.metrics.tb_folder) == ("outputs/metrics.jsonl", "outputs/tb")
    p = cfg.profiling  # profile_freq 10, torchtitan's warmup 3 / active 1 -> wait 6, every cycle
    assert (p.enabled, p.wait, p.warmup, p.active, p.repeat, p.folder) == (False, 6, 3, 1, 0, "outputs/profile_trace")
    c = cfg.checkpoint  # enable = false: no saving, no resuming; async_mode disabled
    assert (c.save_interval, c.resume, c.folder, c.keep_last_n, c.async_save) == (
        0,
        False,
        "outputs/checkpoint",
        10,
        False,
    )
    assert cfg.data.dataset == "builtin" and cfg.data.tokenizer == "byte"
    block = conv.block("debug_model.toml")
    assert block.splitlines()[0] == "[titan-train] debug_model.toml: torchtitan config, converted"
    for line in (
        "lr_scheduler.decay_ratio = 0.8: no stable phase (WSD)",
        "training.dataset = 'c4_test': HF datasets are not downloaded here",
        "quantize.linear.float8.filter_fqns = ['output']: no equivalent in this trainer",
    ):
        assert line in block, line
    # off switches are not noise in the block
    assert "enable_wandb" not in block and "validation" not in block and "compile" not in block
    # layer-wise selective AC every 2nd block = whole blocks checkpointed, every 2nd
    assert (t.activation_checkpoint, t.ac_every, t.compile) == ("full", 2, False)
    assert (
        "selective_ac_option = '2': blocks 0, 2, 4, ... are checkpointed whole (torchtitan: blocks 1, 3, ...)" in block
    )
    # pipeline_parallel_schedule is there but pp is 1: the trainer's default stays
    assert cfg.distributed.pp_schedule == config_mod.DistributedConfig().pp_schedule


def test_llama3_8b_and_70b_shapes_and_layouts():
    cfg, conv = _load("llama3_8b", world=64)
    m = cfg.model  # llama3_args["8B"]
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_dim_multiplier, m.multiple_of) == (
        4096,
        32,
        32,
        8,
        1.3,
        1024,
    )
    assert (m.vocab_size, m.rope_theta, m.max_seq_len) == (128256, 500000.0, 8192)
    assert (cfg.training.batch_size, cfg.training.warmup_steps, cfg.optimizer.lr) == (64, 200, 3e-4)
    assert (cfg.profiling.enabled, cfg.profiling.wait, cfg.metrics.tensorboard, cfg.metrics.log_every) == (
        True,
        96,
        True,
        10,
    )
    assert cfg.model.ffn_dim_multiplier == 1.3
    t = cfg.training  # op-level SAC, as torchtitan's: every second matmul recomputed
    assert (t.activation_checkpoint, t.ac_every, t.selective_ac_option) == ("selective", 1, "op")
    assert "selective_ac_option = 'op'" not in conv.block("llama3_8b.toml")  # nothing approximated
    config_mod.validate(cfg, 64)

    cfg, _ = _load("llama3_70b", world=64)
    m = cfg.model  # llama3_args["70B"]; tensor_parallel_degree = 8, local batch 8 -> dp 8 x 8
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.multiple_of) == (8192, 80, 64, 8, 4096)
    assert (cfg.distributed.tp_size, cfg.training.batch_size, cfg.optimizer.lr) == (8, 64, 1.5e-4)
    assert (cfg.training.activation_checkpoint, cfg.training.ac_every) == ("full", 1)
    config_mod.validate(cfg, 64)

    cfg, conv = _load("llama3_405b", world=512)
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads, cfg.model.ffn_dim_multiplier) == (
        16384,
        126,
        128,
        1.2,
    )
    assert (cfg.training.activation_checkpoint, cfg.training.compile, cfg.distributed.tp_size) == ("full", True, 8)
    block = conv.block("llama3_405b.toml")
    assert "parallelism.enable_async_tensor_parallel = True: not supported" in block
    assert "compile.components = ['model', 'loss']: compile applies per transformer block" in block


@pytest.mark.parametrize(
    "schedule, ours, note",
    [
        ("GPipe", "gpipe", None),
        ("1F1B", "1f1b", None),
        ("Interleaved1F1B", "interleaved_1f1b", None),
        ("interleaved1f1b", "interleaved_1f1b", None),  # torch reads the names case-insensitively
        (
            "ZBVZeroBubble",
            "interleaved_1f1b",
            "pipeline_parallel_schedule = 'ZBVZeroBubble': runs as 'interleaved_1f1b'",
        ),
    ],
)
def test_pipeline_keys_map_to_the_trainers(tmp_path, schedule, ours, note):
    src = (FIXTURES / "debug_model.toml").read_text()
    src = src.replace("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2")
    src = src.replace('"Interleaved1F1B"', repr(schedule).replace("'", '"'))
    path = tmp_path / "tt.toml"
    path.write_text(src.replace("[parallelism]", "[parallelism]\npipeline_parallel_microbatch_size = 2"))
    cfg, conv = tt.load(path, [], 4)
    d = cfg.distributed  # 4 ranks / pp 2 = dp 2; local batch 8 / micro-batch size 2 = 4 micro-batches
    assert (d.pp_size, d.pp_schedule, d.pp_microbatches, cfg.training.batch_size) == (2, ours, 4, 16)
    assert (note in conv.block("tt.toml")) if note else "pipeline_parallel_schedule" not in conv.block("tt.toml")
    config_mod.validate(cfg, 4)


@pytest.mark.parametrize(
    "keys, export",
    [
        ('last_save_model_only = true\nexport_dtype = "bfloat16"', ("torch", "bf16")),
        ('last_save_model_only = true\nlast_save_in_hf = true\nexport_dtype = "float16"', ("hf", "fp16")),
        ("last_save_model_only = true", ("torch", "fp32")),
        ('last_save_model_only = false\nexport_dtype = "bfloat16"', ("none", "fp32")),
    ],
)
def test_a_model_only_last_save_becomes_export_final(tmp_path, keys, export):
    src = (FIXTURES / "debug_model.toml").read_text()
    src = src.replace('enable = false\nfolder = "checkpoint"', 'enable = true\nfolder = "checkpoint"')
    src = src.replace('last_save_model_only = false\nexport_dtype = "float32"', keys)
    path = tmp_path / "tt.toml"
    path.write_text(src)
    cfg, conv = tt.load(path, [], 8)
    c, block = cfg.checkpoint, conv.block("tt.toml")
    assert (c.export_final, c.export_dtype, c.save_interval) == (*export, 10)
    assert ("the last step stays a full checkpoint" in block) == (export[0] != "none")


def test_an_export_dtype_torchtitan_does_not_take_is_one_line(tmp_path):
    src = (FIXTURES / "debug_model.toml").read_text().replace("enable = false\nfolder", "enable = true\nfolder")
    path = tmp_path / "tt.toml"
    path.write_text(
        src.replace(
            'last_save_model_only = false\nexport_dtype = "float32"',
            'last_save_model_only = true\nexport_dtype = "fp8"',
        )
    )
    with pytest.raises(
        ConfigError, match="checkpoint.export_dtype = 'fp8': torchtitan takes one of float32, bfloat16, float16"
    ):
        tt.load(path, [], 8)


def test_global_batch_sets_grad_accumulation_and_overrides_apply_after(tmp_path):
    src = (
        (FIXTURES / "debug_model.toml")
        .read_text()
        .replace("local_batch_size = 8", "local_batch_size = 2\nglobal_batch_size = 16")
    )
    path = tmp_path / "tt.toml"
    path.write_text(src)
    cfg, _ = tt.load(path, ["training.steps=3"], 4)
    assert (cfg.training.batch_size, cfg.training.grad_accum_steps, cfg.training.steps) == (16, 2, 3)


def test_hsdp_degrees_map_to_the_trainers(tmp_path):
    """data_parallel_replicate_degree = 2 on 8 ranks: HSDP, 2 replicas of 4 shards, as torchtitan runs it."""
    path = tmp_path / "tt.toml"
    path.write_text(
        (FIXTURES / "debug_model.toml")
        .read_text()
        .replace("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 2")
    )
    cfg, conv = tt.load(path, [], 8)
    dims = ParallelDims.of(cfg.distributed, 8)
    assert (dims.dp_replicate, dims.dp_shard) == (2, 4)
    assert "HSDP" not in conv.block("tt.toml")  # nothing approximated any more


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("context_parallel_degree = 1", "context_parallel_degree = 2"),
            "parallelism.context_parallel_degree = 2: context parallel is not supported; set it to 1",
        ),
        (
            ('flavor = "debugmodel"', 'flavor = "7B"'),
            "model.flavor = '7B' is not a torchtitan llama3 flavor; use one of: debugmodel,",
        ),
        (
            ('name = "llama3"', 'name = "deepseek_v3"'),
            "model.name = 'deepseek_v3': only torchtitan's llama3 model converts to this trainer",
        ),
        (
            ("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 3"),
            "parallelism: data_parallel_replicate_degree (1) x data_parallel_shard_degree (3) must be 4",
        ),
        (
            ("selective_ac_option = '2'", "selective_ac_option = 'some'"),
            "activation_checkpoint.selective_ac_option = 'some': use 'op' or a positive integer",
        ),
        (
            ("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 3"),
            "parallelism.pipeline_parallel_microbatch_size = 3 must divide training.local_batch_size = 8",
        ),
        (
            (
                'pipeline_parallel_degree = 1\npipeline_parallel_schedule = "Interleaved1F1B"',
                'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "Fancy"',
            ),
            "parallelism.pipeline_parallel_schedule = 'Fancy': use one of GPipe",
        ),
    ],
)
def test_layouts_and_models_we_cannot_honour_are_one_line_errors(tmp_path, edit, message):
    path = tmp_path / "tt.toml"
    path.write_text((FIXTURES / "debug_model.toml").read_text().replace(*edit))
    with pytest.raises(
        ConfigError,
        match="^"
        + message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.").replace("*", r"\*").replace("[", r"\["),
    ):
        tt.load(path, [], 4)


def test_only_torchtitan_files_are_read_as_torchtitan():
    assert tt.is_torchtitan(config_mod.read_toml(FIXTURES / "llama3_8b.toml"))
    repo_configs = Path(__file__).resolve().parents[2] / "configs"
    assert not any(tt.is_torchtitan(config_mod.read_toml(p)) for p in repo_configs.glob("*.toml"))


@pytest.mark.multirank
def test_torchtitan_debug_model_trains_a_few_steps_with_pp_and_ac(tmp_path):
    """The debug config with the one change a torchtitan user makes for two pipeline stages
    (pipeline_parallel_degree = 2): its Interleaved1F1B schedule, micro-batch size and
    every-2nd-block AC run through the trainer's own pp / AC keys."""
    path = tmp_path / "debug_pp2.toml"
    path.write_text(
        (FIXTURES / "debug_model.toml")
        .read_text()
        .replace("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2")
    )
    cmd = [
        sys.executable,
        "-m",
        "titan_train.cli",
        "run",
        "--config",
        str(path),
        "--set",
        "training.seq_len=64",
        "--set",
        "training.steps=3",
        "--nproc",
        "2",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert out.count("torchtitan config, converted") == 1  # the launcher prints it, the ranks do not
    assert out.index("torchtitan config, converted") < out.index("step 1/3")
    assert (
        "world 2 = dp 1 x pp 2 x tp 1 | pp interleaved_1f1b x 8 micro-batches | fsdp False | bf16 | ac full | "
        "compile False | global batch 8 x 64 tokens"
    ) in out
    records = [json.loads(x) for x in (tmp_path / "outputs" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "step" in r]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert sorted(p.name for p in (tmp_path / "outputs" / "logs").iterdir()) == ["rank0.log", "rank1.log"]
