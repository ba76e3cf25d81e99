"""A resumed run against the config its checkpoint was trained with (`titan-run.json`).

Fields fall into classes, each with its own consequence:
- SHAPE: the parameters would not fit. Refused in one line naming the field and both
  values, before any tensor is loaded (exit 2).
- OPTIMIZER: lr, betas, weight decay, eps and the schedule. The config wins: its values
  are written over what the checkpoint restored (param groups, the scheduler's base_lrs),
  and one line lists what changed.
- DATA: sequence length, batch, dataset, tokenizer. Training continues; one line says that
  the data order does not continue the old run's.
- NUMERICS: model settings that change results but not shapes (norm_eps, rope_theta,
  mixed_precision): announced, applied.
Everything else (layout, metrics, checkpointing, profiling) is free to change on resume:
DCP reshards onto any mesh.

The classification lives here, not in config.py, so the config stays plain dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SHAPE = [
    ("model", "vocab_size"),
    ("model", "d_model"),
    ("model", "n_layers"),
    ("model", "n_heads"),
    ("model", "n_kv_heads"),
    ("model", "ffn_dim"),
]
OPTIMIZER = [
    ("optimizer", "lr"),
    ("optimizer", "betas"),
    ("optimizer", "weight_decay"),
    ("optimizer", "eps"),
    ("training", "warmup_steps"),
    ("training", "steps"),
    ("training", "lr_schedule"),
    ("training", "min_lr_ratio"),
    ("training", "max_norm"),
]
DATA = [
    ("training", "seq_len"),
    ("training", "batch_size"),
    ("training", "grad_accum_steps"),
    ("data", "dataset"),
    ("data", "text_field"),
    ("data", "shuffle"),
    ("data", "seed"),
    ("data", "datasets"),
    ("data", "weights"),
]
TOKENIZER = [("data", "tokenizer")]  # not a data order: the ids the embedding rows were trained for
NUMERICS = [
    ("model", "norm_eps"),
    ("model", "rope_theta"),
    ("model", "rope_scaling_factor"),
    ("training", "mixed_precision"),
]


class ShapeChanged(Exception):
    """The checkpoint was trained with another model shape (a user error, one line)."""


class TokenizerChanged(Exception):
    """The checkpoint was trained with another tokenizer (a user error, one line)."""


def compare_data(saved: dict | None, current: dict, where: str, data_cfg) -> list[str]:
    """The content of the data and tokenizer against what the checkpoint recorded: a path
    is not an identity (a prepared folder rebuilt from other text, a tokenizer.json replaced
    in place). Another tokenizer is refused unless data.allow_tokenizer_change; other data
    is announced. Nothing to compare for a checkpoint written before identities were kept."""
    if not saved or not current:
        return []
    if saved.get("tokenizer") and saved["tokenizer"] != current.get("tokenizer"):
        what = (
            f"data.tokenizer = {data_cfg.tokenizer!r} defines other tokens than the tokenizer it was trained with "
            f"(sha256 {saved['tokenizer'][:12]}..., now {str(current.get('tokenizer'))[:12]}...)"
        )
        if not data_cfg.allow_tokenizer_change:
            raise TokenizerChanged(
                f"{where}: {what}: token ids would mean other text than the embedding and output "
                "rows learned; point data.tokenizer at the tokenizer it was trained with, set "
                "data.allow_tokenizer_change = true to continue anyway, or start with "
                "`titan-train run --fresh`"
            )
        return [
            f"[titan-train] warning: {what}; continuing (data.allow_tokenizer_change = true): the loss jumps "
            "and the model relearns its vocabulary"
        ]
    for key in ("index", "tokens"):
        if saved.get(key) and current.get(key) and saved[key] != current[key]:
            return [
                f"[titan-train] data changed since the checkpoint: data.dataset = {data_cfg.dataset!r} holds "
                "other content than it did then; training continues at the same sample count, on other text "
                "than the old run would have read next"
            ]
    return []


@dataclass
class Changes:
    optimizer: list[tuple[str, Any, Any]] = field(default_factory=list)
    data: list[tuple[str, Any, Any]] = field(default_factory=list)
    numerics: list[tuple[str, Any, Any]] = field(default_factory=list)
    tokenizer: list[tuple[str, Any, Any]] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        if self.optimizer:
            out.append(
                f"[titan-train] optimizer/schedule changed since the checkpoint, using the config's: "
                f"{_fmt(self.optimizer)}"
            )
        if self.data:
            out.append(
                f"[titan-train] data layout changed since the checkpoint ({_fmt(self.data)}): training "
                "continues at the same sample count, but the batches no longer continue the old run's data "
                "order (sequences are cut and grouped differently)"
            )
        for name, old, new in self.tokenizer:
            out.append(
                f"[titan-train] warning: {name} changed since the checkpoint ({old!r} -> {new!r}): token ids "
                "now mean other text than the embedding and output rows were trained on, so the loss jumps "
                f"and the model relearns its vocabulary; set {name} = {old!r} to continue the old run, or "
                "start with `titan-train run --fresh`"
            )
        if self.numerics:
            out.append(
                f"[titan-train] model numerics changed since the checkpoint, using the config's: {_fmt(self.numerics)}"
            )
        return out


def _fmt(changes) -> str:
    return ", ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changes)


def _value(cfg: dict, section: str, key: str) -> Any:
    sec = cfg.get(section) or {}
    if (section, key) == ("model", "ffn_dim"):
        from titan_train.config.model_args import ModelArgs

        names = {f for f in ModelArgs.__dataclass_fields__}
        try:
            return ModelArgs(**{k: v for k, v in sec.items() if k in names}).ffn_dim
        except TypeError:
            return None
    if (section, key) == ("model", "n_kv_heads"):
        return sec.get("n_kv_heads") or sec.get("n_heads")
    return sec.get(key)


def compare(saved: dict, current: dict, where: str) -> Changes:
    """Raise ShapeChanged on the first shape field that differs; else what changed."""
    for section, key in SHAPE:
        old, new = _value(saved, section, key), _value(current, section, key)
        if old is not None and old != new:
            what, fix = f"model.{key} = {old}, the config says {new}", f"set model.{key} = {old}"
            if key == "ffn_dim":  # derived, not a config field: name the fields that set it
                what = f"a SwiGLU hidden width of {old}, the config gives {new}"
                inputs = [
                    (k, saved["model"].get(k), (current.get("model") or {}).get(k))
                    for k in ("multiple_of", "ffn_dim_multiplier")
                ]
                fix = (
                    " and ".join(
                        f"set model.{k} = {o!r}" if o is not None else f"remove model.{k}"
                        for k, o, n in inputs
                        if o != n
                    )
                    or "set model.multiple_of / ffn_dim_multiplier as before"
                )
            raise ShapeChanged(
                f"{where} was trained with {what}: a checkpoint only resumes into the same model "
                f"shape; {fix}, or start with `titan-train run --fresh` (moves the old checkpoints "
                "aside) or another checkpoint.folder"
            )
    changes = Changes()
    for bucket, fields in (
        (changes.optimizer, OPTIMIZER),
        (changes.data, DATA),
        (changes.numerics, NUMERICS),
        (changes.tokenizer, TOKENIZER),
    ):
        for section, key in fields:
            if section not in saved:
                continue
            old, new = _value(saved, section, key), _value(current, section, key)
            if old != new:
                bucket.append((f"{section}.{key}", old, new))
    return changes


def check_shape(cfg) -> None:
    """Before any rank starts: refuse when the checkpoint a resume would take (the newest of
    the folder, lineage.py) was trained with another model shape. Torch-free."""
    from titan_train.checkpoint import lineage
    from titan_train.config.job import to_dict

    mine, _ = lineage.resume_candidates(cfg.checkpoint.folder)
    for entry in mine:
        rec = entry.record
        if rec and "config" in rec:
            compare(rec["config"], to_dict(cfg), str(entry.path))
            return


def apply_optimizer_config(optimizers, schedulers, opt_cfg) -> None:
    """Make the restored optimizer and schedule follow the config: a checkpoint restores each
    param group's lr / betas / weight_decay / eps and the scheduler's base_lrs, which would
    otherwise keep the old run's values for the rest of training."""
    for opt, sched in zip(optimizers.optimizers, schedulers.schedulers):
        sched.base_lrs = [opt_cfg.lr for _ in opt.param_groups]
        factor = sched.lr_lambdas[0](sched.last_epoch)  # the schedule as the config defines it now
        for group in opt.param_groups:
            group["initial_lr"] = opt_cfg.lr
            group["lr"] = opt_cfg.lr * factor
            group["betas"] = tuple(opt_cfg.betas)
            group["weight_decay"] = opt_cfg.weight_decay
            group["eps"] = opt_cfg.eps
        sched._last_lr = [group["lr"] for group in opt.param_groups]
