"""Crash-log signatures (rules/log_signatures.toml) compiled once, matched per line.

Shared by the log explainer and by the torch_npu import check, so an import error is
classified the same way whether the doctor saw it live or in a log.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import titan_knowledge as knowledge


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


@dataclass(frozen=True)
class Match:
    sig: Signature
    groups: dict[str, str]
    line: str = ""


@functools.lru_cache(maxsize=None)
def load() -> tuple[Signature, ...]:
    sigs = []
    for e in knowledge.load("log_signatures").get("signature", []):
        try:
            rx = re.compile(e["pattern"])
        except (re.error, KeyError) as err:
            raise knowledge.KnowledgeError(f"log_signatures.toml: {e.get('id')}: bad pattern: {err}") from err
        sigs.append(Signature(e["id"], e["title"], rx, int(e.get("rank", 50)), e["cause"], e["fix"],
                              e["source"], e.get("parse", "")))
    return tuple(sigs)


def hccl_codes() -> dict[str, str]:
    return {str(k): v for k, v in knowledge.load("log_signatures").get("hccl_codes", {}).items()}


def match_line(line: str) -> list[Match]:
    """Every signature that matches this line (a line can carry a wrapper and a cause)."""
    out = []
    for sig in load():
        m = sig.regex.search(line)
        if m:
            out.append(Match(sig, {k: v for k, v in m.groupdict().items() if v is not None}, line.strip()))
    return out


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
