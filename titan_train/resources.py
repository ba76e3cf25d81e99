"""Where the shipped trainer configs (configs/) are, in a checkout and in an installed wheel.

In a source checkout they sit at the repository root; a wheel carries them as
titan_train/_data/configs. (rules/ is read through titan_knowledge.)
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def configs_dir() -> Path:
    """The folder holding the shipped trainer configs (configs/*.toml)."""
    installed = _PACKAGE / "_data" / "configs"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"
