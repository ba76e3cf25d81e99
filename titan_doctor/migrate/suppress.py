"""Inline suppression: `# titan-doctor: ignore[NPU108]` (or a bare `# titan-doctor: ignore`)
on a line keeps that line as it is and silent, so a reviewed, intentional "cuda" does not
fail `--check` forever.

Like flake8's `# noqa`, the comment applies to the physical line a finding is reported on
(where its node starts). Codes may be prefixes (`ignore[NPU1]`) and comma-separated.
"""
from __future__ import annotations

import re

_COMMENT = re.compile(rb"#\s*titan-doctor:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")
ALL = frozenset({""})   # every code starts with ""


def suppressions(data: bytes) -> dict[int, frozenset[str]]:
    """line number -> codes (prefixes) suppressed there; {} when the file has none."""
    if b"titan-doctor" not in data:
        return {}
    found: dict[int, frozenset[str]] = {}
    for m in _COMMENT.finditer(data):
        line = data.count(b"\n", 0, m.start()) + 1
        codes = m.group(1)
        found[line] = ALL if codes is None else frozenset(
            c.strip() for c in codes.decode().split(",") if c.strip()) or ALL
    return found


def is_suppressed(table: dict[int, frozenset[str]], line: int, code: str) -> bool:
    codes = table.get(line)
    return codes is not None and any(code.startswith(c) for c in codes)
