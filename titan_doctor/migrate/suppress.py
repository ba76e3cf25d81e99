"""Inline suppression: `# titan-doctor: ignore[NPU108]` (or a bare `# titan-doctor: ignore`)
on a line keeps that line as it is and silent, so a reviewed, intentional "cuda" does not
fail `--check` forever.

Like flake8's `# noqa`, the comment applies to the physical line a finding is reported on
(where its node starts). Codes may be prefixes (`ignore[NPU1]`) and comma-separated. It
works in every file kind with `#` comments: Python, notebook cells (Python and shell
lines), shell and Slurm scripts, .env, YAML, TOML.
"""

from __future__ import annotations

import re

_PATTERN = r"#\s*titan-doctor:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?"
_COMMENT = re.compile(_PATTERN.encode())
_COMMENT_TEXT = re.compile(_PATTERN)
ALL = frozenset({""})  # every code starts with ""


def _codes(listed: str | None) -> frozenset[str]:
    if listed is None:
        return ALL
    return frozenset(c.strip() for c in listed.split(",") if c.strip()) or ALL


def suppressions(data: bytes) -> dict[int, frozenset[str]]:
    """line number -> codes (prefixes) suppressed there; {} when the file has none."""
    if b"titan-doctor" not in data:
        return {}
    found: dict[int, frozenset[str]] = {}
    for m in _COMMENT.finditer(data):
        line = data.count(b"\n", 0, m.start()) + 1
        found[line] = _codes(m.group(1).decode() if m.group(1) is not None else None)
    return found


def codes_on(line: str) -> frozenset[str] | None:
    """The codes one line's comment suppresses (line-by-line rewriters); None: no comment."""
    if "titan-doctor" not in line:
        return None
    m = _COMMENT_TEXT.search(line)
    return _codes(m.group(1)) if m else None


def silences(codes: frozenset[str] | None, code: str) -> bool:
    return codes is not None and any(code.startswith(c) for c in codes)


def is_suppressed(table: dict[int, frozenset[str]], line: int, code: str) -> bool:
    return silences(table.get(line), code)
