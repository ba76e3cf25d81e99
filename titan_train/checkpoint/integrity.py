"""Is a complete-looking `step-N` folder actually readable? Checked before any tensor is
loaded, from DCP's own index: `.metadata` must unpickle (through the restricted reader), and every byte range it points to
must lie inside an existing file. That catches a missing or truncated shard and a missing
or corrupt `.metadata` (a disk that filled up, a copy that stopped, a hand-deleted file)
without reading the tensors. Damage inside a file of the right size is caught by the load
itself (checkpoint.py falls back then too).
"""

from __future__ import annotations

from pathlib import Path


def problem(path: str | Path) -> str | None:
    """None when `path` looks loadable, else what is wrong with it, in a few words."""
    from titan_train.checkpoint.formats.dcp_io import SafeFileSystemReader

    path = Path(path)
    if not (path / ".metadata").is_file():
        return "no .metadata (the save never finished)"
    try:
        meta = SafeFileSystemReader(str(path)).read_metadata()  # only DCP's own classes unpickle
    except Exception as e:  # noqa: BLE001  any unpickling failure means the same thing here
        return f".metadata is unreadable ({type(e).__name__})"
    sizes: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        name = info.relative_path
        if name not in sizes:
            try:
                sizes[name] = (path / name).stat().st_size
            except OSError:
                return f"shard {name} is missing"
        if info.offset + info.length > sizes[name]:
            return f"shard {name} is truncated ({sizes[name]:,} bytes, the index needs {info.offset + info.length:,})"
    return None
