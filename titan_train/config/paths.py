"""Where the shipped trainer configs (configs/) are, in a checkout and in an installed wheel,
and what a `--config` argument names (a path, or a shipped config's name).

In a source checkout they sit at the repository root; a wheel carries them as
titan_train/_data/configs. (rules/ is read through titan_knowledge.)
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # titan_train/


def configs_dir() -> Path:
    """The folder holding the shipped trainer configs (configs/*.toml)."""
    installed = _PACKAGE / "_data" / "configs"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"


def resolve_config(spec: str) -> Path:
    """A path, or the name of a shipped config ("llama_debug" -> configs/llama_debug.toml)."""
    path = Path(spec)
    if path.exists() or path.suffix == ".toml" or "/" in spec:
        return path
    return configs_dir() / f"{spec}.toml"
