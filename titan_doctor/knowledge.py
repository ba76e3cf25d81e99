"""Loads the knowledge kept as data under rules/ (TOML), once, checked on load.

Every entry in those files carries a `source`; a file that fails to parse is a tool
error (exit 2) naming the file, never a traceback deep inside a check.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from titan_train.resources import rules_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class KnowledgeError(Exception):
    """A rules/ data file is missing or malformed."""


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as e:
        raise KnowledgeError(f"{path}: file not found") from e
    except tomllib.TOMLDecodeError as e:
        raise KnowledgeError(f"{path}: invalid TOML: {e}") from e


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    """rules/<name>.toml as a dict, every [[table]] entry checked for a `source` (cached:
    every check shares one parse and one check)."""
    data = load_toml(rules_dir() / f"{name}.toml")
    for key, entries in data.items():
        if isinstance(entries, list) and all(isinstance(e, dict) for e in entries):
            require_sources(entries, f"{name}.toml [[{key}]]")
    return data


def require_sources(entries: list[dict[str, Any]], file: str) -> None:
    """Knowledge without a source cannot be reviewed: refuse it."""
    for i, e in enumerate(entries):
        if not e.get("source"):
            raise KnowledgeError(f"{file}: entry {i} ({e.get('id') or e.get('code') or '?'}) has no 'source'")
