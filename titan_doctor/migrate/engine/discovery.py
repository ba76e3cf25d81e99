"""Which files a run reads, and what it leaves out and why.

Folders are never skipped by name alone (a `build/` or `dist/` can be the user's source):
what is left out is what git ignores (asked of git itself inside a work tree, read from
the .gitignore files outside one), version-control metadata, Python environments (a folder
with pyvenv.cfg or conda-meta/), installed packages (site-packages, dist-packages) and
--exclude globs. Every left-out path is counted under its reason for the summary.

Symbolic links are never followed: a link whose target is in the tree is left to the
target (each file is read once, by its real path; hard links and overlapping PATHs are
deduplicated by inode), and a link that leads out of the tree is not read at all, so an
in-place run can neither replace a link with a file nor write outside the tree.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from titan_doctor.migrate.engine import filekinds as kinds
from titan_doctor.migrate.engine import gitstate
from titan_doctor.migrate.engine.gitignore import IgnoreReader
from titan_doctor.migrate.rules.ruleset import RuleSet

MAX_BYTES = 64 * 2**20
VCS_DIRS = {".git", ".hg", ".svn"}
PACKAGE_DIRS = {"site-packages", "dist-packages"}

# reason -> why, as the summary says it
REASONS = {
    "ignored": "git ignores it (.gitignore, .git/info/exclude)",
    "vcs": "version-control metadata",
    "virtualenv": "a Python environment (pyvenv.cfg or conda-meta/)",
    "site-packages": "installed packages",
    "excluded": "matches --exclude",
    "symlink": "a symbolic link to a path in the tree: migrated as that path, once",
    "symlink-outside": "a symbolic link out of the tree: never followed",
    "broken-symlink": "a symbolic link to nothing",
    "duplicate": "the same file reached twice (overlapping PATHs or a hard link): read once",
    "too-large": f"larger than {MAX_BYTES // 2**20} MiB",
    "not-migratable": "named on the command line but not a kind migrate reads",
    "unreadable": "cannot be listed or read",
}


@dataclass(frozen=True)
class Entry:
    """A regular file under a named PATH: `path` is its real path, `rel` its place under
    the PATH (for --output), `kind` None for files that --output only copies."""

    path: Path
    root: Path
    rel: PurePosixPath
    kind: str | None


@dataclass(frozen=True)
class Link:
    path: Path  # the link itself (not resolved)
    root: Path
    rel: PurePosixPath
    inside: bool  # its target is in the tree


@dataclass
class Discovery:
    entries: list[Entry] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> shown paths

    @property
    def files(self) -> list[Entry]:
        """The files to migrate, in a stable order."""
        return [e for e in self.entries if e.kind is not None]

    def skip(self, reason: str, shown: str) -> None:
        self.skipped.setdefault(reason, []).append(shown)


def shown_name(path: Path, is_dir: bool = False, cwd: Path | None = None) -> str:
    """Relative to the working directory when below it; folders end with '/'. Links are
    not followed (a link is shown where it is, not where it points)."""
    absolute = Path(os.path.abspath(path))
    text = str(path)
    for base in (cwd or Path.cwd().resolve(), Path(os.path.abspath(os.getcwd()))):
        try:
            text = str(absolute.relative_to(base))
            break
        except ValueError:
            continue
    return text + "/" if is_dir else text


class _Ignores:
    """What is ignored below one folder: git's own list, or the .gitignore reader."""

    def __init__(self, base: Path, named: bool) -> None:
        self.base = base
        listed = gitstate.ignored_below(base)
        if listed is not None and "." in listed and named:
            listed = None  # the user named an ignored folder: read its own .gitignore files
        self.listed = listed
        self.reader = IgnoreReader(base) if listed is None else None

    def enter(self, folder: Path) -> None:
        if self.reader is not None:
            self.reader.enter(folder)

    def ignored(self, path: Path, is_dir: bool) -> bool:
        if self.reader is not None:
            return self.reader.ignored(path, is_dir)
        return path.relative_to(self.base).as_posix() in self.listed


def discover(paths: Iterable[Path], rules: RuleSet, exclude: Iterable[str] = ()) -> Discovery:
    """Walk the named PATHs (files or folders): see the module docstring for what is read."""
    paths = list(paths)
    walker = _Walker(rules, list(exclude), [p.resolve() for p in paths if p.is_dir()])
    for root in paths:
        if root.is_dir():  # a named link to a folder: the user chose it, walk its target
            walker.walk(root)
        else:
            walker.named_file(root)
    found = walker.found
    found.entries.sort(key=lambda e: (str(e.root), e.rel.as_posix()))
    return found


def _inside(target: Path, trees: list[Path]) -> bool:
    return any(target == t or t in target.parents for t in trees)


def _is_environment(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir()


class _Walker:
    def __init__(self, rules: RuleSet, exclude: list[str], trees: list[Path]) -> None:
        self.rules, self.exclude, self.trees = rules, exclude, trees
        self.found = Discovery()
        self.seen: set[tuple[int, int]] = set()
        self.cwd = Path.cwd().resolve()

    def skip(self, reason: str, path: Path, is_dir: bool = False) -> None:
        self.found.skip(reason, shown_name(path, is_dir, self.cwd))

    def excluded(self, rel: str) -> bool:
        return any(fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat.rstrip("/") + "/*") for pat in self.exclude)

    def add(self, path: Path, root: Path, rel: PurePosixPath, kind: str | None) -> None:
        if kind is not None:
            try:
                st = path.stat()
            except OSError:
                self.skip("unreadable", path)
                return
            if (st.st_dev, st.st_ino) in self.seen:
                self.skip("duplicate", path)
                return
            self.seen.add((st.st_dev, st.st_ino))
            if st.st_size > MAX_BYTES:
                self.skip("too-large", path)
                return
        self.found.entries.append(Entry(path, root, rel, kind))

    def named_file(self, root: Path) -> None:
        """A file named on the command line: read even if git ignores it (the in-place
        guard still asks), but never through a link out of its folder or the trees."""
        if self.excluded(root.as_posix()):
            self.skip("excluded", root)
            return
        real = root
        if root.is_symlink():
            try:
                real = root.resolve(strict=True)
            except (OSError, RuntimeError):
                self.skip("broken-symlink", root)
                return
            if not _inside(real, [root.parent.resolve(), *self.trees]):
                self.skip("symlink-outside", root)
                return
        if not real.is_file():
            self.skip("unreadable", root)
            return
        kind = kinds.kind_of(real, self.rules)
        if kind is None:
            self.skip("not-migratable", root)
            return
        self.add(real.resolve(), root, PurePosixPath(root.name), kind)

    def walk(self, root: Path) -> None:
        top = root.resolve()
        stack = [(top, _Ignores(top, named=True))]
        while stack:
            folder, ignores = stack.pop()
            ignores.enter(folder)
            try:
                with os.scandir(folder) as it:
                    items = sorted(it, key=lambda e: e.name)
            except OSError:
                self.skip("unreadable", folder, True)
                continue
            subfolders = []
            for item in items:
                path = Path(item.path)
                rel = PurePosixPath(path.relative_to(top).as_posix())
                is_link = item.is_symlink()
                is_dir = not is_link and item.is_dir(follow_symlinks=False)
                if item.name in VCS_DIRS:
                    self.skip("vcs", path, is_dir)
                elif self.excluded(rel.as_posix()):
                    self.skip("excluded", path, is_dir)
                elif ignores.ignored(path, is_dir):
                    self.skip("ignored", path, is_dir)
                elif is_link:
                    self.link(path, root, rel)
                elif is_dir:
                    if item.name in PACKAGE_DIRS:
                        self.skip("site-packages", path, True)
                    elif _is_environment(path):
                        self.skip("virtualenv", path, True)
                    else:
                        nested = (path / ".git").exists()  # a submodule or nested repo
                        subfolders.append((path, _Ignores(path, named=False) if nested else ignores))
                elif item.is_file(follow_symlinks=False):
                    self.add(path, root, rel, kinds.kind_of(path, self.rules))
            stack.extend(reversed(subfolders))

    def link(self, path: Path, root: Path, rel: PurePosixPath) -> None:
        """Never followed; counted when it could hold something migrate reads (a folder,
        or a file of a kind it reads), and kept for --output either way."""
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):
            if kinds.kind_of(path, self.rules) is not None:
                self.skip("broken-symlink", path)
            self.found.links.append(Link(path, root, rel, inside=False))
            return
        inside = _inside(target, self.trees)
        if target.is_dir() or kinds.kind_of(path, self.rules) or kinds.kind_of(target, self.rules):
            self.skip("symlink" if inside else "symlink-outside", path)
        self.found.links.append(Link(path, root, rel, inside))
