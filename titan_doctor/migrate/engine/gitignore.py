"""Reads .gitignore files the way git does, for trees that are not in a git work tree
(a release tarball, a copied folder) or where git is not installed.

Inside a work tree discovery asks git itself (it also knows .git/info/exclude and the
global excludes file); this reader is the fallback with the same meaning: patterns from
gitignore(5), the last matching line wins, `!` re-includes, a trailing `/` matches only
folders, a pattern with a slash in it is anchored to its .gitignore's folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern
    negate: bool
    dir_only: bool


def _translate(body: str) -> str:
    """Glob body (no leading/trailing slash handling) -> regex text, gitignore flavour."""
    out, i, n = [], 0, len(body)
    while i < n:
        c = body[i]
        if body.startswith("**/", i) and (i == 0 or body[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif body.startswith("**", i) and i == 0 and n == 2:
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = body.find("]", i + 2 if body[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            inner = body[i + 1 : j]
            if inner[:1] in ("!", "^"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(body[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse_line(line: str) -> Pattern | None:
    """One .gitignore line -> Pattern, or None for blanks and comments."""
    line = line.rstrip("\n").rstrip("\r")
    line = re.sub(r"(?<!\\) +$", "", line)
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    elif line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    body = _translate(line.lstrip("/") if line.startswith("/") else line)
    prefix = "" if anchored else "(?:.*/)?"
    return Pattern(re.compile(f"^{prefix}{body}$", re.DOTALL), negate, dir_only)


def parse(text: str) -> list[Pattern]:
    return [p for p in map(parse_line, text.splitlines()) if p is not None]


class IgnoreReader:
    """The .gitignore files met while walking down from `root`; ask `ignored(path)`.

    Call `enter(folder)` for each folder before asking about its entries (os.walk order);
    a folder that is ignored is never entered, so a file below an ignored folder cannot be
    re-included, as in git.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._rules: dict[Path, list[Pattern]] = {}
        info = root / ".git" / "info" / "exclude"
        self._base = parse(_read(info)) if info.is_file() else []

    def enter(self, folder: Path) -> None:
        f = folder / ".gitignore"
        self._rules[folder] = parse(_read(f)) if f.is_file() else []

    def ignored(self, path: Path, is_dir: bool) -> bool:
        verdict = False
        chain = [(self.root, self._base)]
        rel_parts = path.relative_to(self.root).parts
        for k in range(len(rel_parts)):
            folder = self.root.joinpath(*rel_parts[:k])
            chain.append((folder, self._rules.get(folder, [])))
        for folder, patterns in chain:
            rel = path.relative_to(folder).as_posix()
            for p in patterns:
                if p.dir_only and not is_dir:
                    continue
                if p.regex.match(rel):
                    verdict = not p.negate
        return verdict


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
