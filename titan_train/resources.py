"""Where the data folders (rules/, configs/) are, in a checkout and in an installed wheel.

In a source checkout they sit at the repository root; a wheel carries them as
titan_train/_data/{rules,configs}. Both tools find them through here.
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name


def rules_dir() -> Path:
    """The folder holding rules/*.toml (knowledge as data)."""
    return _data_dir("rules")


def configs_dir() -> Path:
    """The folder holding the shipped trainer configs (configs/*.toml)."""
    return _data_dir("configs")
