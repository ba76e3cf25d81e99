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

from titan_knowledge import coerce
from titan_train.config.fields import range_error, setting
from titan_train.config.model_args import ModelArgs  # the [model] section (torch-free)
from titan_train.config.parallel_dims import LayoutError, ParallelDims
from titan_train.config.precision import PRECISIONS
from titan_train.runtime.device import BACKEND_CHOICES  # torch-free at import

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(Exception):
    """A user mistake in a config file or override (shown as one line, no traceback)."""


@dataclass
class OptimizerConfig:
    name: str = setting("AdamW", "only AdamW today", choices=("AdamW",))
    lr: float = setting(
        3e-4, "peak learning rate (after warmup); above 1e30 AdamW's bias-corrected step overflows fp32", gt=0, le=1e30
    )
    betas: list[float] = setting(
        doc="AdamW's moment decay rates, two numbers", ge=0, lt=1, each=True, default_factory=lambda: [0.9, 0.95]
    )
    weight_decay: float = setting(0.1, "decoupled weight decay", ge=0)
    eps: float = setting(1e-8, "added to the denominator of the AdamW update", gt=0, lt=1)


@dataclass
class DistributedConfig:
    backend: str = setting("auto", 'process-group backend ("auto" picks npu > cuda > cpu)', choices=BACKEND_CHOICES)
    fsdp: bool = setting(True, "shard params/grads/optimizer state with FSDP2")
    tp_size: int = setting(1, "tensor-parallel degree", ge=1)
    pp_size: int = setting(1, "pipeline stages; dp = world_size / (tp_size x pp_size)", ge=1)
    dp_replicate_size: int = setting(
        1, "HSDP: FSDP shards within groups of dp / dp_replicate_size ranks and replicates across them", ge=1
    )
    dp_shard_size: int = setting(
        0, "HSDP: ranks one replica shards over (0 = dp / dp_replicate_size); the product must be dp", ge=0
    )
    pp_microbatches: int = setting(
        0, "micro-batches per pipeline step, splitting each rank's batch (0 = pp_size)", ge=0
    )
    pp_schedule: str = setting(
        "1f1b",
        "pipeline schedule (interleaved_1f1b: two stages per rank)",
        choices=("gpipe", "1f1b", "interleaved_1f1b"),
    )
    cpu_offload: bool = setting(False, "keep sharded params and optimizer state in host memory")
    timeout_s: float = setting(
        0.0,
        "how long a collective may wait for the other ranks before it fails (init_process_group's timeout; "
        "0 = torch's default: 30 min, nccl 10 min); raise it with HCCL_EXEC_TIMEOUT (titan-doctor diagnose)",
        ge=0,
    )


@dataclass
class CheckpointConfig:
    save_interval: int = setting(0, "save every N steps (0 = never; the last step is always saved when > 0)", ge=0)
    keep_last_n: int = setting(0, "keep only the newest N step-* folders (0 = keep all)", ge=0)
    folder: str = setting("", "default: outputs/<config name>/checkpoints")
    resume: bool = setting(True, "resume from the newest complete step-* folder")
    async_save: bool = setting(False, "DCP async save: training goes on while step-N.tmp is written", toml_key="async")
    initial_load_path: str = setting(
        "",
        "a new run (nothing to resume) starts from this checkpoint: DCP, torch.save, HF safetensors, Meta, DeepSpeed",
    )
    initial_load_model_only: bool = setting(
        True, "weights only; false also loads the optimizer moments (DCP in the trainer's layout)"
    )
    export_final: str = setting(
        "none", "at the last step write the model to <folder>/export-step-N/", choices=("none", "torch", "hf")
    )
    export_dtype: str = setting("fp32", "dtype of export_final", choices=tuple(PRECISIONS))


@dataclass
class TrainingConfig:
    batch_size: int = setting(
        8, "GLOBAL batch in sequences per optimizer step (split over dp ranks and grad_accum_steps)", ge=1
    )
    seq_len: int = setting(256, "tokens per sequence", ge=1)
    steps: int = setting(40, "optimizer steps to reach (a resumed run continues up to this)", ge=1)
    grad_accum_steps: int = setting(1, "micro-batches per optimizer step", ge=1)
    max_norm: float = setting(1.0, "gradient clipping (0 = off)", ge=0)
    warmup_steps: int = setting(5, "linear warmup from 0 to optimizer.lr", ge=0)
    lr_schedule: str = setting("cosine", "decay after warmup", choices=("cosine", "linear", "constant"))
    min_lr_ratio: float = setting(0.1, "floor of the decay, as a fraction of lr", ge=0, le=1)
    mixed_precision: str = setting("fp32", "compute dtype of params; reductions stay fp32", choices=tuple(PRECISIONS))
    seed: int = setting(0, "weight init (any integer)")
    activation_checkpoint: str = setting(
        "none",
        "full: recompute whole blocks; selective: keep matmul/attention outputs",
        choices=("none", "full", "selective"),
    )
    ac_every: int = setting(1, "apply activation checkpointing to every k-th block (1 = all)", ge=1)
    selective_ac_option: str = setting(
        "all_mm",
        "what selective AC keeps: all_mm = every matmul and attention output; op = torchtitan's "
        "op-level policy, attention and every second matmul (less memory, more recompute)",
        choices=("all_mm", "op"),
    )
    compile: bool = setting(False, "torch.compile each transformer block")
    loss_chunks: int = setting(
        1,
        "compute the output projection and the loss this many sequence pieces at a time, each "
        "recomputed in backward: logits of one piece at a time (1 = all at once; no pipeline)",
        ge=1,
    )


@dataclass
class DataConfig:
    dataset: str = setting(
        "builtin",
        '"builtin" (generated), a folder from `titan-train prepare-data` '
        "(memory-mapped), or a small .txt / .jsonl file (tokenized in RAM)",
    )
    tokenizer: str = setting("byte", '"byte" (built in) or a HuggingFace tokenizer.json path')
    text_field: str = setting("text", "the JSONL field holding the text")
    allow_tokenizer_change: bool = setting(
        False,
        "resume a checkpoint trained with another tokenizer (its token "
        "ids then mean other text than the model learned)",
    )
    shuffle: bool = setting(
        True,
        "read a prepared folder or corpus file as seq_len windows in a seeded random order, a new one "
        'each pass ("builtin" is read in order); a function of the samples consumed, so resume stays exact',
    )
    seed: int = setting(0, "the shuffle's seed (any integer)")
    datasets: list[str] = setting(
        doc="mix several datasets (each prepared once, or a corpus file) instead of data.dataset",
        default_factory=list,
    )
    weights: list[float] = setting(
        doc="one weight per data.datasets entry (normalized; default: equal)", gt=0, each=True, default_factory=list
    )


@dataclass
class ValidationConfig:
    dataset: str = setting(
        "",
        'held-out data, read in order: a prepared folder, a .txt / .jsonl file or "builtin" ("" = no validation)',
    )
    every: int = setting(100, "evaluate the validation loss and perplexity every N steps", ge=1)
    batches: int = setting(
        10, "validation batches per evaluation, each training.batch_size x training.seq_len tokens", ge=1
    )


@dataclass
class MetricsConfig:
    log_every: int = setting(1, "print a metrics line every N steps", ge=1)
    tensorboard: bool = setting(False, "also write TensorBoard event files (pip install 'titan-npu[tb]')")
    tb_folder: str = setting("", "TensorBoard folder (default: <run folder>/tb)")
    peak_tflops: float = setting(0.0, "override the per-device peak used for MFU (0 = look up / measure)", ge=0)
    output: str = setting(
        "",
        "metrics.jsonl path (default: outputs/<config name>/metrics.jsonl); its folder is "
        "the run folder (traces, rank logs, hang dumps)",
    )
    wandb: bool = setting(
        False, "also log to Weights & Biases (pip install 'titan-npu[wandb]'), under <run folder>/wandb"
    )
    wandb_project: str = setting("titan-npu", "the W&B project")
    wandb_mode: str = setting(
        "offline",
        "offline: written locally, never waits for a server (`wandb sync` uploads later); online: streamed",
        choices=("offline", "online"),
    )


@dataclass
class ProfilingConfig:
    enabled: bool = setting(False, "trace steps with torch.profiler (torch_npu.profiler on NPU)")
    wait: int = setting(1, "steps skipped at the start of each cycle", ge=0)
    warmup: int = setting(1, "steps traced but thrown away (profiler start-up cost)", ge=0)
    active: int = setting(2, "steps recorded per cycle", ge=1)
    repeat: int = setting(1, "cycles (0 = until the run ends)", ge=0)
    folder: str = setting("", "traces go to <folder>/rank<N>/ (default: <run folder>/profile)")
    record_shapes: bool = setting(False, "record operator input shapes")
    profile_memory: bool = setting(False, "record tensor allocations per operator")
    with_stack: bool = setting(False, "record Python stacks (large traces)")
    memory_snapshot: bool = setting(False, "also dump the allocator history (memory_snapshot_rank<N>.pickle; npu/cuda)")
    npu_level: str = setting("Level1", "torch_npu profiler level", choices=("Level0", "Level1", "Level2"))


@dataclass
class WatchdogConfig:
    enabled: bool = setting(True, "fail a hung run with per-rank stack dumps instead of waiting forever")
    factor: float = setting(20.0, "a step is hung when it takes factor x the median step time ...", gt=1)
    floor_s: float = setting(300.0, "... and at least this many seconds", gt=0)
    startup_s: float = setting(1800.0, "limit for the first steps, before there is a median (compile, warm-up)", gt=0)


@dataclass
class JobConfig:
    model: ModelArgs = field(default_factory=ModelArgs)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    name: str = "job"  # taken from the config file's name


SECTIONS = [f.name for f in dataclasses.fields(JobConfig) if f.name != "name"]


def section_fields(section: str) -> tuple[dataclasses.Field, ...]:
    """The fields of one [section], each with its metadata (doc, range, choices)."""
    return dataclasses.fields(typing.get_type_hints(JobConfig)[section])


FIELDS = {(section, f.name): f for section in SECTIONS for f in section_fields(section)}
CHOICES = {key: f.metadata["choices"] for key, f in FIELDS.items() if f.metadata.get("choices")}
# TOML keys that are Python keywords, stored under another field name.
KEY_ALIASES = {(s, f.metadata["toml_key"]): f.name for (s, _), f in FIELDS.items() if f.metadata.get("toml_key")}


def _field_hints() -> dict[tuple[str, str], Any]:
    hints = typing.get_type_hints(JobConfig)
    return {
        (section, name): hint for section in SECTIONS for name, hint in typing.get_type_hints(hints[section]).items()
    }


HINTS = _field_hints()  # (section, key) -> the field's type


def _coerce(section: str, key: str, value: Any) -> Any:
    """Check a TOML value against the field's type (titan_knowledge.coerce: the one
    converter); ints are accepted where floats are."""
    where, hint = f"{section}.{key}", HINTS[(section, key)]
    converted, ok = coerce(value, hint)  # TOML has no null, so None never arrives here
    if ok:
        return converted
    if typing.get_origin(hint) is list:
        example = '["a", "b"]' if typing.get_args(hint) == (str,) else "[0.9, 0.95]"
        kind = "strings" if typing.get_args(hint) == (str,) else "numbers"
        raise ConfigError(f"{where} = {value!r}: expected a list of {kind}, e.g. {example}")
    names = " or ".join(k.__name__ for k in (typing.get_args(hint) or (hint,)) if k is not type(None))
    raise ConfigError(f"{where} = {value!r}: expected {names}, got {type(value).__name__}")


def _section_keys(section: str) -> list[str]:
    return [k for (s, k) in HINTS if s == section]


def from_dict(raw: dict[str, Any], name: str = "job") -> JobConfig:
    cfg = JobConfig(name=name)
    for section, values in raw.items():
        if section not in SECTIONS:
            raise ConfigError(f"unknown section [{section}]; valid sections: {', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table of key = value")
        target = getattr(cfg, section)
        for key, value in values.items():
            key = KEY_ALIASES.get((section, key), key)
            if (section, key) not in HINTS:
                raise ConfigError(
                    f"unknown key {section}.{key}; valid keys in [{section}]: {', '.join(_section_keys(section))}"
                )
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


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path is a folder, not a TOML file: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None


def load(path: str | Path, overrides: list[str] = ()) -> JobConfig:
    """Read a TOML config and apply overrides (checked like the file itself)."""
    return from_raw(read_toml(path), overrides, Path(path).stem)


def from_raw(raw: dict[str, Any], overrides: list[str] = (), name: str = "job") -> JobConfig:
    """Sections as read from TOML, plus `--set` overrides, into a checked JobConfig."""
    for text in overrides:
        section, key, value = parse_override(text)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigError(f"--set {text!r}: [{section}] is not a table")
        raw[section][key] = value
    return _fill_defaults(from_dict(raw, name=name))


def _fill_defaults(cfg: JobConfig) -> JobConfig:
    if not cfg.checkpoint.folder:
        cfg.checkpoint.folder = f"outputs/{cfg.name}/checkpoints"
    if not cfg.metrics.output:
        cfg.metrics.output = f"outputs/{cfg.name}/metrics.jsonl"
    if not cfg.metrics.tb_folder:
        cfg.metrics.tb_folder = str(run_dir(cfg) / "tb")
    if not cfg.profiling.folder:
        cfg.profiling.folder = str(run_dir(cfg) / "profile")
    if cfg.model.n_kv_heads is None:
        cfg.model.n_kv_heads = cfg.model.n_heads
    return cfg


def run_dir(cfg: JobConfig) -> Path:
    """The run folder: where metrics.jsonl lives, and with it traces, rank logs and hang dumps."""
    return Path(cfg.metrics.output).parent


def validate(cfg: JobConfig, world_size: int) -> None:
    """Cross-field checks that need the world size; raise ConfigError on the first problem."""
    m, d, t = cfg.model, cfg.distributed, cfg.training
    check_ranges(cfg)
    if len(cfg.optimizer.betas) != 2:
        raise ConfigError(f"optimizer.betas = {cfg.optimizer.betas}: expected two numbers in [0, 1), e.g. [0.9, 0.95]")
    if m.d_model % m.n_heads:
        raise ConfigError(
            f"model.n_heads = {m.n_heads} must divide model.d_model = {m.d_model} "
            f"(valid: {_divisors(m.d_model, limit=m.d_model // 8)})"
        )
    if m.n_heads % m.n_kv_heads:
        raise ConfigError(
            f"model.n_kv_heads = {m.n_kv_heads} must divide model.n_heads = {m.n_heads} (valid: {_divisors(m.n_heads)})"
        )
    if (m.d_model // m.n_heads) % 2:
        raise ConfigError(f"model.d_model / model.n_heads = {m.d_model // m.n_heads} must be even for RoPE")
    tp, pp = d.tp_size, d.pp_size
    try:
        dims = ParallelDims.of(d, world_size)
    except LayoutError as e:
        raise ConfigError(str(e)) from None
    for key, value in (("n_heads", m.n_heads), ("n_kv_heads", m.n_kv_heads)):
        if value % tp:
            raise ConfigError(
                f"distributed.tp_size = {tp} must divide model.{key} = {value} "
                f"(valid tp_size: {_common_divisors(m.n_heads, m.n_kv_heads, world_size)})"
            )
    _validate_widths(m, tp)
    if t.seq_len > m.max_seq_len:
        raise ConfigError(f"training.seq_len = {t.seq_len} exceeds model.max_seq_len = {m.max_seq_len}")
    if tp > 1 and t.seq_len % tp:
        raise ConfigError(
            f"training.seq_len = {t.seq_len} must be a multiple of distributed.tp_size = {tp} "
            "(sequence parallel splits it)"
        )
    if t.loss_chunks > 1 and (t.seq_len // tp) % t.loss_chunks:
        raise ConfigError(
            f"training.loss_chunks = {t.loss_chunks} must divide the {t.seq_len // tp} tokens of a rank's "
            f"sequence (training.seq_len {t.seq_len} / distributed.tp_size {tp})"
        )
    if t.loss_chunks > 1 and pp > 1:
        raise ConfigError(
            f"training.loss_chunks = {t.loss_chunks} is for the eager step; with distributed.pp_size = {pp} "
            "set it to 1 (the pipeline's last stage keeps its logits for its schedule)"
        )
    if dims.dp > 1 and not d.fsdp:
        raise ConfigError(
            f"distributed.fsdp = false needs one data-parallel group, but world size {world_size} / "
            f"(tp_size {tp} x pp_size {pp}) = {dims.dp}; set fsdp = true or change the layout"
        )
    per_step = dims.dp * t.grad_accum_steps
    if t.batch_size % per_step:
        raise ConfigError(
            f"training.batch_size = {t.batch_size} (global) must be a multiple of data-parallel ranks "
            f"({dims.dp}) x training.grad_accum_steps ({t.grad_accum_steps}) = {per_step}"
        )
    if pp > 1:
        _validate_pipeline(cfg, dims, local_batch=t.batch_size // per_step)


def advisories(cfg: JobConfig) -> list[str]:
    """Settings that run but rarely mean what was intended: one warning line each."""
    t = cfg.training
    out = []
    if 0 < t.steps <= t.warmup_steps:
        out.append(
            f"training.warmup_steps = {t.warmup_steps} >= training.steps = {t.steps}: the learning rate "
            f"never reaches optimizer.lr (it ends at {t.steps / (t.warmup_steps + 1):.0%} of it) and never "
            f"decays; set warmup_steps below steps (often 1-10% of them)"
        )
    return out


def check_ranges(cfg: JobConfig) -> None:
    """Every numeric field against the range declared next to its definition."""
    for (section, key), f in FIELDS.items():
        where = f"{section}.{f.metadata.get('toml_key') or key}"
        problem = range_error(where, f, getattr(getattr(cfg, section), key))
        if problem:
            raise ConfigError(problem)


def _validate_widths(m: ModelArgs, tp: int) -> None:
    """The SwiGLU width (ModelArgs.ffn_dim, the model's own formula) must exist, and tensor
    parallelism splits it and the vocabulary into tp_size equal parts."""
    ffn = m.ffn_dim
    if ffn < 1:
        raise ConfigError(
            f"model.ffn_dim_multiplier = {m.ffn_dim_multiplier} makes a SwiGLU width of {ffn}; "
            "use a multiplier >= 1 / int(8 * model.d_model / 3)"
        )
    if ffn % tp:
        raise ConfigError(
            f"distributed.tp_size = {tp} must divide the SwiGLU width {ffn} (from model.d_model = "
            f"{m.d_model}, ffn_dim_multiplier = {m.ffn_dim_multiplier}, multiple_of = "
            f"{m.multiple_of}); set model.multiple_of to a multiple of {tp}, or tp_size to one of: "
            f"{_divisors(ffn, limit=64)}"
        )
    if m.vocab_size % tp:
        multiple = -(-m.vocab_size // tp) * tp
        raise ConfigError(
            f"distributed.tp_size = {tp} must divide model.vocab_size = {m.vocab_size} (the embedding "
            f"and output are split by vocabulary rows); set model.vocab_size = {multiple}"
        )


def _validate_pipeline(cfg: JobConfig, dims: ParallelDims, local_batch: int) -> None:
    """Layouts the pipeline schedules cannot run, one line each."""
    m, d = cfg.model, cfg.distributed
    stages = pipeline_stages(d)
    if m.n_layers < stages:
        per_rank = "" if stages == dims.pp else f" ({stages // dims.pp} per rank with pp_schedule = '{d.pp_schedule}')"
        raise ConfigError(
            f"distributed.pp_size = {dims.pp} makes {stages} pipeline stages{per_rank}, but model.n_layers "
            f"= {m.n_layers}: every stage needs at least one transformer block"
        )
    mb = pipeline_microbatches(d)
    if local_batch % mb:
        raise ConfigError(
            f"distributed.pp_microbatches = {mb} must divide the {local_batch} sequences each pipeline "
            "step gets (training.batch_size / (dp x grad_accum_steps))"
        )
    if d.pp_schedule == "1f1b" and mb < dims.pp:
        raise ConfigError(
            f"distributed.pp_schedule = '1f1b' needs distributed.pp_microbatches >= pp_size = {dims.pp} "
            f"(got {mb}); raise it or use pp_schedule = 'gpipe'"
        )
    rounds = max(1, mb // dims.pp)
    if d.pp_schedule == "interleaved_1f1b" and mb % rounds:
        raise ConfigError(
            f"distributed.pp_microbatches = {mb} with pp_schedule = 'interleaved_1f1b' must be a multiple "
            f"of pp_microbatches // pp_size = {rounds}"
        )


def pipeline_stages(d: DistributedConfig) -> int:
    """Pipeline stages in the whole pipeline: one per pp rank, two for interleaved schedules."""
    return d.pp_size * (2 if d.pp_schedule == "interleaved_1f1b" else 1)


def pipeline_microbatches(d: DistributedConfig) -> int:
    """Micro-batches per pipeline step: pp_microbatches, or one per pp rank when it is 0."""
    return d.pp_microbatches or d.pp_size


def _divisors(n: int, limit: int | None = None) -> str:
    ds = [k for k in range(1, n + 1) if n % k == 0 and (limit is None or k <= max(limit, 1))]
    return ", ".join(map(str, ds[:12])) + (", ..." if len(ds) > 12 else "")


def _common_divisors(*ns: int) -> str:
    return ", ".join(str(k) for k in range(1, min(ns) + 1) if all(n % k == 0 for n in ns))


def to_dict(cfg: JobConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
