"""DCP with nothing unpickled blindly.

torch 2.13's FileSystemReader reads `.metadata` with plain `pickle.load`, and
DefaultLoadPlanner.load_bytes reads non-tensor entries with `torch.load(weights_only=False)`:
a crafted folder runs code on load. `SafeFileSystemReader` unpickles `.metadata` through
an allow-list of DCP's metadata classes, and `SafeLoadPlanner` loads byte entries with
weights_only=True. torch's own format_utils.dcp_to_torch_save / torch_save_to_dcp use the
unsafe paths, so the conversions below follow their recipe (the same DCP entry points)
with these two classes instead.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from titan_train.checkpoint.formats import CheckpointError, UnsafeCheckpoint, pickles
from titan_train.runtime.messages import first_line


class SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose `.metadata` may only build DCP's own metadata classes."""

    def read_metadata(self, *args: Any, **kwargs: Any):
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as fh:
            metadata = pickles.restricted_load(fh, pickles.DCP_METADATA_GLOBALS, str(path))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _MetadataOnce(SafeFileSystemReader):
    """A reader for many loads from one folder: DCP re-reads `.metadata` at every load, and
    one tensor at a time that is a read per tensor (0.06 s for a 2-rank 7B step folder;
    tens of MB, seconds each, at 70B on 64 ranks)."""

    _metadata = None

    def read_metadata(self, *args: Any, **kwargs: Any):
        if self._metadata is None:
            self._metadata = super().read_metadata(*args, **kwargs)
        self._metadata.storage_meta.load_id = self.load_id  # reset() gives each load its own id
        return self._metadata


def load_bytes_safely(value: io.BytesIO, what: str) -> Any:
    try:
        return torch.load(value, weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[-1][:200]
        raise UnsafeCheckpoint(f"DCP entry {what} needs more than plain data to load ({first}). Refused") from None


class _SafeBytes:
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element as set_nested  # as DefaultLoadPlanner does

        obj = load_bytes_safely(value, read_item.dest_index.fqn)
        if self.flatten_state_dict:
            set_nested(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


class SafeLoadPlanner(_SafeBytes, DefaultLoadPlanner):
    """DefaultLoadPlanner that loads non-tensor entries with weights_only=True."""


class _SafeEverythingPlanner(_SafeBytes, _EmptyStateDictLoadPlanner):
    """Loads every entry of a checkpoint (as format_utils.dcp_to_torch_save does), safely."""


def _translate(err: BaseException, path: Path) -> CheckpointError:
    text = str(err)
    if isinstance(err, CheckpointError):
        return err
    if isinstance(err, FileNotFoundError) or "No such file" in text:
        return CheckpointError(f"{path}: a file of the DCP checkpoint is missing ({first_line(err, 160)})")
    return CheckpointError(
        f"{path}: cannot read the DCP checkpoint: {type(err).__name__}: "
        f"{text.strip().splitlines()[-1][:200] if text.strip() else ''}"
    )


def _check_metadata(path: Path, reader: SafeFileSystemReader | None = None) -> None:
    """Read `.metadata` once up front: DCP would bury a refusal in its own error text and a
    logged traceback, and fall back to per-rank metadata files."""
    try:
        (reader or SafeFileSystemReader(str(path))).read_metadata()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the DCP metadata: {e.strerror or e}") from None


def _checked_load(state_dict: dict, path: Path, planner, reader: SafeFileSystemReader | None = None) -> None:
    """`reader`: one already checked (by `tensor_loader`); otherwise `.metadata` is checked here."""
    if reader is None:
        reader = SafeFileSystemReader(str(path))
        _check_metadata(path, reader)
    try:
        _load_state_dict(state_dict, storage_reader=reader, planner=planner, no_dist=True)
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP wraps rank errors (a BaseException)
        cause = _root_cause(e)
        raise _translate(cause, path) from None


def _root_cause(err: BaseException) -> BaseException:
    """DCP re-raises rank failures as CheckpointException({rank: (exc, traceback)})."""
    failures = getattr(err, "failures", None)
    if isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        inner = first[0] if isinstance(first, tuple) else first
        if isinstance(inner, BaseException):
            return _root_cause(inner)
    return err


def load_everything(path: Path) -> dict[str, Any]:
    """Every entry of a DCP checkpoint as a nested state dict in memory (one full copy)."""
    sd: dict[str, Any] = {}
    _checked_load(sd, path, _SafeEverythingPlanner())
    return sd


def tensor_loader(path: Path) -> Callable[[str, tuple[int, ...], torch.dtype], torch.Tensor]:
    """`load(key, shape, dtype)`: one tensor of a DCP checkpoint (flat key), whole, for
    reading a folder tensor by tensor; `.metadata` is read and checked once, here."""
    reader = _MetadataOnce(str(path))
    _check_metadata(path, reader)

    def load(key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        out = {key: torch.empty(shape, dtype=dtype)}
        _checked_load(out, path, SafeLoadPlanner(allow_partial_load=True), reader)
        return out[key]

    return load


def load_into(state_dict: dict[str, Any], path: Path, process_group=None) -> None:
    """Collective load into (DTensor-)sharded tensors: each rank reads only its chunks."""
    import torch.distributed.checkpoint as dcp

    _check_metadata(path)
    try:
        dcp.load(
            state_dict,
            storage_reader=SafeFileSystemReader(str(path)),
            planner=SafeLoadPlanner(allow_partial_load=True),
            process_group=process_group,
        )
    except (Exception, CheckpointException) as e:  # noqa: BLE001
        raise _translate(_root_cause(e), path) from None


def save(state_dict: dict[str, Any], path: Path) -> None:
    """Write a state dict (nested or flat) as a DCP folder from one process."""
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state_dict, storage_writer=FileSystemWriter(str(path)), no_dist=True)
