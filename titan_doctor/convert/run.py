"""One conversion, start to end: describe the source, pick the path, write atomically.

Two paths:
- the whole checkpoint (DCP <-> torch.save, what torch's format_utils converts): every
  entry, optimizer and progress included, names unchanged except wrapper prefixes;
- the model's weights (any source -> torch / dcp / hf / meta), under the trainer's names on
  the way, HF names and the q/k permutation on the way out.
The readers and writers are titan_train's (the trainer starts from and exports to the same
formats); this module only decides and reports.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_train.checkpoint.formats import CheckpointError, detect, fit, naming
from titan_train.checkpoint.formats.detect import CheckpointInfo
from titan_train.checkpoint.formats.dtypes import SHORT_NAMES, itemsize
from titan_train.runtime import write_errors

TARGETS = ("dcp", "torch", "hf", "meta")


@dataclass
class Result:
    src: Path
    dst: Path
    source_format: str
    target: str
    tensors: int = 0
    bytes: int = 0
    whole: bool = False
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        what = "every entry (weights, optimizer, progress)" if self.whole else f"{self.tensors} model weights"
        return (
            f"converted {self.src} ({detect.LABELS[self.source_format]}) -> {self.dst} ({self.target}): "
            f"{what}, {self.bytes / 2**20:.1f} MiB"
        )


class Progress:
    """A line on stderr at most twice a second while a large conversion runs."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done, self.last = max(total, 1), enabled, 0, 0.0

    def __call__(self, name: str, size: int) -> None:
        self.done += size
        now = time.monotonic()
        if self.enabled and (now - self.last >= 0.5 or self.done >= self.total):
            self.last = now
            print(
                f"convert: {100 * self.done / self.total:5.1f}%  {self.done / 2**30:.2f}/{self.total / 2**30:.2f} GiB"
                f"  {name}",
                file=sys.stderr,
                flush=True,
            )


def _recorded_model(info: CheckpointInfo):
    """The [model] a trainer step folder's titan-run.json recorded (the run's whole config),
    or None: not a trainer step folder, or a record without a readable [model]."""
    from titan_train.checkpoint import lineage
    from titan_train.config import job as config_mod

    rec = lineage.read_record(info.root) if Path(info.root).is_dir() else None
    job = (rec or {}).get("config")
    model = job.get("model") if isinstance(job, dict) else None
    if not isinstance(model, dict):
        return None
    try:
        return config_mod.from_dict({"model": model}).model
    except config_mod.ConfigError:
        return None


def model_args_for(info: CheckpointInfo, config: str | Path | None, needed: bool):
    """ModelArgs from --config's [model], else from the trainer's titan-run.json in the step
    folder (both checked against the checkpoint), else from what the checkpoint declares
    (params.json / config.json) and implies (shapes). None when not needed and unknown."""
    from titan_train.config.model_args import ModelArgs

    recorded = _recorded_model(info) if config is None else None
    if config is not None or recorded is not None:
        from titan_train.config import job as config_mod
        from titan_train.config.paths import resolve_config

        fix = f"titan-doctor diagnose --checkpoint {info.path} --config {config}"
        if recorded is not None:
            args = recorded
            fix = f"pass --config FILE with the checkpoint's [model] ({Path(info.root) / 'titan-run.json'} records another)"
        else:
            try:
                args = config_mod.load(resolve_config(str(config))).model
            except config_mod.ConfigError as e:
                raise CheckpointError(f"--config: {e}") from None
        result = fit.compare(
            info.model, args, fit.expected_shapes(args), info.declared, info.declared_by, info.unmapped
        )
        if not result.ok:
            raise CheckpointError(fit.one_line(result, args, f"{info.path}"), fix=fix)
        return args
    known: dict[str, Any] = {k: v for k, v in info.declared.items() if k not in ("tie_word_embeddings",)}
    implied = fit.inferred(info.model, known.get("n_heads"))
    for k, v in implied.items():
        known.setdefault(k, v)
    if "n_heads" not in known:
        if needed:
            raise CheckpointError(
                f"{info.path} does not say how many attention heads the model has (needed for the "
                "HF q/k permutation and the output's config)",
                fix="pass --config FILE (a trainer TOML whose [model] matches the checkpoint)",
            )
        return None
    width = known.pop("ffn_dim", None)
    if width is not None and "multiple_of" not in known:
        known.update(fit.ffn_fields_for(known["d_model"], width))
    known.setdefault("max_seq_len", 2048)
    fields = {f for f in ModelArgs.__dataclass_fields__}
    return ModelArgs(**{k: v for k, v in known.items() if k in fields})


def _cast(tensor, dtype):
    return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor


def _strip_wrappers(obj):
    if isinstance(obj, dict):
        return {
            naming.strip_wrappers(str(k))[0].removeprefix("module.") if isinstance(k, str) else k: _strip_wrappers(v)
            for k, v in obj.items()
        }
    return obj


def _map_tensors(obj, fn):
    """Replace tensors in place, one at a time, so a cast never holds two copies of the whole."""
    import torch

    if isinstance(obj, (dict, list)):
        for k in list(obj) if isinstance(obj, dict) else range(len(obj)):
            obj[k] = _map_tensors(obj[k], fn)
        return obj
    return fn(obj) if isinstance(obj, torch.Tensor) else obj


def _nbytes(obj) -> int:
    import torch

    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_nbytes(v) for v in obj)
    return obj.numel() * obj.element_size() if isinstance(obj, torch.Tensor) else 0


def _output_bytes(tensors: dict, cast) -> int:
    """The bytes the output's tensors take (a cast changes floating-point ones): what a
    full disk's message says was needed."""
    total = 0
    for t in tensors.values():
        floating = t.dtype.startswith(("float", "bfloat"))
        total += t.numel * (cast.itemsize if cast is not None and floating else itemsize(t.dtype))
    return total


def convert(
    src: Path,
    dst: Path,
    target: str,
    *,
    config: str | Path | None = None,
    dtype: str | None = None,
    model_only: bool = False,
    max_shard_bytes: int,
    overwrite: bool = False,
    progress: bool | None = None,
) -> Result:
    from titan_train.checkpoint.formats import writers
    from titan_train.checkpoint.formats.dtypes import torch_dtype

    if target not in TARGETS:
        raise CheckpointError(f"unknown target format {target!r}; use one of {', '.join(TARGETS)}")
    info = detect.describe(src)
    _refuse_overlap(Path(src), Path(dst), info)
    if Path(dst).exists() and not overwrite:
        raise CheckpointError(f"{dst} already exists", fix="choose another destination, or pass --force")
    if Path(dst).exists():
        _refuse_foreign_destination(Path(dst), target)
    write_errors.check_writable(dst)  # a parent that is a file: said now, not after reading the source
    cast = torch_dtype(SHORT_NAMES[dtype]) if dtype else None
    result = Result(Path(src), Path(dst), info.format, target)
    whole = (
        target in ("dcp", "torch")
        and not model_only
        and info.format in ("dcp", "torch")
        and not (info.format == target == "torch")
    )
    needed = _output_bytes(info.tensors if whole else info.model, cast)
    with writers.atomic_output(dst, overwrite=overwrite, needed=needed) as tmp:
        if whole:
            _convert_whole(info, tmp, target, cast, result)
        else:
            _convert_weights(info, tmp, target, cast, config, max_shard_bytes, progress, result)
    return result


def _refuse_foreign_destination(dst: Path, target: str) -> None:
    """--force replaces an earlier output of the same format, never anything else: a folder
    only when it holds nothing a `target` checkpoint does not, a file only when it is a
    torch.save checkpoint."""
    from titan_train.checkpoint.formats import writers

    writers.refuse_foreign(dst, target, is_file_output=target == "torch")
    if target == "torch" and dst.exists():
        try:
            kind = detect.describe(dst).format
        except CheckpointError:
            kind = None
        if kind != "torch":
            raise CheckpointError(
                f"{dst} is not a torch.save checkpoint; refusing to replace it",
                fix="choose another destination, or remove it yourself",
            )


def _refuse_overlap(src: Path, dst: Path, info: CheckpointInfo) -> None:
    """DST may not be the source or a folder holding it: replacing DST (--force) would delete
    the source, and the files around it (tokenizer, configs), after reading it."""
    target = dst.resolve()
    for source in dict.fromkeys([src, Path(info.root), *info.files]):
        source = source.resolve()
        if target == source:
            raise CheckpointError(f"{dst} is the source itself", fix="write to another path")
        if target in source.parents:
            raise CheckpointError(
                f"{dst} holds the source ({source}); writing there would replace the folder and delete the source",
                fix="write to another path (a new folder)",
            )


def _convert_whole(info: CheckpointInfo, tmp: Path, target: str, cast, result: Result) -> None:
    """DCP <-> one torch.save file, format_utils' conversion with the safe readers."""
    from titan_train.checkpoint.formats import dcp_io, writers
    from titan_train.checkpoint.formats.sources import safe_torch_load

    result.whole = True
    if info.format == "dcp":
        sd = dcp_io.load_everything(info.root)
    else:
        sd = _strip_wrappers(safe_torch_load(info.root))
        if info.keymap.to_ours and not info.keymap.prefixes and not info.keymap.other and not info.objects:
            sd = {"model": sd}  # a bare model state dict becomes the trainer's DCP layout
            result.notes.append("bare model state dict written under model.* (the trainer's DCP layout)")
    sd = _map_tensors(sd, lambda t: _cast(t, cast))
    result.bytes = _nbytes(sd)
    result.tensors = len(info.tensors)
    if target == "torch":
        writers.write_torch(sd, tmp)
    else:
        dcp_io.save(sd, tmp)


def _convert_weights(
    info: CheckpointInfo,
    tmp: Path,
    target: str,
    cast,
    config: str | Path | None,
    max_shard_bytes: int,
    progress: bool | None,
    result: Result,
) -> None:
    from titan_train.checkpoint.formats import dcp_io, writers
    from titan_train.checkpoint.formats.sources import Source

    if info.unmapped:
        names = list(info.unmapped)
        raise CheckpointError(
            f"{info.root}: {len(names)} model weight(s) have no place in the LLaMA layout "
            f"({', '.join(names[:3])}{' ...' if len(names) > 3 else ''}); converting would drop "
            "them and write a different model",
            fix="convert a LLaMA-architecture checkpoint (no attention/MLP biases)",
        )
    args = model_args_for(info, config, needed=target in ("hf", "meta") or bool(info.keymap.rope))
    heads = {"n_heads": args.n_heads, "n_kv_heads": args.n_kv_heads or args.n_heads} if args else {}
    source = Source(info, heads=heads)
    total = sum(t.numel * (cast.itemsize if cast is not None else itemsize(t.dtype)) for t in info.model.values())
    report = Progress(total, total >= 64 * 2**20 if progress is None else progress)

    def items():
        for name in source.keys():
            tensor = _cast(source.read(name), cast)
            result.tensors += 1
            result.bytes += tensor.numel() * tensor.element_size()
            report(name, tensor.numel() * tensor.element_size())
            yield name, tensor

    if info.declared.get("rope_scaling") and target in ("hf", "meta"):
        result.notes.append(
            f"the source's RoPE scaling ({info.declared['rope_scaling']}) is not written to the "
            f"output's {'config.json' if target == 'hf' else 'params.json'} (the trainer has none); "
            "copy it from the source's config if the output goes back to the reference code"
        )
    if target == "hf":
        writers.write_hf(
            items(),
            tmp,
            args,
            dtype=str(cast or next(iter(info.dtypes), "float32")).removeprefix("torch."),
            max_shard_bytes=max_shard_bytes,
        )
    elif target == "meta":
        writers.write_meta(items(), tmp, args)
    elif target == "torch":
        writers.write_torch(dict(items()), tmp)
    else:
        dcp_io.save({"model": dict(items())}, tmp)
