"""Writing results: atomic replacement in place, and the --output copy of a tree.

A write never goes through a symbolic link and never leaves a half-written file: the new
bytes go to a temporary file in the same folder, which is renamed over the target. In
place, the target must still hold the bytes that were migrated (an editor saving in the
meantime is not overwritten).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from titan_doctor.migrate.engine.discovery import Discovery


class WriteRefused(OSError):
    """The target is a link or changed since it was read: not written."""


def write_atomic(path: Path, data: bytes, expected: bytes | None = None, mode: int | None = None) -> None:
    """Temp file in the same folder, then rename over `path`, keeping its mode (or
    `mode`). With `expected`, refuse when the file no longer holds those bytes."""
    if path.is_symlink():
        raise WriteRefused(f"{path} is a symbolic link; not written through")
    if expected is not None and path.read_bytes() != expected:
        raise WriteRefused(f"{path} changed while migrate ran; not overwritten")
    if mode is None and path.exists():
        mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _clear(dst: Path) -> None:
    """Make room for a file or link at `dst` without writing through what is there."""
    if dst.is_symlink() or dst.is_file():
        dst.unlink()
    elif dst.exists():
        raise IsADirectoryError(21, "Is a directory", str(dst))


def copy_tree(found: Discovery, new: dict[Path, bytes], output: Path, roots: list[Path]) -> None:
    """Every file discovery kept, under `output` (one folder per PATH when several),
    migrated files with their new bytes; links recreated as links (a link into the tree
    points into the copy). Skipped paths (ignored, environments, .git) are not copied."""

    def base(root: Path) -> Path:
        return output / root.name if len(roots) > 1 else output

    for e in found.entries:
        dst = base(e.root) / e.rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = new.get(e.path)
        if data is None:
            _clear(dst)
            shutil.copy2(e.path, dst)
        else:
            if dst.is_symlink():
                dst.unlink()
            write_atomic(dst, data, mode=e.path.stat().st_mode)
    trees = [(r, r.resolve()) for r in roots if r.is_dir()]
    for link in found.links:
        dst = base(link.root) / link.rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        target = os.readlink(link.path)
        real = link.path.resolve()
        tree = next(((r, t) for r, t in trees if real == t or t in real.parents), None)
        if link.inside and tree is not None:
            target = os.path.relpath(base(tree[0]) / real.relative_to(tree[1]), dst.parent)
        elif not os.path.isabs(target) and link.path.exists():
            target = str(real)  # a relative link out of the tree: keep pointing where it did
        _clear(dst)
        os.symlink(target, dst)
