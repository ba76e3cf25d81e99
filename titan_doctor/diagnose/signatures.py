"""Crash-log signatures compiled once, matched per line: the message rows of
rules/log_signatures.toml and of the per-source vocabularies beside it (log_nccl.toml: NCCL's
WARN/INFO lines; log_torch.toml: c10d, torchrun, the DataLoader, torch.save/load, FSDP, dynamo,
CUDA runtime and errno spellings; log_ascend.toml: the reasons CANN prints inside its generic
codes). Every row names its failure family (rules/log_families.toml).

Shared by the log explainer and by the torch_npu import check, so an import error is
classified the same way whether the doctor saw it live or in a log.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import titan_knowledge as knowledge

try:  # the regex parser, to find the literal text a pattern cannot match without
    from re import _constants as _C
    from re import _parser as _sre
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _C  # type: ignore[no-redef]
    import sre_parse as _sre  # type: ignore[no-redef]


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    regex: re.Pattern
    rank: int
    cause: str
    fix: str
    source: str
    parse: str = ""
    consequence: bool = False  # what a rank sees when another rank failed first
    merge: bool = False  # a message spanning lines: one error's lines are judged together
    needles: tuple[str, ...] | None = None  # a line holds one of these, or the pattern cannot match
    only_in: str = ""  # report it only inside this part of a log (e.g. "launcher_root")
    family: str = "other"  # the failure class (rules/log_families.toml)
    weak: bool = False  # the line only suggests the cause: say "likely" and what confirms it
    confirm: str = ""  # what shows a weak reading is right
    fix_serving: str = ""  # the fix when the log is a serving engine's (vLLM, SGLang), not training
    only_on: str = ""  # "npu": report it only in a log that shows an Ascend host
    next_line: bool = False  # the line after it belongs to the message (the exception a wrapper raised)


# The files holding [[signature]] rows, in the order they are read (ids are unique across them).
FILES = ("log_signatures", "log_nccl", "log_torch", "log_ascend")
_REQUIRED = ("id", "title", "pattern", "cause", "fix")


def _need(items: list) -> tuple[str, ...] | None:
    """The best needle set of the sequence `items`: one of its literal runs, or the needles of
    one part it cannot match without (a group, a repeat of at least one, an alternation: each
    alternative's needles). The set whose shortest needle is longest wins, then the smaller one."""
    options: list[tuple[str, ...]] = []
    cur = ""
    for op, av in items:
        if op is _C.LITERAL:
            cur += chr(av)
            continue
        if cur:
            options.append((cur,))
        cur = ""
        inner = None
        if op is _C.SUBPATTERN and not av[1] & re.IGNORECASE:  # (?i:...) matches other spellings
            inner = _need(list(av[-1]))
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, _C.POSSESSIVE_REPEAT) and av[0] >= 1:
            inner = _need(list(av[2]))
        elif op is _C.ATOMIC_GROUP:
            inner = _need(list(av))
        elif op is _C.BRANCH:
            alts = [_need(list(b)) for b in av[1]]
            inner = tuple(sorted({n for a in alts for n in a})) if all(alts) else None  # type: ignore[union-attr]
        if inner:
            options.append(inner)
    if cur:
        options.append((cur,))
    if not options:
        return None
    return max(options, key=lambda o: (min(min(map(len, o)), 8), -len(o), min(map(len, o))))


def needles(pattern: str, flags: int = 0) -> tuple[str, ...] | None:
    """Substrings of which every match contains one, derived from the pattern (a literal run,
    or one per alternative where it alternates, however deep). None when there is no useful
    one, shorter than 3 characters (then the regex runs on every line). This keeps the
    explainer at a substring test per signature for the lines that report nothing."""
    if flags & re.IGNORECASE:
        return None
    best = _need(list(_sre.parse(pattern)))
    return best if best and min(map(len, best)) >= 3 else None


@dataclass(frozen=True)
class Match:
    sig: Signature
    groups: dict[str, str]
    line: str = ""


@functools.cache
def load() -> tuple[Signature, ...]:
    sigs = []
    seen: set[str] = set()
    for name in FILES:
        for i, e in enumerate(knowledge.load(name).get("signature", [])):
            lacks = [k for k in _REQUIRED if k not in e]
            if lacks:
                raise knowledge.KnowledgeError(
                    f"{name}.toml [[signature]]: entry {i} ({e.get('id')}) lacks {', '.join(lacks)}"
                )
            if e["id"] in seen:
                raise knowledge.KnowledgeError(f"{name}.toml: signature id {e['id']} is defined twice")
            seen.add(e["id"])
            try:
                rx = re.compile(e["pattern"])
            except re.error as err:
                raise knowledge.KnowledgeError(f"{name}.toml: {e.get('id')}: bad pattern: {err}") from err
            sigs.append(
                Signature(
                    e["id"],
                    e["title"],
                    rx,
                    int(e.get("rank", 50)),
                    e["cause"],
                    e["fix"],
                    e["source"],
                    e.get("parse", ""),
                    bool(e.get("consequence", False)),
                    bool(e.get("merge", False)),
                    needles(e["pattern"], rx.flags),
                    e.get("only_in", ""),
                    e.get("family", "other"),
                    bool(e.get("weak", False)),
                    e.get("confirm", ""),
                    e.get("fix_serving", ""),
                    e.get("only_on", ""),
                    bool(e.get("next_line", False)),
                )
            )
    return tuple(sigs)


@functools.cache
def _analyses() -> dict[str, dict[str, Any]]:
    return {a["id"]: a for name in FILES for a in knowledge.load(name).get("analysis", [])}


def analysis(id_: str) -> dict[str, Any]:
    """An [[analysis]] row: the title, cause, fix and rank of a finding drawn from several
    lines together (e.g. NCCL's per-rank collective trace), not from one line."""
    return _analyses()[id_]


@functools.cache
def _group_names() -> dict[str, tuple[str, ...]]:
    return {sig.id: tuple(sig.regex.groupindex) for sig in load()}


def unmatched_blank(id_: str, groups: dict[str, Any]) -> dict[str, Any]:
    """`groups` with the signature's named groups that took no part in the match as "", so a
    template naming an alternative's group ({exc}{exc2}) never prints the bare field."""
    return {**dict.fromkeys(_group_names().get(id_, ()), ""), **groups}


def match_line(line: str, section: str = "") -> list[Match]:
    """Every signature that matches this line; `section` is the part of the log it is in
    (signatures with `only_in` match only there)."""
    out = []
    for sig in load():
        if sig.only_in and sig.only_in != section:
            continue
        if sig.needles and not any(n in line for n in sig.needles):
            continue
        m = sig.regex.search(line)
        if m:
            out.append(Match(sig, {k: v for k, v in m.groupdict().items() if v is not None}, line.strip()))
    return out


def best_match(line: str, section: str = "") -> Match | None:
    """The most specific signature of this line (lowest rank): one message, one reading
    (an undefined atb:: symbol is NNAL, not also a torch mismatch)."""
    return min(match_line(line, section), key=lambda m: m.sig.rank, default=None)


def classify(text: str) -> Match | None:
    """The most root-cause signature found anywhere in `text` (lowest rank wins)."""
    best: Match | None = None
    for line in text.splitlines():
        for m in match_line(line):
            if best is None or m.sig.rank < best.sig.rank:
                best = m
    return best


def fill(template: str, values: dict[str, Any]) -> str:
    """Fill {name} fields that we know; leave the others as written."""
    return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), template)
