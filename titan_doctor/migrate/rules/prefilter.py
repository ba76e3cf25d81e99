"""The cheap text tests that decide what is worth parsing, built from the rules' marker
words: a file must contain every word of one conjunction, and a statement or line must
match `line_re` to be worth visiting. One Prefilter per rewriter (rules/kind.py:
PYTHON_CODE, SCRIPT_LINES), so a word only a script rule needs (SBATCH, gres) never makes
a Python file worth a full parse."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass


def word(w: str) -> str:
    """A whole word as a regex; a word ending in `_` is a prefix (NCCL_*); `*` in a word (a
    glob report rule's module name, a package marker such as flash*attn) stands for any
    word characters and hyphens."""
    if "*" in w:
        return r"[\w-]*".join(map(re.escape, w.split("*"))) + r"(?![\w])"
    return re.escape(w) + ("" if w.endswith("_") else r"(?![\w])")


@dataclass(frozen=True)
class Prefilter:
    """The pre-filter of one rewriter (see the module docstring)."""

    markers: tuple[tuple[str, ...], ...]
    marker_re: re.Pattern
    line_re: re.Pattern

    def may_match(self, data: bytes) -> bool:
        found = {m.decode() for m in self.marker_re.findall(data)}
        return any(
            all(w in found or ("*" in w and any(fnmatch.fnmatchcase(f, w) for f in found)) for w in conj)
            for conj in self.markers
        )


def build(markers: Iterable[tuple[str, ...]], alternatives: Iterable[str]) -> Prefilter:
    """From each rule's marker words (all of them in a matching file) and line regex
    alternatives (one of them on a matching line)."""
    kept = _minimal(set(markers))
    alts = set(alternatives)
    line_re = re.compile(
        rb"(?<![\w])(?:" + "|".join(sorted(alts, key=len, reverse=True)).encode() + rb")" if alts else rb"(?!)"
    )
    return Prefilter(kept, _marker_regex(kept), line_re)


def _minimal(markers: set[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    """Drop conjunctions implied by a weaker one: (torch, cuda) is implied by (cuda,)."""

    def implied(a, b):  # every word of b is in a (a prefix word covers what it starts)
        return all(any(x == w or (w.endswith("_") and x.startswith(w)) for x in a) for w in b)

    markers = {m for m in markers if m}
    keep = [a for a in markers if not any(b != a and implied(a, b) for b in markers)]
    return tuple(sorted(keep))


def _marker_regex(markers: tuple[tuple[str, ...], ...]) -> re.Pattern:
    """One pass over a file finds which marker words occur as whole words (a name or
    string token); a word ending in `_` is a prefix (NCCL_*)."""
    words = sorted({w for conj in markers for w in conj}, key=len, reverse=True)
    return re.compile(rb"(?<![\w])(?:" + "|".join(map(word, words)).encode() + rb")")
