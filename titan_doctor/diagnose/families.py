"""Failure families (rules/log_families.toml): what a crash-log finding belongs to, the generic
next step for a family, and the likely family of an error text nothing more specific matched
(an exception no signature names), so even an unknown error gets a next step that fits it."""

from __future__ import annotations

import functools
import re
from typing import Any

import titan_knowledge as knowledge
from titan_doctor.diagnose import signatures


@functools.cache
def _data() -> tuple[dict[str, dict[str, Any]], tuple[tuple[re.Pattern, str], ...]]:
    d = knowledge.load("log_families")
    table = {f["id"]: f for f in d.get("family", [])}
    hints = []
    for h in d.get("hint", []):
        if h["family"] not in table:
            raise knowledge.KnowledgeError(
                f"log_families.toml: hint {h['pattern']!r} names unknown family {h['family']}"
            )
        hints.append((re.compile(h["pattern"], re.IGNORECASE), h["family"]))
    return table, tuple(hints)


def ids() -> list[str]:
    return list(_data()[0])


def get(family: str) -> dict[str, Any]:
    table = _data()[0]
    return table.get(family) or table["other"]


def next_step(family: str) -> str:
    return get(family)["next_step"]


def named_by(text: str) -> dict[str, Any] | None:
    """The family a code's message names ("Reason: Set visible device failed ..."), or None:
    what a generic code adds to its own advice."""
    family = guess(text) if text else "other"
    return None if family == "other" else get(family)


@functools.cache
def _strerrors() -> tuple[tuple[str, str], ...]:
    """(strerror text, family) of every errno rules/errno.toml gives a family, longest first
    (so "Connection timed out" is not read as a shorter text it contains)."""
    rows = knowledge.load("errno").get("errno", [])
    pairs = {r["text"].lower(): r["family"] for r in rows if r.get("family", "other") != "other"}
    return tuple(sorted(pairs.items(), key=lambda p: -len(p[0])))


# a call that writes: an I/O error there is the disk written to (full, quota, a failing or
# network filesystem), not the device the job computes on
_WRITING = re.compile(r"(?i)\bwrite\b|\bwrit(?:ing|e\(\))|\bsave|\bflush|\bfsync|streamwriter")


@functools.cache
def _prefilter() -> tuple[tuple[str, ...], tuple[re.Pattern, ...]]:
    """Lower-case literals of which a hint's every match contains one, and the hints that have
    none (those always run): most lines contain no literal, and a substring test says so
    (guess runs on every line of a log in which nothing else was found)."""
    literals: list[str] = [err for err, _ in _strerrors()]
    always = []
    for rx, _ in _data()[1]:
        found = signatures.needles(rx.pattern)
        if found:
            literals.extend(n.lower() for n in found)
        else:
            always.append(rx)
    return tuple(literals), tuple(always)


def guess(text: str) -> str:
    """The likely family of an error text ('other' when no hint fits): the hints first, then
    the strerror text of an errno the message quotes ("... failed with Input/output error")."""
    literals, always = _prefilter()
    low = text.lower()
    if not any(n in low for n in literals) and not any(rx.search(text) for rx in always):
        return "other"
    for rx, family in _data()[1]:
        if rx.search(text):
            return family
    for err, family in _strerrors():
        if err in low:
            if family == "hardware" and _WRITING.search(text):
                return "host_disk"
            return family
    return "other"
