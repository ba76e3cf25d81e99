"""Failure families (rules/log_families.toml): what a crash-log finding belongs to, the generic
next step for a family, and the likely family of an error text nothing more specific matched
(an exception no signature names), so even an unknown error gets a next step that fits it."""

from __future__ import annotations

import functools
import re
from typing import Any

import titan_knowledge as knowledge


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


def guess(text: str) -> str:
    """The likely family of an error text ('other' when no hint fits)."""
    for rx, family in _data()[1]:
        if rx.search(text):
            return family
    return "other"
