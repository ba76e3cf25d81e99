"""Full disks for tests, without filling the real one: a file object whose disk has N bytes
left (a write beyond them raises the real OSError(ENOSPC) a full disk raises, so torch's zip
writer fails exactly as it does there), and, where this process may mount (root), a real
tmpfs of a few MiB."""

from __future__ import annotations

import errno
import io
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


class FullDisk(io.RawIOBase):
    """A new file at `path` on a disk with `room` bytes left."""

    def __init__(self, path: str | Path, room: int):
        super().__init__()
        self.path, self.room = str(path), room
        self.fh = open(path, "wb")  # noqa: SIM115  (closed with this object)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        size = len(memoryview(data).cast("B"))
        if size > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
        self.room -= size
        return self.fh.write(data)

    def close(self) -> None:
        self.fh.close()
        super().close()


def torch_save_on_a_full_disk(room: int = 512):
    """A stand-in for writers.write_torch: torch.save onto a disk with `room` bytes left."""
    import torch

    def write(state_dict, path) -> None:
        with FullDisk(path, room) as fh:
            torch.save(state_dict, fh)

    return write


@contextmanager
def small_tmpfs(where: Path, size: str = "1m") -> Iterator[Path]:
    """A real tmpfs of `size` mounted at `where`; skips the test where mounting is not permitted."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
        )
    except FileNotFoundError:  # no mount(8)
        pytest.skip("cannot mount a tmpfs here (no mount command)")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()[:80] or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
