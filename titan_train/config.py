"""Trainer config: TOML sections into dataclasses, `--set` overrides, validation.

One dataclass per section; each field has a default and a comment saying what it tunes.
Every mistake is a `ConfigError` with one line naming the key and what would be valid,
raised before any process group starts. Nothing here imports torch.
"""
from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_train.device import BACKEND_CHOICES  # torch-free at import

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(Exception):
    """A user mistake in a config file or override (shown as one line, no traceback)."""


@dataclass
class ModelConfig:
    name: str = "llama"                    # model family; only "llama" today
    vocab_size: int = 2048                 # embedding rows; must cover the tokenizer's ids
    d_model: int = 256                     # hidden size
    n_heads: int = 16                      # attention heads; must divide d_model
    n_layers: int = 6                      # transformer blocks
    n_kv_heads: int | None = None          # grouped-query KV heads (None = n_heads)
    ffn_dim_multiplier: float | None = None  # scales the SwiGLU width (LLaMA-2 70B: 1.3)
    multiple_of: int = 256                 # SwiGLU width is rounded up to a multiple of this
    norm_eps: float = 1e-5                 # RMSNorm epsilon
    rope_theta: float = 10000.0            # RoPE base
    max_seq_len: int = 2048                # longest sequence the RoPE table covers


@dataclass
class OptimizerConfig:
    name: str = "AdamW"                    # only AdamW today
    lr: float = 3e-4                       # peak learning rate (after warmup)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.1
    eps: float = 1e-8


@dataclass
class DistributedConfig:
    backend: str = "auto"                  # auto | hccl | nccl | gloo ("auto" picks npu > cuda > cpu)
    fsdp: bool = True                      # shard params/grads/optimizer state with FSDP2
    tp_size: int = 1                       # tensor-parallel degree; dp = world_size / tp_size
    pp_size: int = 1                       # pipeline parallel: not implemented yet, must be 1
    cpu_offload: bool = False              # keep sharded params and optimizer state in host memory


@dataclass
class CheckpointConfig:
    save_interval: int = 0                 # save every N steps (0 = only never; the last step is always saved when > 0)
    keep_last_n: int = 0                   # keep only the newest N step-* folders (0 = keep all)
    folder: str = ""                       # default: outputs/<config name>/checkpoints
    resume: bool = True                    # resume from the newest complete step-* folder
    initial_load_path: str = ""            # a new run (nothing to resume) starts from this checkpoint: DCP, torch.save, HF safetensors, Meta, DeepSpeed
    initial_load_model_only: bool = True   # weights only; false also loads the optimizer moments (DCP in the trainer's layout)
    export_final: str = "none"             # none | torch | hf: at the last step write the model to <folder>/export-step-N/
    export_dtype: str = "fp32"             # fp32 | bf16 | fp16: dtype of export_final


@dataclass
class TrainingConfig:
    batch_size: int = 8                    # GLOBAL batch in sequences per optimizer step (split over dp ranks and grad_accum_steps)
    seq_len: int = 256                     # tokens per sequence
    steps: int = 40                        # optimizer steps to reach (a resumed run continues up to this)
    grad_accum_steps: int = 1              # micro-batches per optimizer step
    max_norm: float = 1.0                  # gradient clipping (0 = off)
    warmup_steps: int = 5                  # linear warmup from 0 to optimizer.lr
    lr_schedule: str = "cosine"            # cosine | linear | constant, after warmup
    min_lr_ratio: float = 0.1              # floor of the decay, as a fraction of lr
    mixed_precision: str = "fp32"          # fp32 | bf16 | fp16 (compute dtype of params; reductions stay fp32)
    seed: int = 0                          # weight init


@dataclass
class DataConfig:
    dataset: str = "builtin"               # "builtin" (generated offline corpus) or a .txt / .jsonl path
    tokenizer: str = "byte"                # "byte" (built in) or a HuggingFace tokenizer.json path
    text_field: str = "text"               # the JSONL field holding the text


@dataclass
class MetricsConfig:
    log_every: int = 1                     # print a metrics line every N steps
    tensorboard: bool = False              # not implemented yet (a later issue)
    peak_tflops: float = 0.0               # override the per-device peak used for MFU (0 = look up / measure)
    output: str = ""                       # metrics.jsonl path (default: outputs/<config name>/metrics.jsonl)


@dataclass
class JobConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    name: str = "job"                      # taken from the config file's name


SECTIONS = [f.name for f in dataclasses.fields(JobConfig) if f.name != "name"]
CHOICES = {
    ("model", "name"): ("llama",),
    ("optimizer", "name"): ("AdamW",),
    ("distributed", "backend"): BACKEND_CHOICES,
    ("training", "lr_schedule"): ("cosine", "linear", "constant"),
    ("training", "mixed_precision"): ("fp32", "bf16", "fp16"),
    ("checkpoint", "export_final"): ("none", "torch", "hf"),
    ("checkpoint", "export_dtype"): ("fp32", "bf16", "fp16"),
}


def _coerce(section: str, key: str, value: Any) -> Any:
    """Check a TOML value against the field's type; ints are accepted where floats are."""
    where = f"{section}.{key}"
    kinds = _TYPES[(section, key)]  # TOML has no null, so None never arrives here
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if list in kinds:
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ConfigError(f"{where} = {value!r}: expected a list of numbers, e.g. [0.9, 0.95]")
        return [float(v) for v in value]
    for kind in kinds:
        if kind is not type(None) and type(value) is kind:
            return value
    names = " or ".join(k.__name__ for k in kinds if k is not type(None))
    raise ConfigError(f"{where} = {value!r}: expected {names}, got {type(value).__name__}")


def _field_types() -> dict[tuple[str, str], tuple[type, ...]]:
    out = {}
    hints = typing.get_type_hints(JobConfig)
    for section in SECTIONS:
        cls = hints[section]
        for name, hint in typing.get_type_hints(cls).items():
            args = typing.get_args(hint)
            origin = typing.get_origin(hint)
            if origin is list:
                out[(section, name)] = (list,)
            elif args:  # X | None
                out[(section, name)] = args
            else:
                out[(section, name)] = (hint,)
    return out


_TYPES = _field_types()


def _section_keys(section: str) -> list[str]:
    return [k for (s, k) in _TYPES if s == section]


def from_dict(raw: dict[str, Any], name: str = "job") -> JobConfig:
    cfg = JobConfig(name=name)
    for section, values in raw.items():
        if section not in SECTIONS:
            raise ConfigError(f"unknown section [{section}]; valid sections: {', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table of key = value")
        target = getattr(cfg, section)
        for key, value in values.items():
            if (section, key) not in _TYPES:
                raise ConfigError(f"unknown key {section}.{key}; valid keys in [{section}]: "
                                  f"{', '.join(_section_keys(section))}")
            value = _coerce(section, key, value)
            choices = CHOICES.get((section, key))
            if choices and value not in choices:
                raise ConfigError(f"{section}.{key} = {value!r} is not valid; use one of: {', '.join(choices)}")
            setattr(target, key, value)
    return cfg


def parse_override(text: str) -> tuple[str, str, Any]:
    """'training.steps=20' -> ('training', 'steps', 20). Values are TOML; bare words are strings."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. training.steps=20")
    path, raw = text.split("=", 1)
    section, key = path.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def load(path: str | Path, overrides: list[str] = ()) -> JobConfig:
    """Read a TOML config and apply overrides (checked like the file itself)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path is a folder, not a TOML file: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    for text in overrides:
        section, key, value = parse_override(text)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigError(f"--set {text!r}: [{section}] is not a table")
        raw[section][key] = value
    cfg = from_dict(raw, name=path.stem)
    return _fill_defaults(cfg)


def _fill_defaults(cfg: JobConfig) -> JobConfig:
    if not cfg.checkpoint.folder:
        cfg.checkpoint.folder = f"outputs/{cfg.name}/checkpoints"
    if not cfg.metrics.output:
        cfg.metrics.output = f"outputs/{cfg.name}/metrics.jsonl"
    if cfg.model.n_kv_heads is None:
        cfg.model.n_kv_heads = cfg.model.n_heads
    return cfg


def validate(cfg: JobConfig, world_size: int) -> None:
    """Cross-field checks that need the world size; raise ConfigError on the first problem."""
    m, d, t = cfg.model, cfg.distributed, cfg.training
    positive = [("model", "vocab_size"), ("model", "d_model"), ("model", "n_heads"),
                ("model", "n_layers"), ("model", "n_kv_heads"), ("model", "max_seq_len"),
                ("model", "multiple_of"), ("distributed", "tp_size"), ("distributed", "pp_size"),
                ("training", "batch_size"), ("training", "seq_len"), ("training", "steps"),
                ("training", "grad_accum_steps"), ("metrics", "log_every")]
    for section, key in positive:
        value = getattr(getattr(cfg, section), key)
        if value < 1:
            raise ConfigError(f"{section}.{key} = {value} must be >= 1")
    for section, key in [("checkpoint", "save_interval"), ("checkpoint", "keep_last_n"),
                         ("training", "warmup_steps"), ("training", "max_norm"),
                         ("optimizer", "weight_decay")]:
        value = getattr(getattr(cfg, section), key)
        if value < 0:
            raise ConfigError(f"{section}.{key} = {value} must be >= 0")
    if cfg.optimizer.lr <= 0:
        raise ConfigError(f"optimizer.lr = {cfg.optimizer.lr} must be > 0")
    if len(cfg.optimizer.betas) != 2 or not all(0 <= b < 1 for b in cfg.optimizer.betas):
        raise ConfigError(f"optimizer.betas = {cfg.optimizer.betas}: expected two numbers in [0, 1), e.g. [0.9, 0.95]")
    if m.d_model % m.n_heads:
        raise ConfigError(f"model.n_heads = {m.n_heads} must divide model.d_model = {m.d_model} "
                          f"(valid: {_divisors(m.d_model, limit=m.d_model // 8)})")
    if m.n_heads % m.n_kv_heads:
        raise ConfigError(f"model.n_kv_heads = {m.n_kv_heads} must divide model.n_heads = {m.n_heads} "
                          f"(valid: {_divisors(m.n_heads)})")
    if (m.d_model // m.n_heads) % 2:
        raise ConfigError(f"model.d_model / model.n_heads = {m.d_model // m.n_heads} must be even for RoPE")
    if d.pp_size != 1:
        raise ConfigError(f"distributed.pp_size = {d.pp_size}: pipeline parallel is not implemented yet; use 1")
    tp = d.tp_size
    if world_size % tp:
        raise ConfigError(f"distributed.tp_size = {tp} must divide the world size {world_size} "
                          f"(valid: {_divisors(world_size)})")
    for key, value in (("n_heads", m.n_heads), ("n_kv_heads", m.n_kv_heads)):
        if value % tp:
            raise ConfigError(f"distributed.tp_size = {tp} must divide model.{key} = {value} "
                              f"(valid tp_size: {_common_divisors(m.n_heads, m.n_kv_heads, world_size)})")
    if t.seq_len > m.max_seq_len:
        raise ConfigError(f"training.seq_len = {t.seq_len} exceeds model.max_seq_len = {m.max_seq_len}")
    if tp > 1 and t.seq_len % tp:
        raise ConfigError(f"training.seq_len = {t.seq_len} must be a multiple of distributed.tp_size = {tp} "
                          "(sequence parallel splits it)")
    dp = world_size // tp
    if dp > 1 and not d.fsdp:
        raise ConfigError(f"distributed.fsdp = false needs one data-parallel group, but world size {world_size} / "
                          f"tp_size {tp} = {dp}; set fsdp = true or tp_size = {world_size}")
    per_step = dp * t.grad_accum_steps
    if t.batch_size % per_step:
        raise ConfigError(f"training.batch_size = {t.batch_size} (global) must be a multiple of data-parallel ranks "
                          f"({dp}) x training.grad_accum_steps ({t.grad_accum_steps}) = {per_step}")


def _divisors(n: int, limit: int | None = None) -> str:
    ds = [k for k in range(1, n + 1) if n % k == 0 and (limit is None or k <= max(limit, 1))]
    return ", ".join(map(str, ds[:12])) + (", ..." if len(ds) > 12 else "")


def _common_divisors(*ns: int) -> str:
    return ", ".join(str(k) for k in range(1, min(ns) + 1) if all(n % k == 0 for n in ns))


def to_dict(cfg: JobConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
