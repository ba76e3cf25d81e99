"""What a checkpoint path holds, from metadata only: the format, every tensor's shape and
dtype, the model's naming and prefixes, optimizer / step state. No tensor data is read,
nothing is executed, torch is not imported.

Formats: a DCP folder (`.metadata` + `__*.distcp`) or the trainer's folder of `step-N`
ones; a torch.save file (full state dict, FSDP1 SHARDED / LOCAL parts, per-rank DTensor
state dicts); HF safetensors (one file, or an index + shards); Meta `consolidated.NN.pth`
+ `params.json`; DeepSpeed (`latest` + `global_stepN/`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_train.checkpoint.formats import (
    CheckpointError,
    TensorInfo,
    UnsafeCheckpoint,
    fit,
    naming,
    pickles,
    safetensors_io,
)
from titan_train.checkpoint.formats.pickles import ShardedRef, Stub, TensorRef

LABELS = {
    "dcp": "DCP checkpoint (torch.distributed.checkpoint)",
    "torch": "torch.save file (full state dict)",
    "torch-sharded": "torch.save part of an FSDP1 SHARDED_STATE_DICT (one rank's ShardedTensors)",
    "torch-local": "torch.save part of an FSDP1 LOCAL_STATE_DICT (one rank's flat parameters)",
    "torch-dtensor": "torch.save of one rank's DTensor state dict (FSDP2 / tensor parallel shards)",
    "hf": "HuggingFace safetensors",
    "hf-bin": "HuggingFace pytorch_model-NNNNN-of-NNNNN.bin shards + index (torch.save)",
    "meta": "Meta consolidated.NN.pth + params.json",
    "deepspeed": "DeepSpeed checkpoint",
}
# Per-rank part files: the rank number and the rest of the name.
_RANK_PART = re.compile(r"^(?P<head>.*?(?:rank|_)[_-]?)(?P<rank>\d+)(?P<tail>\D*\.(?:pt|pth|bin))$", re.I)
_STEP_DIR = re.compile(r"^step-(\d+)$")
_DS_TAG = re.compile(r"^global_step(\d+)$")
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


@dataclass
class CheckpointInfo:
    path: Path  # what was asked about
    format: str  # a key of LABELS
    root: Path  # the file or folder actually described (step-N, global_stepN, ...)
    files: list[Path] = field(default_factory=list)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)  # every tensor, raw keys, global shapes
    objects: list[str] = field(default_factory=list)  # non-tensor entries
    keymap: naming.KeyMap = field(default_factory=naming.KeyMap)
    has_optimizer: bool = False
    step: int | None = None
    declared: dict[str, Any] = field(default_factory=dict)  # [model] fields from params.json / config.json
    declared_by: str = ""
    notes: list[str] = field(default_factory=list)
    parts: list[Path] = field(default_factory=list)  # sibling per-rank files of a sharded save
    deepspeed_stage: int | None = None
    where: dict[str, Any] = field(default_factory=dict)  # reader hints (files per key, sub-dict, ...)

    @property
    def label(self) -> str:
        return LABELS[self.format]

    @property
    def model(self) -> dict[str, TensorInfo]:
        """The model's weights under the trainer's names."""
        return {ours: self.tensors[raw] for raw, ours in self.keymap.to_ours.items()}

    @property
    def unmapped(self) -> dict[str, TensorInfo]:
        """Entries among the model's weights that the trainer's LLaMA has no place for (q/k/v
        biases of Qwen2, another architecture's layers): loading would drop them."""
        return {raw: self.tensors[raw] for raw in self.keymap.unmapped}

    @property
    def param_count(self) -> int:
        return sum(t.numel for t in self.model.values())

    @property
    def dtypes(self) -> dict[str, int]:
        """dtype -> parameters stored in it."""
        counts: Counter = Counter()
        for t in self.model.values():
            counts[t.dtype] += t.numel
        return dict(counts.most_common())


def describe(path: str | Path) -> CheckpointInfo:
    """Identify and describe a checkpoint; CheckpointError (one line, with a fix) when it is
    missing, truncated, damaged, unsafe, or not a format we know."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file or folder", fix="Check the path")
    info = _describe_dir(path) if path.is_dir() else _describe_file(path)
    info.path = path
    return info


# ---- folders --------------------------------------------------------------------------


def _describe_dir(d: Path) -> CheckpointInfo:
    if (d / ".metadata").is_file():
        return _dcp(d)
    steps = sorted(
        (int(m.group(1)), c) for c in d.iterdir() if (m := _STEP_DIR.match(c.name)) and (c / ".metadata").is_file()
    )
    if steps:
        info = _dcp(steps[-1][1])
        info.step = steps[-1][0]
        names = ", ".join(c.name for _, c in steps[-5:])
        info.notes.insert(
            0,
            f"trainer checkpoint folder with {len(steps)} complete save(s) ({names}); "
            f"described: the newest, {steps[-1][1].name}",
        )
        return info
    if any(d.glob("step-*.tmp")):
        raise CheckpointError(
            f"{d}: holds only unfinished saves (step-N.tmp): the run stopped while saving",
            fix="Resume from an earlier complete step-N folder, or re-run the save",
        )
    if (d / "latest").is_file() or _DS_TAG.match(d.name) or any(d.glob("*model_states.pt")):
        weights = _hf_weights_beside_deepspeed(d)
        return weights if weights is not None else _deepspeed(d)
    index = sorted(d.glob("*.safetensors.index.json"))
    if index:
        return _hf(d, index=index[0])
    shards = sorted(d.glob("*.safetensors"))
    if shards:
        return _hf(d, files=shards)
    consolidated = sorted(d.glob("consolidated.*.pth"))
    if consolidated:
        return _meta(d, consolidated)
    bin_index = sorted(d.glob("*.bin.index.json"))
    if bin_index:
        return _torch_index(d, bin_index[0])
    if any(d.glob("*.distcp")):
        raise CheckpointError(
            f"{d}: DCP shard files but no .metadata: the save did not finish, or .metadata was not copied along",
            fix="Copy the whole folder, including .metadata",
        )
    torch_files = sorted(p for p in d.iterdir() if p.suffix in _TORCH_SUFFIXES and p.is_file())
    if len(torch_files) == 1 or (torch_files and len(_siblings(torch_files[0])) == len(torch_files)):
        return _describe_file(torch_files[0])
    if (d / "pytorch_model.bin").is_file():
        # an HF Trainer output folder: the weights next to optimizer.pt, scheduler.pt, training_args.bin
        return _describe_file(d / "pytorch_model.bin")
    if torch_files:
        raise CheckpointError(
            f"{d}: several torch.save files ({', '.join(p.name for p in torch_files[:4])}); name the one to look at"
        )
    raise CheckpointError(
        f"{d}: no checkpoint found (looked for .metadata, step-N/, *.safetensors, "
        "consolidated.*.pth, DeepSpeed 'latest', *.pt/*.pth/*.bin)",
        fix="Point at the folder that holds the weights files (or at the weights file itself)",
    )


_HF_SHARD = re.compile(r"^(?P<stem>.+)-\d{5}-of-\d{5}\.(?P<ext>safetensors|bin)$")


def _hf_weights_beside_deepspeed(d: Path) -> CheckpointInfo | None:
    """HF Trainer + DeepSpeed writes checkpoint-N/ with the engine's `latest` + global_stepN/
    and the model's full weights (model.safetensors / pytorch_model.bin) next to them; those
    weights are the usable ones (under ZeRO-3 only when gathered: empty tensors otherwise)."""
    if not (any(d.glob("*.safetensors")) or (d / "pytorch_model.bin").is_file() or any(d.glob("*.bin.index.json"))):
        return None
    index = sorted(d.glob("*.safetensors.index.json")) or sorted(d.glob("*.bin.index.json"))
    if index:
        info = _describe_file(index[0])
    elif any(d.glob("*.safetensors")):
        info = _hf(d, files=sorted(d.glob("*.safetensors")))
    else:
        info = _describe_file(d / "pytorch_model.bin")
    if not info.keymap.to_ours or any(t.numel == 0 for t in info.model.values()):
        return None
    info.notes.insert(
        0,
        "also a DeepSpeed engine checkpoint (latest / global_stepN: optimizer partitions); "
        "described: the full model weights next to it",
    )
    return info


def _describe_file(f: Path) -> CheckpointInfo:
    if f.name == ".metadata":
        return _dcp(f.parent)
    shard = _HF_SHARD.match(f.name)
    index = f.parent / f"{shard.group('stem')}.{shard.group('ext')}.index.json" if shard else None
    if index is not None and index.is_file():
        # one shard of an HF sharded save alone is half a model: describe the whole save
        info = _hf(f.parent, index=index) if shard.group("ext") == "safetensors" else _torch_index(f.parent, index)
        info.notes.insert(0, f"{f.name} is one shard of {index.name}; described: the whole checkpoint")
        return info
    if f.name == "config.json" and f.parent.is_dir():
        return _describe_dir(f.parent)
    if f.suffix == ".json":
        raise CheckpointError(
            f"{f}: a JSON file, not model weights",
            fix=f"Point at the checkpoint folder or its weights file (in {f.parent})",
        )
    if f.suffix == ".distcp":
        raise CheckpointError(
            f"{f}: one shard file of a DCP checkpoint, not a state dict (torch.load cannot read it)",
            fix=f"Point at the folder: {f.parent}",
        )
    if f.name.endswith(".safetensors.index.json"):
        return _hf(f.parent, index=f)
    if f.name.endswith(".bin.index.json"):
        return _torch_index(f.parent, f)
    if f.suffix == ".safetensors":
        return _hf(f.parent, files=[f])
    if re.match(r"^consolidated\.\d+\.pth$", f.name):
        return _meta(f.parent, sorted(f.parent.glob("consolidated.*.pth")))
    if f.name.endswith("model_states.pt"):
        return _deepspeed(f.parent)
    if f.name == "params.json":
        return _meta(f.parent, sorted(f.parent.glob("consolidated.*.pth")))
    return _torch_file(f)


# ---- DCP ------------------------------------------------------------------------------


def read_dcp_metadata(d: Path) -> Any:
    """DCP `.metadata`, read inertly; refuses a file naming anything but DCP's own classes."""
    meta_path = d / ".metadata"
    try:
        data = meta_path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{meta_path}: cannot read: {e.strerror or e}") from None
    result = pickles.inert_loads(data, allowed=pickles.dcp_metadata_safe, what=str(meta_path))
    if result.unsafe:
        raise UnsafeCheckpoint(
            f"{meta_path} refers to {', '.join(result.unsafe[:3])}: torch's DCP reader (plain pickle.load) "
            "would run it when loading this checkpoint. Refused",
            fix="Do not load this folder with torch.distributed.checkpoint; get the checkpoint again from a "
            "source you trust",
        )
    md = result.obj
    if not isinstance(md, Stub) or not md.qualname.endswith(".Metadata"):
        raise CheckpointError(f"{meta_path}: not DCP metadata")
    return md


def _dcp(d: Path) -> CheckpointInfo:
    md = read_dcp_metadata(d).fields()
    info = CheckpointInfo(d, "dcp", d, files=[d / ".metadata"])
    for key, entry in (md.get("state_dict_metadata") or {}).items():
        if isinstance(entry, Stub) and entry.qualname.endswith("TensorStorageMetadata"):
            f = entry.fields()
            props = f.get("properties")
            dtype = _dcp_dtype(props)
            info.tensors[key] = TensorInfo(tuple(f.get("size") or ()), dtype)
        else:
            info.objects.append(key)
    needed: dict[str, int] = {}
    for storage in (md.get("storage_data") or {}).values():
        if isinstance(storage, Stub):
            s = storage.fields()
            rel = str(s.get("relative_path"))
            needed[rel] = max(needed.get(rel, 0), int(s.get("offset") or 0) + int(s.get("length") or 0))
    for rel, end in sorted(needed.items()):
        file = d / rel
        if not file.is_file():
            rank = re.match(r"__(\d+)_", rel)
            whose = f" (rank {rank.group(1)}'s part of the save)" if rank else ""
            raise CheckpointError(
                f"{d}: shard file {rel} is missing{whose}; the checkpoint is incomplete",
                fix="Copy the complete folder from where it was saved (every __*.distcp file)",
            )
        if file.stat().st_size < end:
            raise CheckpointError(
                f"{d}: shard file {rel} is truncated ({file.stat().st_size} bytes, the metadata needs {end})",
                fix="Copy the complete folder again",
            )
        info.files.append(file)
    keys = list(info.tensors) + info.objects
    info.keymap = naming.map_keys(info.tensors)
    info.has_optimizer = any(_is_optimizer_key(k) for k in keys)
    if any(k.endswith(("progress.step", "train_state.step", "train_state")) for k in keys):
        info.notes.append("step state present (" + next(k for k in keys if "progress" in k or "train_state" in k) + ")")
    step = _STEP_DIR.match(d.name)
    info.step = int(step.group(1)) if step else None
    return info


def _dcp_dtype(props) -> str:
    if isinstance(props, Stub):
        state = props.state
        if isinstance(state, tuple) and state and isinstance(state[0], str):
            return state[0]
        dtype = props.fields().get("dtype")
        if isinstance(dtype, str):
            return dtype
    return "?"


def _is_optimizer_key(key: str) -> bool:
    return (
        bool(re.match(r"^(train\.)?(optim|optimizer|optimizer_state_dict|optim_state)\.", key))
        or ".exp_avg" in key
        or key.startswith("state.")
    )


# ---- torch.save -------------------------------------------------------------------------


def flatten(obj: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Nested dicts / lists as dotted keys (DCP's convention): {"model": {"w": t}} -> {"model.w": t}."""
    if depth > 32:
        return {prefix.rstrip("."): obj}
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}.", depth + 1))
        return out or ({prefix.rstrip("."): obj} if prefix else {})
    if isinstance(obj, list) and obj and any(isinstance(v, (dict, list)) or hasattr(v, "shape") for v in obj):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}.", depth + 1))
        return out
    return {prefix.rstrip("."): obj}


def _refuse_unsafe(path: Path, unsafe: list[str], sharded: bool) -> None:
    names = [g for g in unsafe if not (sharded and g.startswith("torch.distributed."))]
    if sharded:
        names = [g for g in names if g not in ("torch._utils._rebuild_wrapper_subclass",)]
    if names:
        raise UnsafeCheckpoint(
            f"{path}: the pickle needs {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}, which "
            "torch.load(weights_only=True) refuses and a plain torch.load would execute. Refused",
            fix="If (and only if) you trust its source, extract the tensors in a throwaway process: "
            "torch.save({k: v for k, v in torch.load(F, weights_only=False).items() if torch.is_tensor(v)}, "
            "'clean.pt'), then use clean.pt",
        )


def _torch_file(f: Path) -> CheckpointInfo:
    archive = pickles.read_torch_archive(f)
    root = archive.root
    if isinstance(root, TensorRef):
        raise CheckpointError(f"{f}: a single tensor, not a state dict")
    if not isinstance(root, dict):
        _refuse_unsafe(f, archive.unsafe, sharded=False)
        raise CheckpointError(f"{f}: torch.save of a {type(root).__name__}, not a state dict")
    flat = flatten(root)
    sharded = {k: v for k, v in flat.items() if isinstance(v, ShardedRef)}
    _refuse_unsafe(f, archive.unsafe, sharded=bool(sharded))
    if "module" in root and "ds_version" in root:
        return _deepspeed(f.parent)
    fmt = "torch"
    if sharded:
        kinds = {v.kind for v in sharded.values()}
        fmt = (
            "torch-dtensor"
            if "DTensor" in kinds
            else ("torch-local" if any(k.endswith("flat_param") for k in sharded) else "torch-sharded")
        )
    info = CheckpointInfo(f, fmt, f, files=[f])
    for key, value in flat.items():
        if isinstance(value, TensorRef):
            info.tensors[key] = TensorInfo(value.shape, value.dtype)
        elif isinstance(value, ShardedRef):
            info.tensors[key] = TensorInfo(value.shape, value.dtype)
        else:
            info.objects.append(key)
    info.keymap = naming.map_keys(info.tensors)
    info.has_optimizer = any(_is_optimizer_key(k) for k in flat)
    for key in ("progress.step", "step", "global_step", "iteration", "epoch", "train_state.step"):
        if isinstance(flat.get(key), int):
            info.step = flat[key]
            break
    if info.keymap.to_ours and not sharded:
        _declared_nearby(info, f.parent)
    if sharded:
        info.parts = _siblings(f)
        info.where["sharded"] = sharded
        info.notes.append(
            f"{len(info.parts)} part file(s) of this save found: " + ", ".join(p.name for p in info.parts[:8])
        )
    return info


def _siblings(f: Path) -> list[Path]:
    """`model_rank0.pt`, `model_rank1.pt`, ...: the other ranks' parts of the same save."""
    m = _RANK_PART.match(f.name)
    if not m:
        return [f]
    pattern = re.compile(re.escape(m.group("head")) + r"(\d+)" + re.escape(m.group("tail")) + "$")
    found = sorted((int(pm.group(1)), p) for p in f.parent.iterdir() if (pm := pattern.match(p.name)))
    return [p for _, p in found]


# ---- HF safetensors -------------------------------------------------------------------------


def _hf(d: Path, *, index: Path | None = None, files: list[Path] | None = None) -> CheckpointInfo:
    info = CheckpointInfo(d, "hf", index or (files[0] if files and len(files) == 1 else d))
    file_of: dict[str, Path] = {}
    if index is not None:
        by_index = safetensors_io.read_index(index)
        info.files = [index] + sorted(set(by_index.values()))
        for file in sorted(set(by_index.values())):
            tensors, _ = safetensors_io.read_header(file)
            for name, t in tensors.items():
                info.tensors[name], file_of[name] = t, file
        _check_index(index, by_index, info.tensors)
    else:
        info.files = list(files or [])
        for file in info.files:
            tensors, _ = safetensors_io.read_header(file)
            for name, t in tensors.items():
                info.tensors[name], file_of[name] = t, file
        if len(info.files) > 1:
            info.notes.append(f"{len(info.files)} safetensors files without an index: read as one checkpoint")
    info.where["files"] = file_of
    info.keymap = naming.map_keys(info.tensors)
    _declared_nearby(info, d)
    return info


def _declared_nearby(info: CheckpointInfo, d: Path) -> None:
    """The model shape HF's config.json (or Meta's params.json) next to the weights declares,
    and HF's tied lm_head (tie_word_embeddings: no lm_head.weight in the file)."""
    config, params = d / "config.json", d / "params.json"
    source, parse = (config, fit.from_hf_config) if config.is_file() else (params, fit.from_meta_params)
    if source.is_file():
        _read_declared(info, source, parse)
    if info.declared.get("tie_word_embeddings") and "output.weight" not in info.model:
        emb = next((raw for raw, ours in info.keymap.to_ours.items() if ours == "tok_embeddings.weight"), None)
        if emb:
            info.keymap.to_ours[emb + "#tied"] = "output.weight"
            info.tensors[emb + "#tied"] = info.tensors[emb]
            info.notes.append("tie_word_embeddings: lm_head shares embed_tokens (the trainer keeps its own copy)")


def _read_declared(info: CheckpointInfo, source: Path, parse) -> bool:
    """info.declared from config.json / params.json by `parse`; False, with a note, when the
    file is not valid JSON (the shape is then inferred from the weights)."""
    try:
        info.declared = parse(json.loads(source.read_text(encoding="utf-8")))
        info.declared_by = source.name
        return True
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError):
        info.notes.append(f"{source.name} is not valid JSON; model shape inferred from the weights")
        return False


def _check_index(index: Path, by_index: dict[str, Path], tensors: dict) -> None:
    """Every tensor a sharded save's index lists must be in the shard it names."""
    absent = [n for n in by_index if n not in tensors]
    if absent:
        raise CheckpointError(
            f"{index}: {len(absent)} tensor(s) listed in the index are not in their shard "
            f"(first: {absent[0]} in {by_index[absent[0]].name}); the shards do not match the index"
        )


def _torch_index(d: Path, index: Path) -> CheckpointInfo:
    """HF's pre-safetensors sharded save: pytorch_model-0000i-of-0000n.bin + pytorch_model.bin.index.json."""
    info = CheckpointInfo(d, "hf-bin", index)
    by_index = safetensors_io.read_index(index)
    files = sorted(set(by_index.values()))
    info.files = [index] + files
    file_of: dict[str, Path] = {}
    for file in files:
        archive = pickles.read_torch_archive(file)
        _refuse_unsafe(file, archive.unsafe, sharded=False)
        for key, value in flatten(archive.root).items():
            if isinstance(value, TensorRef):
                info.tensors[key], file_of[key] = TensorInfo(value.shape, value.dtype), file
    _check_index(index, by_index, info.tensors)
    info.where["files"] = file_of
    info.keymap = naming.map_keys(info.tensors)
    _declared_nearby(info, d)
    return info


# ---- Meta -----------------------------------------------------------------------------------


def _meta(d: Path, files: list[Path]) -> CheckpointInfo:
    if not files:
        raise CheckpointError(f"{d}: params.json but no consolidated.NN.pth next to it")
    numbers = [int(p.name.split(".")[1]) for p in files]
    if numbers != list(range(len(files))):
        missing = sorted(set(range(max(numbers) + 1)) - set(numbers))
        raise CheckpointError(
            f"{d}: Meta shard consolidated.{missing[0]:02d}.pth is missing (found {', '.join(p.name for p in files)})"
        )
    info = CheckpointInfo(d, "meta", d, files=list(files))
    params = d / "params.json"
    if params.is_file():
        if _read_declared(info, params, fit.from_meta_params):
            info.files.append(params)
    else:
        info.notes.append("no params.json next to the weights: model shape inferred from them")
    shards: list[dict[str, TensorRef]] = []
    for f in files:
        archive = pickles.read_torch_archive(f)
        _refuse_unsafe(f, archive.unsafe, sharded=False)
        flat = {k: v for k, v in flatten(archive.root).items() if isinstance(v, TensorRef)}
        shards.append(flat)
    keys = list(shards[0])
    for f, shard in zip(files[1:], shards[1:]):
        if set(shard) != set(keys):
            raise CheckpointError(
                f"{f}: holds different tensors than {files[0].name}; the shards are from different checkpoints"
            )
    dims: dict[str, int | None] = {}
    # the model width decides the embedding's split dim; without params.json the final norm
    # (replicated on every shard) still gives it
    norm = next((shards[0][k].shape for k in keys if naming.strip_wrappers(k)[0] == "norm.weight"), ())
    width = info.declared.get("d_model") or (norm[0] if len(norm) == 1 else None)
    for key in keys:
        first = shards[0][key]
        clean = naming.strip_wrappers(key)[0]
        dim = naming.meta_concat_dim(clean, first.shape, len(shards), width)
        dims[key] = dim
        shape = list(first.shape)
        if dim is not None:
            shape[dim] = sum(s[key].shape[dim] for s in shards)
        info.tensors[key] = TensorInfo(tuple(shape), first.dtype)
    info.where["meta_dims"] = dims
    info.keymap = naming.map_keys(info.tensors)
    if len(files) > 1:
        info.notes.append(f"{len(files)} model-parallel shards, merged along each weight's split dim")
    return info


# ---- DeepSpeed --------------------------------------------------------------------------------


def _deepspeed(d: Path) -> CheckpointInfo:
    tag_dir = d
    if (d / "latest").is_file():
        tag = (d / "latest").read_text(encoding="utf-8").strip()
        tag_dir = d / tag
        if not tag_dir.is_dir():
            raise CheckpointError(
                f"{d}/latest names {tag!r}, but {tag_dir} does not exist",
                fix="Pass the global_stepN folder you want directly",
            )
    zero3 = sorted(tag_dir.glob("zero_pp_rank_*_mp_rank_*_model_states.pt"))
    plain = sorted(tag_dir.glob("mp_rank_*_model_states.pt"))
    optim = sorted(tag_dir.glob("*optim_states.pt"))
    model_file = (plain or zero3 or [None])[0]
    if model_file is None:
        raise CheckpointError(f"{tag_dir}: no DeepSpeed *model_states.pt file")
    archive = pickles.read_torch_archive(model_file)
    _refuse_unsafe(model_file, archive.unsafe, sharded=False)
    root = archive.root if isinstance(archive.root, dict) else {}
    module = root.get("module") if isinstance(root.get("module"), dict) else {}
    info = CheckpointInfo(d, "deepspeed", tag_dir, files=[model_file, *optim])
    config = root.get("ds_config") if isinstance(root.get("ds_config"), dict) else {}
    stage = (
        (config.get("zero_optimization") or {}).get("stage")
        if isinstance(config.get("zero_optimization"), dict)
        else None
    )
    info.deepspeed_stage = 3 if zero3 else (stage if isinstance(stage, int) else (1 if optim else 0))
    shapes = {}
    for group in root.get("param_shapes") or []:
        if isinstance(group, dict):
            shapes.update({k: tuple(v) for k, v in group.items() if isinstance(v, tuple)})
    for key, value in flatten(module).items():
        if isinstance(value, TensorRef):
            shape = shapes.get(key, value.shape) if info.deepspeed_stage == 3 else value.shape
            info.tensors[key] = TensorInfo(tuple(shape), value.dtype)
    info.keymap = naming.map_keys(info.tensors)
    info.has_optimizer = bool(optim) or root.get("optimizer") is not None
    info.step = root.get("global_steps") if isinstance(root.get("global_steps"), int) else None
    info.where.update(file=model_file, subkey="module")
    if len(plain) > 1:
        info.notes.append(
            f"{len(plain)} model-parallel files (mp_rank_00..): Megatron tensor-parallel parts, "
            "only mp_rank_00 is described"
        )
    info.notes.append(f"ZeRO stage {info.deepspeed_stage}, ds_version {root.get('ds_version', '?')}")
    return info


# ---- what cannot be read, and the way out ----------------------------------------------------


def unreadable(info: CheckpointInfo) -> str:
    """Why the weights cannot be read as they are ('' when they can)."""
    if info.format == "torch-local":
        return (
            "holds FSDP1 LOCAL_STATE_DICT flat parameters: the per-weight shapes are not in the file, "
            "so no tool can take it apart without the original model and world size"
        )
    if info.format == "torch-dtensor":
        return "holds one rank's DTensor shards saved with torch.save (no placement metadata to reassemble them)"
    if info.format == "deepspeed" and info.deepspeed_stage == 3:
        return "is a ZeRO-3 checkpoint: the weights live in per-rank optimizer partitions"
    if not info.keymap.to_ours:
        return "has no LLaMA weights under names this trainer knows (Meta/torchtitan or HF)"
    return ""


def fix_for(info: CheckpointInfo) -> str:
    """The way out for a checkpoint this package cannot read as it is."""
    if info.format == "torch-local":
        return (
            "Load the parts on the same number of ranks with the same FSDP1 wrapping under "
            "StateDictType.LOCAL_STATE_DICT, then save with dcp.save(model.state_dict()) under "
            "SHARDED_STATE_DICT (or FULL_STATE_DICT with rank0_only) and use that"
        )
    if info.format == "torch-dtensor":
        return (
            "Save with torch.distributed.checkpoint (dcp.save) instead, or gather first: "
            "get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)) "
            "and torch.save that on rank 0"
        )
    if info.format == "deepspeed" and info.deepspeed_stage == 3:
        return (
            f"python {info.path}/zero_to_fp32.py {info.path} {info.path}/fp32   (DeepSpeed saves that script "
            "next to the checkpoint), then use the fp32 output"
        )
    return "Check that this is a LLaMA checkpoint; the trainer's names look like layers.0.attention.wq.weight"
