"""HuggingFace safetensors: headers parsed directly (8-byte length + JSON, no tensor data and
no `safetensors` package needed), tensor slices and sharded output through the package
(the `hf` extra), with one clear error when it is missing.

Format: https://github.com/huggingface/safetensors (README, "Format").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from titan_train.checkpoint.formats import CheckpointError, TensorInfo
from titan_train.checkpoint.formats.dtypes import ITEMSIZE, SAFETENSORS_DTYPES

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_MAX_HEADER = 100 * 2**20  # the reference implementation refuses larger headers too


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """{name: TensorInfo} and the free-form `__metadata__`, checked against the file size."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes, no header)")
            n = int.from_bytes(head, "little")
            if n > min(size - 8, _MAX_HEADER):
                raise CheckpointError(
                    f"{path}: not a safetensors file, or truncated (header length {n} exceeds the {size}-byte file)"
                )
            raw = fh.read(n)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path}: damaged safetensors header (not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: damaged safetensors header (not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    data_size = size - 8 - n
    tensors = {}
    for name, entry in header.items():
        try:
            dtype = SAFETENSORS_DTYPES.get(entry["dtype"], entry["dtype"].lower())
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError(f"{path}: damaged safetensors header entry for {name!r}") from None
        if end > data_size:
            raise CheckpointError(
                f"{path}: truncated: tensor {name} ends at byte {end} of the data, the file holds {data_size}"
            )
        info = TensorInfo(shape, dtype)
        if dtype in ITEMSIZE and end - begin != info.numel * ITEMSIZE[dtype]:
            raise CheckpointError(
                f"{path}: damaged: tensor {name} has {end - begin} bytes for shape {list(shape)} {dtype}"
            )
        tensors[name] = info
    return tensors, metadata


def read_index(path: Path) -> dict[str, Path]:
    """{tensor name: shard file} from a `*.safetensors.index.json`, every shard present."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        weight_map = doc["weight_map"]
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise CheckpointError(f"{path}: not a weights index (JSON with a weight_map)") from None
    shards = {name: Path(path).parent / file for name, file in weight_map.items()}
    for file in sorted(set(shards.values())):
        if not file.is_file():
            raise CheckpointError(f"{path}: shard {file.name} listed in the index is missing")
    return shards


def _require():
    try:
        from safetensors import safe_open
        from safetensors.torch import save_file
    except ImportError:
        raise CheckpointError(
            "HF safetensors data needs the 'safetensors' package, which is not installed",
            fix="pip install 'titan-npu[hf]'   (or: pip install safetensors)",
        ) from None
    return safe_open, save_file


class SliceReader:
    """Reads tensors or slices of them from safetensors files (only the bytes asked for)."""

    def __init__(self):
        self._safe_open, _ = _require()
        self._open: dict[Path, object] = {}

    def read(self, file: Path, name: str, index: tuple | None = None):
        handle = self._open.get(file)
        if handle is None:
            handle = self._open[file] = self._safe_open(str(file), framework="pt", device="cpu")
        if index is None:
            return handle.get_tensor(name)
        return handle.get_slice(name)[index]


def with_umask(path: Path) -> None:
    """safetensors' writer creates files 0600 whatever the umask; every other file the tools
    write is created 0666 less the umask, so an exported shard must be too (a colleague's
    job that reads the export would otherwise fail with 'permission denied')."""
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    """The process umask, read without setting it (os.umask would change it for a moment,
    for every thread, an async checkpoint writer's included)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_sharded(
    tensors: Iterable[tuple[str, object]],
    folder: Path,
    *,
    max_shard_bytes: int,
    metadata: dict[str, str] | None = None,
    on_tensor: Callable[[str, int], None] | None = None,
) -> list[Path]:
    """Write `tensors` (name, torch tensor) in order into shards of at most `max_shard_bytes`
    (one tensor larger than that gets a shard of its own), named the HF way, plus the index
    when there is more than one shard. Only the current shard is held in memory."""
    _, save_file = _require()
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt", **(metadata or {})}
    written: list[tuple[Path, list[str]]] = []
    shard: dict[str, object] = {}
    shard_bytes = total = 0
    seen: set[int] = set()  # data pointers in the current shard

    def flush():
        nonlocal shard, shard_bytes
        if shard:
            path = folder / f"part-{len(written) + 1:05d}.safetensors"
            save_file(shard, str(path), metadata=metadata)
            with_umask(path)
            written.append((path, list(shard)))
            shard, shard_bytes = {}, 0
            seen.clear()

    for name, tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        if shard and shard_bytes + size > max_shard_bytes:
            flush()
        tensor = tensor.contiguous()
        if tensor.data_ptr() in seen:
            # Tied weights (lm_head = embed_tokens) come back as one storage; safetensors refuses
            # shared memory within a file, so the second name gets its own copy.
            tensor = tensor.clone()
        seen.add(tensor.data_ptr())
        shard[name] = tensor
        shard_bytes += size
        total += size
        if on_tensor:
            on_tensor(name, size)
    flush()
    if len(written) == 1:
        final = folder / SINGLE_NAME
        written[0][0].rename(final)
        return [final]
    weight_map, finals = {}, []
    for i, (path, names) in enumerate(written, 1):
        final = folder / f"model-{i:05d}-of-{len(written):05d}.safetensors"
        path.rename(final)
        finals.append(final)
        weight_map.update({n: final.name for n in names})
    (folder / INDEX_NAME).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n", encoding="utf-8"
    )
    return finals
