"""Why a write failed, in one line: the disk (or the quota) is full, or the destination
cannot be written at all (a parent is a file, a folder this user may not write, a
read-only file system).

Checkpoints, exports, conversions and prepared data all meet the same failures under
different disguises: an OSError with errno ENOSPC / EDQUOT; DCP's CheckpointException,
which holds one failure per rank; torch's zip writer (torch.save, and DCP's files through
it), which reports a full disk as an internal assertion of inline_container.cc
("PytorchStreamWriter failed writing file data/0: file write failed" in older torch,
"basic_ios::clear: iostream error" then "unexpected pos 576 vs 534" in 2.13), no errno
left; numpy's tofile (prepared token shards), a short write ("1108174 requested and 524224
written"). `explain` recognizes them all and returns the line to print; `in_log` finds the same
in a rank's log for the launcher's summary. Standard library only: the bottom layer, so the
trainer and the doctor both import it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import traceback
from collections.abc import Iterator
from pathlib import Path

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# errnos of a destination that cannot be written, whatever the space
BLOCKED_ERRNOS = frozenset({errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM, errno.EROFS})
# torch's zip writer failing to write (no errno survives the C++ stream)
TORCH_WRITER_FAILED = re.compile(
    r"PytorchStreamWriter failed writing|file write failed|inline_container\.cc.*unexpected pos|"
    r"basic_ios::clear: iostream error"
)
# numpy's ndarray.tofile when fwrite writes less than asked (a full disk; errno is not kept)
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")
# an errno's text in a log
_ERRNO_IN_LOG = re.compile(r"\[Errno (?:28|122)\]|No space left on device|Disk quota exceeded|" + SHORT_WRITE.pattern)
# a tool's own line: "titan-train: error: no space left on device writing ..."
_OWN_LINE = re.compile(r"^[\w. -]+: error: (no space left on device .*)$")
NO_SPACE = "no space left on device"


class WriteError(Exception):
    """A write that failed for a reason the user fixes (space, a path that cannot be
    written): its text is the whole message, one line."""


def _carried(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception it carries: causes, contexts, DCP's per-rank failures
    ({rank: (exception, traceback)}), an exception group's members."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        context = None if e.__suppress_context__ else e.__context__  # `raise ... from None` disowns it
        todo += [e.__cause__, context, *getattr(e, "exceptions", ())]
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) and f else f for f in failures.values()]


def disk_full(exc: BaseException) -> BaseException | None:
    """The exception in `exc` that says the disk is full (an errno first, torch's zip
    writer otherwise), or None."""
    carried = list(_carried(exc))
    for e in carried:
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return e
    for e in carried:
        if isinstance(e, RuntimeError) and TORCH_WRITER_FAILED.search(str(e)):
            return e
        if isinstance(e, OSError) and e.errno is None and SHORT_WRITE.search(str(e)):
            return e
    return None


def release(exc: BaseException) -> None:
    """Drop what the frames of a failed write still hold: torch's zip writer keeps the
    partial file open through them, so its space is not free (and a message would report
    0 B free) until the process exits."""
    for e in _carried(exc):
        traceback.clear_frames(e.__traceback__)


def nearest_existing(path: str | Path) -> Path:
    """`path`, or its closest ancestor that exists."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def mount_point(path: str | Path) -> Path:
    p = nearest_existing(path).resolve()
    while not os.path.ismount(p):
        p = p.parent
    return p


def size_text(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while n >= 1024 ** (power + 1) and power < len(units) - 1:
        power += 1
    return f"{n} B" if power == 0 else f"{n / 1024**power:.1f} {units[power]}"


def tree_size(path: str | Path) -> int:
    """Bytes of a file, or of every file under a folder (0 when absent)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0


def no_space_message(path: str | Path, needed: int | None) -> str:
    """'no space left on device writing P: 1.2 GiB free on /data, about 3.4 GiB needed';
    free is measured now (after the partial output was removed), at the nearest existing
    parent of `path`."""
    where = nearest_existing(path)
    free = shutil.disk_usage(where).free
    need = f"about {size_text(needed)} needed" if needed else "how much is needed is unknown"
    return f"{NO_SPACE} writing {path}: {size_text(free)} free on {mount_point(where)}, {need}"


def blocked(path: str | Path) -> str | None:
    """Why nothing can be created at `path`, judged from the disk: its nearest existing
    parent is a file, is on a read-only file system, or is a folder this user may not write."""
    parent = nearest_existing(Path(os.path.abspath(path)).parent)
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    if os.access(parent, os.W_OK | os.X_OK):
        return None
    if os.statvfs(parent).f_flag & os.ST_RDONLY:
        return f"{parent} is on a read-only file system"
    return f"{parent} is not writable by this user"


def check_writable(path: str | Path) -> None:
    """Before any work: refuse a destination that cannot be created, in one line."""
    reason = blocked(path)
    if reason:
        raise WriteError(f"cannot write {path}: {reason}")


def explain(exc: BaseException, path: str | Path | None, needed: int | None = None) -> WriteError | None:
    """The one-line WriteError for `exc`, raised while writing `path` (`needed`: the bytes
    that write needs, when known), if it is a full disk or a destination that cannot be
    written; None for anything else. `path` None: the file the OSError names (a write
    outside the tools' own writers: metrics, logs); None when it names none."""
    if isinstance(exc, WriteError):
        return exc
    full = disk_full(exc)
    if full is not None:
        path = path or getattr(full, "filename", None)
        return WriteError(no_space_message(path, needed)) if path else None
    os_error = next((e for e in _carried(exc) if isinstance(e, OSError) and e.errno in BLOCKED_ERRNOS), None)
    if os_error is None or not (path or os_error.filename):
        return None
    path = path or os_error.filename
    reason = blocked(path)
    if reason is None:
        if os_error.errno == errno.EEXIST or not _inside(os_error.filename, path):
            return None  # something else existed, or a file read elsewhere was refused: not this write
        reason = f"{(os_error.strerror or 'refused').lower()} ({os_error.filename})"
    return WriteError(f"cannot write {path}: {reason}")


def _inside(filename: str | None, path: str | Path) -> bool:
    """`filename` is `path`, under it, or its hidden partial sibling (.NAME.partial-PID)."""
    if not filename:
        return False
    name, where = os.path.abspath(filename), os.path.abspath(path)
    partial = os.path.join(os.path.dirname(where), f".{os.path.basename(where)}.")
    return name == where or name.startswith(where + os.sep) or name.startswith(partial)


def in_log(lines: list[str]) -> str | None:
    """What a failed rank's log says about a full disk, for the launcher's summary: the
    rank's own one-line message, else "no space left on device (<the error line>)" for a
    traceback that shows it (torch's inline_container.cc text, an errno 28), else None.
    Only the log's last lines are read: the failure, not something handled long before."""
    tail = [line.strip() for line in lines[-80:] if line.strip()]
    for line in reversed(tail):
        own = _OWN_LINE.match(line)
        if own:
            return own.group(1)
    for pattern in (_ERRNO_IN_LOG, TORCH_WRITER_FAILED):  # the errno says more than torch's assertion
        for line in reversed(tail):
            if pattern.search(line) and not line.startswith("File "):
                return f"{NO_SPACE} ({line[:240]})"
    return None
