"""Read a torchtitan v0.2.x training TOML (the llama3 model) into the trainer's JobConfig.

A torchtitan user brings `train_configs/llama3_8b.toml` as it is. Each key that has a
meaning here is converted (torchtitan's defaults fill the keys the file leaves out, as
torchtitan itself does); every key that does not is named in one block printed at start,
with the reason, so nothing is dropped silently. Layout changes we cannot honour (context
parallel, a shard degree that does not fit the world size, another model) are errors.

Activation checkpointing, pipeline schedules and compile map onto the trainer's
training.activation_checkpoint / ac_every / compile and distributed.pp_schedule /
pp_microbatches. A key whose trainer counterpart does not exist (initial load) is listed
as ignored, never dropped. `--set` (and torchtitan's `--section.key=value` flags) take
torchtitan's keys, applied to the file before the conversion; one that would be ignored is
refused, since it was asked for by name.

Facts about torchtitan come from pytorch/torchtitan v0.2.2: torchtitan/config/job_config.py
(section fields and defaults), torchtitan/train.py (global batch and gradient accumulation),
torchtitan/tools/profiling.py (profiler schedule), torchtitan/distributed/activation_checkpoint.py
(layer-wise selective AC wraps every k-th block whole; op-level recomputes every second mm),
torchtitan/distributed/pipeline_parallel.py (n_microbatches = local_batch_size /
pipeline_parallel_microbatch_size; two stages per rank for multi-stage schedules), torch's
pipelining get_schedule_class (schedule names), and rules/torchtitan_llama3.toml (flavors).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_knowledge import load as load_knowledge
from titan_train.config import job as config_mod
from titan_train.config.job import ConfigError, JobConfig
from titan_train.config.precision import SHORT_NAMES

# Sections only torchtitan has; a file with any of them is read as a torchtitan config.
MARKERS = {"job", "parallelism", "lr_scheduler", "activation_checkpoint", "compile", "quantize"}
# [validation] is both trainers' section: only torchtitan's own keys in it mark a torchtitan file
# (this trainer's are dataset / every / batches).
VALIDATION_MARKERS = {"enable", "freq", "steps", "dataset_path", "local_batch_size", "seq_len", "dataloader"}

# torchtitan's defaults for the keys we convert (job_config.py, v0.2.2).
DEFAULTS = {
    "job": {"dump_folder": "./outputs"},
    "profiling": {
        "enable_profiling": False,
        "save_traces_folder": "profile_traces",
        "profile_freq": 10,
        "profiler_active": 1,
        "profiler_warmup": 3,
        "enable_memory_snapshot": False,
    },
    "metrics": {"log_freq": 10, "enable_tensorboard": False, "save_tb_folder": "tb"},
    "model": {"name": "llama3", "flavor": "debugmodel", "hf_assets_path": "./tests/assets/tokenizer"},
    "optimizer": {"name": "AdamW", "lr": 8e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1},
    "lr_scheduler": {"warmup_steps": 200, "decay_type": "linear", "min_lr_factor": 0.0},
    "training": {
        "dataset": "c4_test",
        "local_batch_size": 8,
        "global_batch_size": -1,
        "seq_len": 2048,
        "max_norm": 1.0,
        "steps": 10000,
        "enable_cpu_offload": False,
        "mixed_precision_param": "bfloat16",
    },
    "parallelism": {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": -1,
        "tensor_parallel_degree": 1,
        "pipeline_parallel_degree": 1,
        "pipeline_parallel_schedule": "1F1B",
        "pipeline_parallel_microbatch_size": 1,
        "context_parallel_degree": 1,
    },
    "checkpoint": {
        "enable": False,
        "folder": "checkpoint",
        "interval": 500,
        "async_mode": "disabled",
        "keep_latest_k": 10,
        "initial_load_model_only": True,
    },
    "activation_checkpoint": {"mode": "selective", "selective_ac_option": "2"},
    "compile": {"enable": False},
}
_OFF = (False, "", [], None, "none", "disabled")  # values that switch a feature off
# Keys that change nothing about training, whatever their value.
NO_EFFECT = {
    ("job", "description"),
    ("job", "print_config"),
    ("job", "config_file"),
    ("job", "custom_config_module"),
    ("metrics", "disable_color_printing"),
    ("model", "print_after_conversion"),
}


@dataclass
class Conversion:
    """The trainer-shaped sections, and what the reader did not carry over."""

    raw: dict[str, dict[str, Any]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    approximated: list[str] = field(default_factory=list)

    def block(self, path: str | Path) -> str:
        lines = [f"[titan-train] {path}: torchtitan config, converted"]
        if self.approximated:
            lines.append("  differs from torchtitan:")
            lines += [f"    {line}" for line in self.approximated]
        if self.ignored:
            lines.append(f"  ignored ({len(self.ignored)}):")
            lines += [f"    {line}" for line in self.ignored]
        return "\n".join(lines)


def is_torchtitan(raw: dict[str, Any]) -> bool:
    model, validation = raw.get("model"), raw.get("validation")
    return (
        bool(MARKERS & raw.keys())
        or (isinstance(model, dict) and "flavor" in model)
        or (isinstance(validation, dict) and bool(VALIDATION_MARKERS & validation.keys()))
    )


def _flatten(raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


class _Reader:
    def __init__(self, raw: dict[str, Any]):
        self.raw, self.used = raw, set()
        self.extension: tuple[str, ...] = ()  # keys a custom config module adds (listed once, by convert)
        self.out = Conversion()

    def get(self, section: str, key: str) -> Any:
        self.used.add(f"{section}.{key}")
        table = self.raw.get(section, {})
        return table.get(key, DEFAULTS.get(section, {}).get(key)) if isinstance(table, dict) else None

    def set(self, section: str, key: str, value: Any, origin: str) -> None:
        """Write a trainer key; one this trainer does not have yet is reported (unless it
        would only switch something off), not dropped."""
        if (section, key) in config_mod.HINTS:
            self.out.raw.setdefault(section, {})[key] = value
        elif value not in _OFF:
            self.out.ignored.append(f"{origin} -> {section}.{key} = {value!r}: not in this trainer yet")

    def switched_on(self, name: str, value: Any) -> bool:
        """A key whose value does something: not off, and not inside a table with enable = false."""
        table = name.rpartition(".")[0]
        return value not in _OFF and _flatten(self.raw).get(f"{table}.enable") is not False

    def ignore(self, name: str, why: str) -> None:
        self.used.add(name)
        table, _, key = name.partition(".")
        value = self.raw.get(table, {}).get(key)
        if key in self.raw.get(table, {}) and self.switched_on(name, value):
            self.out.ignored.append(f"{name} = {value!r}: {why}")

    def leftovers(self) -> None:
        """Every other key that is switched on. Keys that are off (false, empty) or inside a
        table whose `enable` is false change nothing by being ignored."""
        for name, value in _flatten(self.raw).items():
            section, _, key = name.partition(".")
            added = any(name == e or name.startswith(e + ".") for e in self.extension)
            if (
                name not in self.used
                and not added
                and (section, key) not in NO_EFFECT
                and self.switched_on(name, value)
            ):
                self.out.ignored.append(f"{name} = {value!r}: no equivalent in this trainer")


def _known_keys() -> dict[str, set[str]]:
    """torchtitan's JobConfig: {"training": {"steps", ...}, "quantize.linear.float8": {...}}."""
    return {row["name"]: set(row["keys"]) for row in load_knowledge("torchtitan_job_config")["section"]}


def _nearest(name: str, options, spell) -> str:
    close = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
    return f"; did you mean {spell(close[0])}?" if close else ""


def _elsewhere(key: str, sections: dict[str, set[str]]) -> str:
    """A field of that name (or close to it) in another section: warmup_steps is in
    [lr_scheduler] in torchtitan, not in [training]."""
    owners = {k: t for t, keys in sorted(sections.items()) for k in sorted(keys)}
    return _nearest(key, owners, lambda c: f"{owners[c]}.{c}")


def _unknown_keys(raw: dict[str, Any], sections: dict[str, set[str]], prefix: str = "") -> list[tuple[str, str]]:
    """(name, one line naming the nearest valid key) per key torchtitan's JobConfig lacks."""
    out = []
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name in sections:
            out += _unknown_keys(value, sections, f"{name}.")
        elif not prefix:
            tops = [s for s in sections if "." not in s]
            out.append((name, f"[{key}] is not a torchtitan section{_nearest(key, tops, lambda c: f'[{c}]')}"))
        elif key not in sections[prefix[:-1]]:
            table = prefix[:-1]
            hint = _nearest(key, sections[table], lambda c, table=table: f"{table}.{c}") or _elsewhere(key, sections)
            out.append((name, f"{name} is not a field of torchtitan's [{table}]{hint}"))
    return out


def check_keys(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """torchtitan refuses a field its JobConfig lacks, so a misspelled key would otherwise
    train silently with the default: refuse it too, in one line naming the nearest valid key.
    A config that loads a custom config module may add sections and fields of its own; their
    keys are returned (to be listed as ignored) instead of refused."""
    unknown = _unknown_keys(raw, _known_keys())
    custom = [
        f"{t}.{k}"
        for t, k in (("job", "custom_config_module"), ("experimental", "custom_args_module"))
        if isinstance(raw.get(t), dict) and raw[t].get(k)
    ]
    if unknown and not custom:
        more = f" ({len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
        raise ConfigError(f"torchtitan config (v0.2.2 fields): {unknown[0][1]}{more}")
    return [(name, f"{line}: added by {custom[0]}? not read by this trainer") for name, line in unknown]


def convert(raw: dict[str, Any], world_size: int) -> Conversion:
    """torchtitan sections -> trainer sections for a job of `world_size` ranks."""
    extension = check_keys(raw)
    r = _Reader(raw)
    r.out.ignored += [line for _, line in extension]
    r.extension = tuple(name for name, _ in extension)
    _model(r)
    _optimizer(r)
    dp = _parallelism(r, world_size)
    _training(r, dp)
    _outputs(r)
    _validation(r)
    _activation_checkpoint(r)
    _comm(r)
    r.leftovers()
    return r.out


def _model(r: _Reader) -> None:
    name, flavor = r.get("model", "name"), r.get("model", "flavor")
    if name != "llama3":
        raise ConfigError(f"model.name = {name!r}: only torchtitan's llama3 model converts to this trainer")
    knowledge = load_knowledge("torchtitan_llama3")
    flavors = {f["name"]: f for f in knowledge["flavor"]}
    if flavor not in flavors:
        raise ConfigError(
            f"model.flavor = {flavor!r} is not a torchtitan llama3 flavor; use one of: {', '.join(flavors)}"
        )
    shape = {k: v for k, v in knowledge["model_defaults"].items() if k != "source"}
    shape.update({k: v for k, v in flavors[flavor].items() if k not in ("name", "source", "attention")})
    for key, value in shape.items():
        r.set("model", key, value, f"model.flavor = {flavor!r}")
    if "attention" in flavors[flavor]:
        r.out.approximated.append(f"model.flavor = {flavor!r}: {flavors[flavor]['attention']} runs as causal SDPA")
    # torchtitan's llama3 RoPE always applies Llama 3.1's frequency scaling (its RoPEScalingArgs
    # defaults: factor 8, low 1, high 4, original 8192 = this trainer's rope_* defaults)
    r.set("model", "rope_scaling_factor", 8.0, f"model.flavor = {flavor!r} (torchtitan's llama3 RoPE scaling)")
    assets = r.get("model", "hf_assets_path")
    tokenizer = Path(assets) / "tokenizer.json" if assets else None
    if tokenizer is not None and tokenizer.is_file():
        r.set("data", "tokenizer", str(tokenizer), "model.hf_assets_path")
    else:
        r.out.ignored.append(f"model.hf_assets_path = {assets!r}: no tokenizer.json there; using the byte tokenizer")
    r.used.add("model.tokenizer_path")
    if r.raw.get("model", {}).get("converters"):
        r.ignore("model.converters", "float8 / mx converters are not supported; training runs in the given dtype")
    r.used.add("model.converters")


def _optimizer(r: _Reader) -> None:
    name = r.get("optimizer", "name")
    if name != "AdamW":
        raise ConfigError(f"optimizer.name = {name!r}: only AdamW converts to this trainer")
    r.set("optimizer", "lr", float(r.get("optimizer", "lr")), "optimizer.lr")
    r.set(
        "optimizer",
        "betas",
        [float(r.get("optimizer", "beta1")), float(r.get("optimizer", "beta2"))],
        "optimizer.beta1/beta2",
    )
    r.set("optimizer", "eps", float(r.get("optimizer", "eps")), "optimizer.eps")
    r.set("optimizer", "weight_decay", float(r.get("optimizer", "weight_decay")), "optimizer.weight_decay")
    r.ignore("optimizer.implementation", "the trainer's AdamW uses the foreach implementation")
    r.ignore("optimizer.early_step_in_backward", "not supported")

    warmup = int(r.get("lr_scheduler", "warmup_steps"))
    r.set("training", "warmup_steps", warmup, "lr_scheduler.warmup_steps")
    decay = r.get("lr_scheduler", "decay_type")
    if decay not in ("linear", "cosine"):
        r.out.approximated.append(f"lr_scheduler.decay_type = {decay!r}: not supported, decays linearly")
        decay = "linear"
    r.set("training", "lr_schedule", decay, "lr_scheduler.decay_type")
    r.set("training", "min_lr_ratio", float(r.get("lr_scheduler", "min_lr_factor")), "lr_scheduler.min_lr_factor")
    r.out.approximated.append("warmup ramps as (step+1)/(warmup_steps+1), torchtitan as (step+1)/warmup_steps")
    r.ignore("lr_scheduler.decay_ratio", "no stable phase (WSD): the decay spans every step after warmup")
    r.ignore("lr_scheduler.total_steps", "the schedule spans training.steps")


def _parallelism(r: _Reader, world: int) -> int:
    """Sets the layout; returns the data-parallel degree."""
    replicate = int(r.get("parallelism", "data_parallel_replicate_degree"))
    shard = int(r.get("parallelism", "data_parallel_shard_degree"))
    tp = int(r.get("parallelism", "tensor_parallel_degree"))
    pp = int(r.get("parallelism", "pipeline_parallel_degree"))
    cp = int(r.get("parallelism", "context_parallel_degree"))
    if cp != 1:
        raise ConfigError(f"parallelism.context_parallel_degree = {cp}: context parallel is not supported; set it to 1")
    if world % (tp * pp):
        raise ConfigError(f"parallelism: tensor ({tp}) x pipeline ({pp}) degrees must divide the world size {world}")
    dp = world // (tp * pp)
    if shard != -1 and replicate * shard != dp:
        raise ConfigError(
            f"parallelism: data_parallel_replicate_degree ({replicate}) x data_parallel_shard_degree "
            f"({shard}) must be {dp} for {world} ranks with tp {tp} x pp {pp}; or set the shard degree to -1"
        )
    if replicate > 1 and dp % replicate:
        raise ConfigError(
            f"parallelism.data_parallel_replicate_degree = {replicate} must divide the {dp} data-parallel ranks "
            f"of {world} ranks with tp {tp} x pp {pp}"
        )
    # HSDP as torchtitan's: shard within dp / replicate ranks, replicate across
    r.set("distributed", "dp_replicate_size", replicate, "parallelism.data_parallel_replicate_degree")
    r.set("distributed", "tp_size", tp, "parallelism.tensor_parallel_degree")
    r.set("distributed", "pp_size", pp, "parallelism.pipeline_parallel_degree")
    if pp > 1:
        r.set("distributed", "pp_schedule", _pp_schedule(r), "parallelism.pipeline_parallel_schedule")
        local = int(r.get("training", "local_batch_size"))
        micro = int(r.get("parallelism", "pipeline_parallel_microbatch_size"))
        if micro < 1 or local % micro:
            raise ConfigError(
                f"parallelism.pipeline_parallel_microbatch_size = {micro} must divide training.local_batch_size "
                f"= {local}"
            )
        r.set("distributed", "pp_microbatches", local // micro, "parallelism.pipeline_parallel_microbatch_size")
    r.used.update({"parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size"})
    for key in (
        "fsdp_reshard_after_forward",
        "enable_async_tensor_parallel",
        "disable_loss_parallel",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "pipeline_parallel_layers_per_stage",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "context_parallel_load_balancer",
        "context_parallel_rotate_method",
    ):
        r.used.add(f"parallelism.{key}")
        default = {"fsdp_reshard_after_forward": "default"}.get(key)
        value = r.raw.get("parallelism", {}).get(key)
        neutral = value is None or value is False or value == default or (type(value) is int and value in (1, -1))
        if not neutral:  # (True == 1 in Python: a switched-on flag must not pass as a degree of 1)
            r.out.ignored.append(f"parallelism.{key} = {value!r}: not supported")
    return dp


def _training(r: _Reader, dp: int) -> None:
    local = int(r.get("training", "local_batch_size"))
    global_batch = int(r.get("training", "global_batch_size"))
    if global_batch < 0:
        global_batch = local * dp
    if global_batch % (local * dp):
        raise ConfigError(
            f"training.global_batch_size = {global_batch} must be a multiple of local_batch_size "
            f"({local}) x data-parallel degree ({dp})"
        )
    r.set("training", "batch_size", global_batch, "training.local_batch_size x dp")
    r.set("training", "grad_accum_steps", global_batch // (local * dp), "training.global_batch_size")
    seq_len = int(r.get("training", "seq_len"))
    r.set("training", "seq_len", seq_len, "training.seq_len")
    r.set("model", "max_seq_len", seq_len, "training.seq_len")
    r.set("training", "steps", int(r.get("training", "steps")), "training.steps")
    r.set("training", "max_norm", float(r.get("training", "max_norm")), "training.max_norm")
    r.set("distributed", "cpu_offload", bool(r.get("training", "enable_cpu_offload")), "training.enable_cpu_offload")
    param = r.get("training", "mixed_precision_param")
    r.set("training", "mixed_precision", "bf16" if param == "bfloat16" else "fp32", "training.mixed_precision_param")
    r.ignore("training.mixed_precision_reduce", "reductions are always fp32 here")
    r.ignore("training.dtype", "full low-precision training is not supported; mixed_precision_param applies")
    dataset, path = r.get("training", "dataset"), r.raw.get("training", {}).get("dataset_path")
    r.used.add("training.dataset_path")
    if path:
        r.set("data", "dataset", str(path), "training.dataset_path")
    else:
        r.out.ignored.append(
            f"training.dataset = {dataset!r}: HF datasets are not downloaded here; using the "
            "built-in corpus (set training.dataset_path to a .txt / .jsonl file)"
        )
    seed = r.raw.get("debug", {}).get("seed")
    r.used.add("debug.seed")
    if seed is not None:
        r.set("training", "seed", int(seed), "debug.seed")


def _validation(r: _Reader) -> None:
    """[validation] enable / dataset_path / freq / steps -> this trainer's dataset / every /
    batches; a validation batch here has the training batch's shape."""
    raw = r.raw.get("validation", {})
    r.used.update(f"validation.{k}" for k in ("enable", "dataset", "dataset_path", "freq", "steps"))
    if not isinstance(raw, dict) or not raw.get("enable"):
        return
    if raw.get("dataset_path"):
        r.set("validation", "dataset", str(raw["dataset_path"]), "validation.dataset_path")
    else:
        r.set("validation", "dataset", "builtin", "validation.enable")
        r.out.ignored.append(
            f"validation.dataset = {raw.get('dataset', 'c4_validation')!r}: HF datasets are not downloaded here; "
            "validating on the built-in corpus (set validation.dataset_path to a .txt / .jsonl file)"
        )
    if "freq" in raw:
        r.set("validation", "every", int(raw["freq"]), "validation.freq")
    if int(raw.get("steps", -1)) > 0:
        r.set("validation", "batches", int(raw["steps"]), "validation.steps")
    elif "steps" in raw:
        r.out.ignored.append(
            f"validation.steps = {raw['steps']!r}: the whole dataset is not read; validation.batches applies"
        )
    for key in ("local_batch_size", "seq_len"):
        r.ignore(f"validation.{key}", "a validation batch has the training batch's shape here")


def _outputs(r: _Reader) -> None:
    """torchtitan writes everything under job.dump_folder: so does the converted run."""
    dump = Path(r.get("job", "dump_folder"))
    r.set("metrics", "output", str(dump / "metrics.jsonl"), "job.dump_folder")
    r.set("metrics", "log_every", int(r.get("metrics", "log_freq")), "metrics.log_freq")
    r.set("metrics", "tensorboard", bool(r.get("metrics", "enable_tensorboard")), "metrics.enable_tensorboard")
    r.set("metrics", "tb_folder", str(dump / r.get("metrics", "save_tb_folder")), "metrics.save_tb_folder")
    r.set("metrics", "wandb", bool(r.get("metrics", "enable_wandb")), "metrics.enable_wandb")  # offline here
    r.ignore("metrics.save_for_all_ranks", "rank 0 logs the global metrics")

    freq, warmup, active = (int(r.get("profiling", k)) for k in ("profile_freq", "profiler_warmup", "profiler_active"))
    if freq < warmup + active:
        raise ConfigError(
            f"profiling.profile_freq = {freq} must be >= profiler_warmup + profiler_active ({warmup} + {active})"
        )
    r.set("profiling", "enabled", bool(r.get("profiling", "enable_profiling")), "profiling.enable_profiling")
    for key, value in (("wait", freq - warmup - active), ("warmup", warmup), ("active", active), ("repeat", 0)):
        r.set("profiling", key, value, "profiling.profile_freq/profiler_warmup/profiler_active")
    r.set("profiling", "folder", str(dump / r.get("profiling", "save_traces_folder")), "profiling.save_traces_folder")
    r.set(
        "profiling",
        "memory_snapshot",
        bool(r.get("profiling", "enable_memory_snapshot")),
        "profiling.enable_memory_snapshot",
    )
    r.used.add("profiling.save_memory_snapshot_folder")
    if r.get("profiling", "enable_memory_snapshot"):
        r.ignore("profiling.save_memory_snapshot_folder", "the snapshot goes next to the rank's traces")

    enabled = bool(r.get("checkpoint", "enable"))
    r.set("checkpoint", "save_interval", int(r.get("checkpoint", "interval")) if enabled else 0, "checkpoint.interval")
    r.set("checkpoint", "resume", enabled, "checkpoint.enable")
    r.set("checkpoint", "folder", str(dump / r.get("checkpoint", "folder")), "checkpoint.folder")
    r.set("checkpoint", "keep_last_n", int(r.get("checkpoint", "keep_latest_k")), "checkpoint.keep_latest_k")
    mode = r.get("checkpoint", "async_mode")
    r.set("checkpoint", "async_save", mode != "disabled", "checkpoint.async_mode")
    if mode == "async_with_pinned_mem":
        r.out.approximated.append("checkpoint.async_mode = 'async_with_pinned_mem': runs as 'async'")
    initial = r.raw.get("checkpoint", {}).get("initial_load_path")
    r.used.update({"checkpoint.initial_load_path", "checkpoint.initial_load_model_only"})
    if initial:
        r.set("checkpoint", "initial_load_path", str(initial), "checkpoint.initial_load_path")
        r.set(
            "checkpoint",
            "initial_load_model_only",
            bool(r.get("checkpoint", "initial_load_model_only")),
            "checkpoint.initial_load_model_only",
        )
    _final_export(r, enabled)

    r.set("training", "compile", bool(r.get("compile", "enable")), "compile.enable")
    r.ignore("compile.components", "compile applies per transformer block")


_DTYPES = SHORT_NAMES  # torchtitan spells torch dtype names


def _final_export(r: _Reader, enabled: bool) -> None:
    """torchtitan's model-only last save (`last_save_model_only`, in `export_dtype`, or
    `last_save_in_hf`) is a separate file for other tools: here that is export_final, written
    next to a last checkpoint that stays full and resumable. Only keys the file sets count."""
    table = r.raw.get("checkpoint", {})
    r.used.update({"checkpoint.last_save_model_only", "checkpoint.last_save_in_hf", "checkpoint.export_dtype"})
    fmt = "hf" if table.get("last_save_in_hf") else "torch" if table.get("last_save_model_only") else None
    if not (enabled and fmt):
        return
    r.set("checkpoint", "export_final", fmt, "checkpoint.last_save_model_only/last_save_in_hf")
    dtype = str(table.get("export_dtype", "float32"))
    if dtype not in _DTYPES:
        raise ConfigError(f"checkpoint.export_dtype = {dtype!r}: torchtitan takes one of {', '.join(_DTYPES)}")
    r.set("checkpoint", "export_dtype", _DTYPES[dtype], "checkpoint.export_dtype")
    r.out.approximated.append(
        f"checkpoint.last_save_model_only: the last step stays a full checkpoint; the model alone goes to "
        f"<folder>/export-step-N as {'HF safetensors' if fmt == 'hf' else 'one torch.save file'} ({_DTYPES[dtype]})"
    )


# torchtitan's pipeline_parallel_schedule names (torch's get_schedule_class, case-insensitive)
# -> ours. The multi-stage ones run two stages per rank, as torchtitan does by default; ours
# is the interleaved 1F1B among them (same gradients, another order of micro-batches).
_PP_SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved1f1b": "interleaved_1f1b"}
_PP_MULTI_STAGE = ("loopedbfs", "interleavedzerobubble", "zbvzerobubble", "dualpipev")


def _pp_schedule(r: _Reader) -> str:
    name = str(r.get("parallelism", "pipeline_parallel_schedule"))
    if name.lower() in _PP_SCHEDULES:
        return _PP_SCHEDULES[name.lower()]
    if name.lower() in _PP_MULTI_STAGE:
        r.out.approximated.append(
            f"parallelism.pipeline_parallel_schedule = {name!r}: runs as 'interleaved_1f1b' "
            "(two stages per rank, same gradients)"
        )
        return "interleaved_1f1b"
    raise ConfigError(
        f"parallelism.pipeline_parallel_schedule = {name!r}: use one of GPipe, 1F1B, Interleaved1F1B "
        f"(or LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV, run as Interleaved1F1B)"
    )


def _comm(r: _Reader) -> None:
    """torchtitan's comm.init_timeout_seconds (init and the first step, default 300) and
    train_timeout_seconds (after it, default 100) are one process-group timeout here
    (distributed.timeout_s), the longer of those the file sets; unset, torch's default stays."""
    table = r.raw.get("comm", {})
    r.used.update({"comm.init_timeout_seconds", "comm.train_timeout_seconds"})
    given = {k: table[k] for k in ("init_timeout_seconds", "train_timeout_seconds") if k in table}
    if not given:
        return
    longest = max(given.values())
    r.set("distributed", "timeout_s", float(longest), "comm." + "/".join(given))
    if len(set(given.values())) > 1:
        r.out.approximated.append(
            f"comm.init_timeout_seconds = {given['init_timeout_seconds']}, train_timeout_seconds = "
            f"{given['train_timeout_seconds']}: one process-group timeout here, the longer ({longest} s)"
        )


def _activation_checkpoint(r: _Reader) -> None:
    """torchtitan's modes onto ours. Its layer-wise selective AC ('selective' with an integer
    k) wraps every k-th block whole: that is our full AC with ac_every = k. Its op-level
    selective AC ('op') is our selective AC with selective_ac_option = 'op'."""
    mode = r.get("activation_checkpoint", "mode")
    option = str(r.get("activation_checkpoint", "selective_ac_option"))
    every, keep = 1, "all_mm"
    if mode == "memory_budget":
        r.out.approximated.append("activation_checkpoint.mode = 'memory_budget' (compiler-driven): runs as 'full'")
        mode = "full"
    elif mode == "selective" and option.isdigit() and int(option) > 0:
        mode, every = "full", int(option)
        if every > 1:
            r.out.approximated.append(
                f"activation_checkpoint.selective_ac_option = '{option}': blocks 0, {every}, "
                f"{2 * every}, ... are checkpointed whole (torchtitan: blocks {every - 1}, "
                f"{2 * every - 1}, ...), as many blocks"
            )
    elif mode == "selective" and option == "op":
        keep = "op"
    elif mode == "selective":
        raise ConfigError(f"activation_checkpoint.selective_ac_option = {option!r}: use 'op' or a positive integer")
    r.set("training", "activation_checkpoint", mode, "activation_checkpoint.mode")
    r.set("training", "ac_every", every, "activation_checkpoint.selective_ac_option")
    r.set("training", "selective_ac_option", keep, "activation_checkpoint.selective_ac_option")
    r.ignore(
        "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
        "op-level selective AC here recomputes every second matmul, whatever its shape",
    )


# torchtitan's spelling -> this trainer's, for a torchtitan key met with a trainer TOML
# (the conversion above, as one line each).
TRAINER_KEYS = {
    "training.local_batch_size": "training.batch_size (the GLOBAL batch: local x dp x grad_accum_steps)",
    "training.global_batch_size": "training.batch_size (global) and training.grad_accum_steps",
    "training.mixed_precision_param": "training.mixed_precision (fp32 | bf16 | fp16)",
    "training.enable_cpu_offload": "distributed.cpu_offload",
    "training.dataset_path": "data.dataset",
    "training.dataset": "data.dataset",
    "lr_scheduler.warmup_steps": "training.warmup_steps",
    "lr_scheduler.decay_type": "training.lr_schedule",
    "lr_scheduler.min_lr_factor": "training.min_lr_ratio",
    "optimizer.beta1": "optimizer.betas = [beta1, beta2]",
    "optimizer.beta2": "optimizer.betas = [beta1, beta2]",
    "parallelism.tensor_parallel_degree": "distributed.tp_size",
    "parallelism.pipeline_parallel_degree": "distributed.pp_size",
    "parallelism.pipeline_parallel_schedule": "distributed.pp_schedule",
    "parallelism.data_parallel_shard_degree": "distributed.fsdp (dp is what tp x pp leave of the world)",
    "checkpoint.enable": "checkpoint.save_interval (0 = off) and checkpoint.resume",
    "checkpoint.interval": "checkpoint.save_interval",
    "checkpoint.keep_latest_k": "checkpoint.keep_last_n",
    "checkpoint.async_mode": "checkpoint.async",
    "metrics.log_freq": "metrics.log_every",
    "metrics.enable_tensorboard": "metrics.tensorboard",
    "metrics.save_tb_folder": "metrics.tb_folder",
    "profiling.enable_profiling": "profiling.enabled",
    "profiling.save_traces_folder": "profiling.folder",
    "activation_checkpoint.mode": "training.activation_checkpoint",
    "activation_checkpoint.selective_ac_option": "training.ac_every / training.selective_ac_option",
    "compile.enable": "training.compile",
    "debug.seed": "training.seed",
    "comm.init_timeout_seconds": "distributed.timeout_s",
    "job.dump_folder": "metrics.output and checkpoint.folder",
}


def _is_field(name: str, sections: dict[str, set[str]]) -> bool:
    table, _, key = name.rpartition(".")
    return key in sections.get(table, ())


def _split_overrides(overrides: list[str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """A torchtitan TOML's --set lines: (name, value) for torchtitan's keys (and for names of
    neither trainer, so that check_keys names torchtitan's nearest key), the rest (this
    trainer's own keys, `data.dataset`...) as --set lines applied after the conversion."""
    sections, ours, theirs = _known_keys(), [], []
    for text in overrides:
        section, key, value = config_mod.parse_override(text)
        name = f"{section}.{key}"
        if _is_field(name, sections) or (section, key) not in config_mod.HINTS:
            theirs.append((name, value))
        else:
            ours.append(text)
    return theirs, ours


def _with_overrides(raw: dict[str, Any], theirs: list[tuple[str, Any]]) -> dict[str, Any]:
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for name, value in theirs:
        *tables, key = name.split(".")
        table = raw
        for t in tables:
            table = table.setdefault(t, {})
            if not isinstance(table, dict):
                raise ConfigError(f"--set {name}: [{t}] is not a table")
        table[key] = value
    return raw


def _refuse_ignored(theirs: list[tuple[str, Any]], conversion: Conversion) -> None:
    """A key the command line asks for explicitly and that would change nothing here is
    refused, in one line with the reason and what to use (a TOML's such keys are listed)."""
    for name, value in theirs:
        for line in conversion.ignored:
            if line.startswith((f"{name} = ", f"{name} ->")):
                raise ConfigError(f"--set {name}={value!r}: torchtitan key this trainer does not support ({line})")


def refuse_torchtitan_keys(overrides: list[str], path: str | Path) -> None:
    """With a trainer TOML, a torchtitan-only key is refused naming this trainer's key."""
    sections = _known_keys()
    for text in overrides:
        section, key, _ = config_mod.parse_override(text)
        name = f"{section}.{key}"
        if (section, key) not in config_mod.HINTS and (name in TRAINER_KEYS or _is_field(name, sections)):
            instead = TRAINER_KEYS.get(name, "the key in the README's config table (titan-train run --print-config)")
            raise ConfigError(
                f"--set {text!r}: {name} is torchtitan's key, and {path} is a titan-train config; use {instead}"
            )


def load(path: str | Path, overrides: list[str], world_size: int) -> tuple[JobConfig, Conversion]:
    """A torchtitan TOML plus trainer-style `--set` overrides (applied after conversion)."""
    return from_raw(config_mod.read_toml(path), overrides, world_size, Path(path).stem)


def load_either(path: str | Path, overrides: list[str], world_size: int) -> tuple[JobConfig, Conversion | None]:
    """A trainer TOML (no Conversion) or a torchtitan one, told apart by its sections: the
    trainer and the doctor's memory plan both take either."""
    raw = config_mod.read_toml(path)  # read once: which kind, then that kind's reader
    if not is_torchtitan(raw):
        refuse_torchtitan_keys(overrides, path)
        return config_mod.from_raw(raw, overrides, Path(path).stem), None
    return from_raw(raw, overrides, world_size, Path(path).stem)


def from_raw(raw: dict[str, Any], overrides: list[str], world_size: int, name: str) -> tuple[JobConfig, Conversion]:
    """`load` for a TOML already read. `overrides` in torchtitan's keys apply to the file
    before it is converted (as torchtitan's own flags would); this trainer's keys after."""
    theirs, ours = _split_overrides(list(overrides))
    conversion = convert(_with_overrides(raw, theirs), world_size)
    _refuse_ignored(theirs, conversion)
    return config_mod.from_raw(conversion.raw, ours, name), conversion
