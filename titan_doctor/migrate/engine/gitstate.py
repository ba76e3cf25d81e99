"""What git knows about the files migrate reads and writes: the work tree a folder
belongs to, which paths it ignores, which files have uncommitted changes.

Every call uses NUL-separated output (-z): git quotes non-ASCII and odd names in its
line output, and a guard that misreads a name lets a local edit be overwritten.
Outside a work tree (or without git) every answer is "nothing known".
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

_TIMEOUT = 120


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, timeout=_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None


def toplevel(folder: Path, cache: dict | None = None) -> Path | None:
    """The root of the work tree `folder` is in (a submodule is its own), else None.
    `cache` (a dict kept for one run) saves asking twice for the same folder."""
    if cache is not None and folder in cache:
        return cache[folder]
    out = _git(folder, "rev-parse", "--show-toplevel")
    top = None
    if out is not None and out.returncode == 0:
        top = Path(os.fsdecode(out.stdout.rstrip(b"\n"))).resolve()
    if cache is not None:
        cache[folder] = top
    return top


def ignored_below(folder: Path) -> set[str] | None:
    """Paths under `folder` (relative, posix, folders without the trailing slash) that git
    ignores and does not track; "." when `folder` itself is ignored. None outside git."""
    out = _git(folder, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
    if out is None or out.returncode != 0:
        return None
    names = {os.fsdecode(n).rstrip("/") or "." for n in out.stdout.split(b"\0") if n}
    return {"." if n in (".", "./") else n for n in names}


def _by_toplevel(paths: Iterable[Path]) -> dict[Path, list[Path]]:
    groups: dict[Path, list[Path]] = {}
    cache: dict = {}
    for p in paths:
        top = toplevel(p.parent, cache)
        if top is not None:
            groups.setdefault(top, []).append(p)
    return groups


def dirty(paths: Iterable[Path]) -> list[Path]:
    """Those of `paths` (real, resolved files) with uncommitted changes: modified, staged,
    untracked, renamed or conflicted. One `git status` per work tree."""
    found: list[Path] = []
    for top, group in _by_toplevel(paths).items():
        out = _git(top, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignored=no")
        if out is None or out.returncode != 0:
            continue
        changed: set[str] = set()
        entries = out.stdout.split(b"\0")
        i = 0
        while i < len(entries):
            entry = entries[i]
            i += 1
            if len(entry) < 4:
                continue
            xy, name = entry[:2], os.fsdecode(entry[3:])
            changed.add(name)
            if xy[:1] in (b"R", b"C") or xy[1:2] in (b"R", b"C"):
                changed.add(os.fsdecode(entries[i]))  # the rename's source follows
                i += 1
        found += [p for p in group if os.path.relpath(p, top).replace(os.sep, "/") in changed]
    return found


def ignored(paths: Iterable[Path]) -> list[Path]:
    """Those of `paths` that git ignores and does not track (no committed copy exists)."""
    found: list[Path] = []
    for top, group in _by_toplevel(paths).items():
        rel = {os.path.relpath(p, top).replace(os.sep, "/"): p for p in group}
        out = _git(top, "check-ignore", "-z", "--stdin", stdin=b"\0".join(os.fsencode(r) for r in rel) + b"\0")
        if out is None or out.returncode not in (0, 1):
            continue
        found += [rel[n] for n in (os.fsdecode(x) for x in out.stdout.split(b"\0")) if n in rel]
    return found
