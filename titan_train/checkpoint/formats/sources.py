"""The model weights of a described checkpoint, under the trainer's names, read on demand
and by slice: a rank that holds rows 512..1023 of a weight reads those rows (safetensors
slices, mmap'd torch.save storages, the Meta shards or FSDP1 parts that overlap).

HF q/k rows are un-permuted on the way (whole heads are read around the slice), so every
reader below returns values in the trainer's layout.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from titan_train.checkpoint.formats import CheckpointError, UnsafeCheckpoint, detect, naming, pickles
from titan_train.checkpoint.formats.detect import CheckpointInfo
from titan_train.checkpoint.formats.dtypes import torch_dtype
from titan_train.runtime.messages import first_line

Index = tuple  # of slices, one per dim


def safe_torch_load(path: Path) -> Any:
    """torch.load(weights_only=True, mmap=True): tensors stay on disk until touched."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[-1][:200]
        raise UnsafeCheckpoint(f"{path}: torch.load(weights_only=True) refused it ({first})") from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise CheckpointError(f"{path}: truncated or damaged torch.save file ({first_line(e, 160)})") from None


def _full(shape) -> Index:
    return tuple(slice(0, n) for n in shape)


def _shape_of(index: Index) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in index)


class _Mapping:
    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def read(self, raw: str, index: Index) -> torch.Tensor:
        return self.tensors[raw.removesuffix("#tied")][index]


class _TorchShards:
    """HF's pytorch_model-0000i-of-0000n.bin files, each mmap'd when first needed."""

    def __init__(self, info: CheckpointInfo):
        self.files: dict[str, Path] = info.where["files"]
        self.loaded: dict[Path, dict[str, torch.Tensor]] = {}

    def read(self, raw: str, index: Index) -> torch.Tensor:
        raw = raw.removesuffix("#tied")
        file = self.files[raw]
        if file not in self.loaded:
            self.loaded[file] = detect.flatten(safe_torch_load(file))
        return self.loaded[file][raw][index]


class _Safetensors:
    def __init__(self, info: CheckpointInfo):
        from titan_train.checkpoint.formats.safetensors_io import SliceReader

        self.files: dict[str, Path] = info.where["files"]
        self.reader = SliceReader()

    def read(self, raw: str, index: Index) -> torch.Tensor:
        raw = raw.removesuffix("#tied")
        return self.reader.read(self.files[raw], raw, index)


class _Meta:
    """consolidated.NN.pth shards, each a slice of every split weight along its dim."""

    def __init__(self, info: CheckpointInfo):
        files = [f for f in info.files if f.suffix == ".pth"]
        self.shards = [detect.flatten(safe_torch_load(f)) for f in files]
        self.dims: dict[str, int | None] = info.where["meta_dims"]

    def read(self, raw: str, index: Index) -> torch.Tensor:
        dim = self.dims[raw]
        if dim is None:
            return self.shards[0][raw][index]
        pieces, start = [], 0
        want = index[dim]
        for shard in self.shards:
            t = shard[raw]
            stop = start + t.shape[dim]
            lo, hi = max(want.start, start), min(want.stop, stop)
            if lo < hi:
                local = list(index)
                local[dim] = slice(lo - start, hi - start)
                pieces.append(t[tuple(local)])
            start = stop
        return torch.cat(pieces, dim=dim)


class _ShardedParts:
    """FSDP1 SHARDED_STATE_DICT parts (one torch.save per rank): each holds ShardedTensor
    pieces with their offsets. Read inertly (torch.load(weights_only=True) refuses
    ShardedTensor, and a plain load would need the saving process group)."""

    def __init__(self, info: CheckpointInfo):
        self.pieces: dict[str, list[tuple[Path, str, pickles.ShardPiece]]] = {}
        for part in info.parts:
            archive = pickles.read_torch_archive(part)
            for key, value in detect.flatten(archive.root).items():
                if isinstance(value, pickles.ShardedRef):
                    self.pieces.setdefault(key, []).extend((part, archive.prefix, p) for p in value.pieces)
        for key, t in info.tensors.items():
            covered = sum(_numel(p.tensor.shape) for _, _, p in self.pieces.get(key, []))
            if covered < t.numel:
                raise CheckpointError(
                    f"{info.root}: the parts found ({', '.join(p.name for p in info.parts)}) cover {covered} of "
                    f"{t.numel} elements of {key}: other ranks' part files are missing",
                    fix="Put every rank's part file of this save in the same folder",
                )

    def read(self, raw: str, index: Index) -> torch.Tensor:
        pieces = self.pieces[raw]
        dtype = torch_dtype(pieces[0][2].tensor.dtype)
        out = torch.empty(_shape_of(index), dtype=dtype)
        for path, prefix, piece in pieces:
            lo = [max(i.start, o) for i, o in zip(index, piece.offsets)]
            hi = [min(i.stop, o + n) for i, o, n in zip(index, piece.offsets, piece.tensor.shape)]
            if all(a < b for a, b in zip(lo, hi)):
                data = pickles.read_tensor(path, prefix, piece.tensor)
                src = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, piece.offsets))
                dst = tuple(slice(a - i.start, b - i.start) for a, b, i in zip(lo, hi, index))
                out[dst] = data[src]
        return out


class _Dcp:
    def __init__(self, info: CheckpointInfo):
        from titan_train.checkpoint.formats import dcp_io

        self.load, self.tensors = dcp_io.tensor_loader(info.root), info.tensors

    def read(self, raw: str, index: Index) -> torch.Tensor:
        t = self.tensors[raw]
        return self.load(raw, t.shape, torch_dtype(t.dtype))[index]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class Source:
    """Read the model weights of `info` under the trainer's names."""

    def __init__(self, info: CheckpointInfo, heads: dict[str, int] | None = None):
        why = detect.unreadable(info)
        if why:
            raise CheckpointError(f"{info.root} {why}", fix=detect.fix_for(info))
        self.info = info
        self.raw = {ours: raw for raw, ours in info.keymap.to_ours.items()}
        self.heads = heads or {}
        if info.keymap.rope and not all(h in self.heads for h in info.keymap.rope.values()):
            raise CheckpointError(
                f"{info.root}: HF q/k weights are permuted per head, and the head counts are not known",
                fix="Pass the model config (--config FILE with [model] n_heads, n_kv_heads)",
            )
        self._reader = self._open(info)

    @staticmethod
    def _open(info: CheckpointInfo):
        if info.format == "hf":
            return _Safetensors(info)
        if info.format == "meta":
            return _Meta(info)
        if info.format == "hf-bin":
            return _TorchShards(info)
        if info.format == "dcp":
            return _Dcp(info)
        if info.format == "torch-sharded":
            return _ShardedParts(info)
        root = safe_torch_load(info.where.get("file", info.root))
        if info.where.get("subkey"):
            root = root[info.where["subkey"]]
        return _Mapping({k: v for k, v in detect.flatten(root).items() if isinstance(v, torch.Tensor)})

    def keys(self) -> list[str]:
        return list(self.raw)

    def shape(self, key: str) -> tuple[int, ...]:
        return self.info.tensors[self.raw[key]].shape

    def read(self, key: str, index: Index | None = None) -> torch.Tensor:
        """`key` (trainer name), restricted to `index` (global coordinates), trainer layout."""
        raw = self.raw[key]
        index = index or _full(self.shape(key))
        rope = self.info.keymap.rope.get(key)
        if not rope:
            return self._reader.read(raw, index)
        n_heads = self.heads[rope]
        head_dim = self.shape(key)[0] // n_heads
        rows = index[0]
        start, stop = naming.head_aligned(rows.start, rows.stop, head_dim)
        block = self._reader.read(raw, (slice(start, stop),) + tuple(index[1:]))
        block = naming.from_hf_rows(block, (stop - start) // head_dim)
        return block[rows.start - start : rows.stop - start]
