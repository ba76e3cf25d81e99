"""Reading pickles without letting the file decide what runs.

torch.save files and DCP's `.metadata` are pickles, and a pickle may call any function it
names while it loads. Two readers here never let it:

- `inert_loads`: every global the pickle names becomes a recording stand-in; nothing from
  the file is imported or called. The result shows the structure (keys, tensor shapes and
  dtypes, class names) and the list of globals, which is how a file is judged before any
  real loader touches it. Needs no torch.
- `restricted_load`: the real objects, but only allow-listed globals resolve; anything
  else raises UnsafeCheckpoint naming the global. Used for DCP `.metadata`, which torch's
  FileSystemReader would otherwise read with plain `pickle.load`.
"""

from __future__ import annotations

import importlib
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_train.checkpoint.formats import CheckpointError, UnsafeCheckpoint
from titan_train.checkpoint.formats.dtypes import ITEMSIZE, STORAGE_DTYPES

# What a plain tensor state dict pickles (torch.load(weights_only=True) allows these by
# default: torch/_weights_only_unpickler.py `_get_allowed_globals`; a test keeps us in step).
TORCH_SAFE_GLOBALS = frozenset(
    {
        "collections.OrderedDict",
        "builtins.set",
        "builtins.complex",
        "builtins.bytearray",
        "torch.Size",
        "torch.Tensor",
        "torch.device",
        "torch.serialization._get_layout",
        "torch._utils._rebuild_tensor",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",
        "torch._tensor._rebuild_from_type_v2",
    }
)

# The classes DCP pickles into `.metadata` (torch 2.13 torch/distributed/checkpoint/
# metadata.py and filesystem.py), plus the helpers their pickled state uses.
DCP_METADATA_GLOBALS = frozenset(
    {
        "torch.distributed.checkpoint.metadata.Metadata",
        "torch.distributed.checkpoint.metadata.MetadataIndex",
        "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
        "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
        "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
        "torch.distributed.checkpoint.metadata.TensorProperties",
        "torch.distributed.checkpoint.metadata.StorageMeta",
        "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
        "torch.distributed.checkpoint.filesystem._StorageInfo",
        "torch.serialization._get_layout",
        "torch.Size",
        "collections.OrderedDict",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "pathlib._local.PosixPath",
        "pathlib._local.WindowsPath",
    }
)

_DTYPE_NAMES = frozenset(ITEMSIZE) | {"half", "float", "double", "long", "int", "short"}


def is_torch_dtype(qualname: str) -> bool:
    module, _, name = qualname.rpartition(".")
    return module == "torch" and name in _DTYPE_NAMES


def is_storage_type(qualname: str) -> bool:
    module, _, name = qualname.rpartition(".")
    return module in ("torch", "torch.cuda") and name.endswith("Storage")


def dcp_metadata_safe(qualname: str) -> bool:
    """May a DCP `.metadata` pickle name this global?"""
    return qualname in DCP_METADATA_GLOBALS or is_torch_dtype(qualname)


def tensor_safe(qualname: str) -> bool:
    """Would torch.load(weights_only=True) accept this global by default?"""
    return qualname in TORCH_SAFE_GLOBALS or is_torch_dtype(qualname) or is_storage_type(qualname)


# ---- inert reading ------------------------------------------------------------------


# What a damaged or hostile pickle raises from Unpickler.load(): read as "not a valid pickle".
_UNREADABLE = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    RecursionError,
    MemoryError,
    UnicodeDecodeError,
)


@dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: str
    numel: int


@dataclass(frozen=True)
class TensorRef:
    """A tensor in a torch.save archive: where its data is, not the data."""

    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def dtype(self) -> str:
        return self.storage.dtype


@dataclass(frozen=True)
class ShardPiece:
    tensor: TensorRef
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class ShardedRef:
    """One rank's part of a ShardedTensor (FSDP1 SHARDED / LOCAL state dicts) or DTensor."""

    kind: str  # "ShardedTensor" | "DTensor"
    shape: tuple[int, ...]  # the global shape
    dtype: str
    pieces: tuple[ShardPiece, ...]


class Stub:
    """Stand-in for a class or function the pickle names: records, never runs anything."""

    qualname = "?"

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        self.args, self.state, self.items, self.values = args, None, {}, []
        return self

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.state = state

    def __setitem__(self, key, value):
        self.items[key] = value

    def append(self, value):
        self.values.append(value)

    def extend(self, values):
        self.values.extend(values)

    def fields(self) -> dict[str, Any]:
        """The object's attributes as pickled (dict state, or (dict, slots) pair)."""
        out: dict[str, Any] = {}
        parts = self.state if isinstance(self.state, tuple) else (self.state,)
        for part in parts:
            if isinstance(part, dict):
                out.update(part)
        return out

    def __repr__(self) -> str:
        return f"<{self.qualname}>"


def _stub_class(qualname: str) -> type:
    return type(qualname.rpartition(".")[2] or "Stub", (Stub,), {"qualname": qualname})


def _rebuild_tensor(storage, offset, shape, stride, *rest):
    return TensorRef(storage, int(offset), tuple(shape), tuple(stride))


def _path(*parts):
    return "/".join(str(p) for p in parts).replace("//", "/")


def _first(data, *rest):
    return data


def _rebuild_from_type(func, new_type, args, state=None):
    kind = getattr(new_type, "qualname", "")
    if kind.endswith((".ShardedTensor", ".DTensor")):
        return _sharded(kind.rpartition(".")[2], args, state)
    return func(*args) if callable(func) else func


def _sharded(kind: str, args, state) -> ShardedRef:
    """ShardedTensor pickles its global size/dtype as wrapper-subclass args and its local
    shards (tensor + offsets) in its state."""
    dtype = args[1] if len(args) > 1 and isinstance(args[1], str) else "?"
    shape = tuple(args[2]) if len(args) > 2 and isinstance(args[2], (tuple, list)) else ()
    pieces = []
    for shard in _find_stubs(state, "Shard"):
        f = shard.fields()
        meta = f.get("metadata")
        offsets = tuple(meta.fields().get("shard_offsets", ())) if isinstance(meta, Stub) else ()
        if isinstance(f.get("tensor"), TensorRef):
            pieces.append(ShardPiece(f["tensor"], offsets))
    return ShardedRef(kind, shape, dtype, tuple(pieces))


def _find_stubs(obj, name: str, depth: int = 0) -> list[Stub]:
    if depth > 12:
        return []
    if isinstance(obj, Stub):
        found = [obj] if obj.qualname.rpartition(".")[2] == name else []
        return found + _find_stubs(obj.state, name, depth + 1) + _find_stubs(list(obj.args), name, depth + 1)
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _find_stubs(v, name, depth + 1)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _find_stubs(v, name, depth + 1)]
    return []


class _StateDict(dict):
    """OrderedDict stand-in: state dicts pickle a `_metadata` attribute, which is dropped."""

    def __setstate__(self, state):
        pass


class _InertUnpickler(pickle.Unpickler):
    # Globals replaced by something with the same meaning that cannot do harm.
    _EQUIVALENTS: dict[str, Callable] = {
        "collections.OrderedDict": _StateDict,
        "torch.Size": tuple,
        "torch.device": str,
        "torch.serialization._get_layout": str,
        "builtins.set": set,
        "pathlib.PosixPath": _path,
        "pathlib.WindowsPath": _path,
        "pathlib._local.PosixPath": _path,
        "pathlib._local.WindowsPath": _path,
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor,
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_parameter": _first,
        "torch._utils._rebuild_parameter_with_state": _first,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type,
    }

    def __init__(self, fh, *, persistent: bool):
        super().__init__(fh)
        self.globals: list[str] = []
        self.unsafe_getattr: list[str] = []
        self._stubs: dict[str, type] = {}
        self._persistent = persistent

    def find_class(self, module: str, name: str):
        module = "builtins" if module == "__builtin__" else module
        qualname = f"{module}.{name}"
        if qualname not in self.globals:
            self.globals.append(qualname)
        if qualname in self._EQUIVALENTS:
            return self._EQUIVALENTS[qualname]
        if is_torch_dtype(qualname):
            return name
        if is_storage_type(qualname):
            return name
        if qualname == "builtins.getattr":
            return self._getattr
        return self._stubs.setdefault(qualname, _stub_class(qualname))

    def _getattr(self, obj, name, *default):
        """Enum members pickle as getattr(EnumClass, "NAME"); on anything but a torch
        class this is the classic way to reach os.system, so it is recorded as unsafe."""
        owner = getattr(obj, "qualname", type(obj).__name__)
        if not owner.startswith("torch."):
            self.unsafe_getattr.append(f"getattr({owner}, {name!r})")
        qualname = f"{owner}.{name}"
        return self._stubs.setdefault(qualname, _stub_class(qualname))

    def persistent_load(self, pid):
        if not self._persistent:
            raise pickle.UnpicklingError("persistent id in a pickle that should have none")
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            storage_type, key, numel = pid[1], str(pid[2]), int(pid[4])
            return StorageRef(key, STORAGE_DTYPES.get(str(storage_type), "?"), numel)
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


@dataclass
class InertResult:
    obj: Any
    globals: list[str]
    unsafe: list[str] = field(default_factory=list)  # globals that would run code / build arbitrary objects


def inert_loads(
    data: bytes, *, persistent: bool = False, allowed: Callable[[str], bool] = tensor_safe, what: str = "pickle"
) -> InertResult:
    """Unpickle with stand-ins for every global. `allowed` says which globals a real load
    may meet; the others are returned in `unsafe` (nothing was run either way)."""
    import io

    unpickler = _InertUnpickler(io.BytesIO(data), persistent=persistent)
    try:
        obj = unpickler.load()
    except _UNREADABLE as e:
        raise CheckpointError(f"{what} is truncated or not a pickle ({type(e).__name__}: {e})") from None
    unsafe = [g for g in unpickler.globals if not allowed(g) and g != "builtins.getattr"]
    unsafe += unpickler.unsafe_getattr
    return InertResult(obj, unpickler.globals, unsafe)


# ---- torch.save archives --------------------------------------------------------------


@dataclass
class TorchArchive:
    """A torch.save zip file read inertly: the unpickled structure and its storages."""

    path: Path
    prefix: str  # the archive's folder name inside the zip
    root: Any
    globals: list[str]
    unsafe: list[str]
    record_sizes: dict[str, int]  # storage key -> bytes in the zip


def read_torch_archive(path: Path) -> TorchArchive:
    """Structure of a torch.save file without reading tensor data or running code."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") and n.count("/") == 1), None)
            if pkl is None:
                raise CheckpointError(f"{path}: a zip file but not a torch.save archive (no data.pkl)")
            prefix = pkl.split("/")[0]
            data = zf.read(pkl)
            sizes = {n.rsplit("/", 1)[1]: zf.getinfo(n).file_size for n in names if n.startswith(prefix + "/data/")}
    except zipfile.BadZipFile:
        raise CheckpointError(_not_zip_reason(path)) from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e.strerror or e}") from None
    result = inert_loads(data, persistent=True, what=f"{path}")
    archive = TorchArchive(path, prefix, result.obj, result.globals, result.unsafe, sizes)
    _check_storages(archive)
    return archive


def _not_zip_reason(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head[:2] == b"PK":
        return f"{path}: truncated torch.save archive (the zip directory at its end is missing)"
    if head[:1] == b"\x80" and b"\x8a\x0a" in head[:8]:
        return (
            f"{path}: legacy torch.save format (torch < 1.6, not a zip archive); re-save it with a "
            "current torch: torch.save(torch.load(path, weights_only=True), new_path)"
        )
    return f"{path}: not a torch.save archive (no zip header); is it truncated or another format?"


def _check_storages(archive: TorchArchive) -> None:
    """Every storage the pickle refers to must be in the zip, whole."""
    for ref in iter_storages(archive.root):
        have = archive.record_sizes.get(ref.key)
        want = ref.numel * ITEMSIZE.get(ref.dtype, 1)
        if have is None:
            raise CheckpointError(f"{archive.path}: truncated or damaged: tensor data record {ref.key} is missing")
        if have < want:
            raise CheckpointError(
                f"{archive.path}: truncated or damaged: tensor data record {ref.key} has {have} bytes, needs {want}"
            )


def iter_storages(obj, depth: int = 0):
    if depth > 64:
        return
    if isinstance(obj, TensorRef):
        yield obj.storage
    elif isinstance(obj, ShardedRef):
        for p in obj.pieces:
            yield p.tensor.storage
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_storages(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from iter_storages(v, depth + 1)
    elif isinstance(obj, Stub):
        yield from iter_storages(obj.state, depth + 1)


def read_tensor(archive_path: Path, prefix: str, ref: TensorRef):
    """One tensor's data straight from the archive (used for sharded parts, which
    torch.load(weights_only=True) refuses): the bytes are the storage, nothing is unpickled."""
    import torch

    from titan_train.checkpoint.formats.dtypes import torch_dtype

    with zipfile.ZipFile(archive_path) as zf:
        raw = bytearray(zf.read(f"{prefix}/data/{ref.storage.key}"))
    dtype = torch_dtype(ref.dtype)
    flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    return flat.as_strided(ref.shape, ref.stride, ref.offset).clone()


# ---- restricted (real) loading ----------------------------------------------------------


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, fh, allowed: frozenset[str], what: str):
        super().__init__(fh)
        self._allowed, self._what = allowed, what

    def find_class(self, module: str, name: str):
        qualname = f"{module}.{name}"
        if qualname in self._allowed or is_torch_dtype(qualname):
            return getattr(importlib.import_module(module), name)
        raise UnsafeCheckpoint(
            f"{self._what} refers to {qualname}, which is not a DCP metadata class: "
            "loading it with torch's reader would run it. Refused"
        )

    def persistent_load(self, pid):
        raise UnsafeCheckpoint(f"{self._what}: unexpected persistent reference in a metadata pickle. Refused")


def restricted_load(fh, allowed: frozenset[str], what: str) -> Any:
    try:
        return _RestrictedUnpickler(fh, allowed, what).load()
    except UnsafeCheckpoint:
        raise
    except _UNREADABLE as e:
        raise CheckpointError(f"{what} is truncated or not a DCP metadata pickle ({type(e).__name__})") from None
