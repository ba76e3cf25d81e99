"""torchtitan's command-line spellings, read as this trainer's `--config` and `--set`.

A torchtitan user types `--job.config_file train_configs/llama3_8b.toml --training.steps=3`.
torchtitan v0.2.2 (torchtitan/config/manager.py, through tyro) takes `--section.key=value` and
`--section.key value`, a bare `--section.flag` for true and `--section.no_flag` (or
`--section.no-flag`) for false, hyphens for underscores, and `--job.config_file` /
`--job.config-file` for the TOML. Here each becomes the `--set section.key=value` it means
(a tyro value is a plain string: one that is not a TOML value stays a string), and
`--job.config_file` becomes `--config`. What the keys mean is torchtitan.py's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from titan_train.config.job import ConfigError

CONFIG_FILE = ("job.config_file",)


@dataclass
class Translated:
    config: str | None = None  # from --job.config_file
    overrides: list[str] = field(default_factory=list)  # section.key=value, as --set takes them


def _name(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _value(text: str) -> str:
    """tyro spells booleans True / False; TOML wants them lower-case."""
    return text.lower() if text in ("True", "False") else text


def _bare(name: str) -> str:
    """`--compile.enable` is true; `--checkpoint.no_enable` is false."""
    section, _, key = name.rpartition(".")
    if key.startswith("no_") and len(key) > 3:
        return f"{section}.{key[3:]}=false"
    return f"{name}=true"


def translate(args: list[str] | tuple[str, ...]) -> Translated:
    """The arguments click did not know, as torchtitan's flags; anything else is refused in one
    line (an option this command lacks, or a stray word)."""
    out, i, args = Translated(), 0, list(args)
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or "." not in arg.split("=", 1)[0]:
            raise ConfigError(
                f"{arg!r}: not an option of titan-train run (torchtitan's --section.key=value is read as "
                "--set section.key=value; see titan-train run --help)"
            )
        if "=" in arg:
            flag, value = arg.split("=", 1)
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            flag, value = arg, args[i + 1]
            i += 2
        else:
            flag, value = arg, None
            i += 1
        name = _name(flag)
        if name in CONFIG_FILE:
            if value is None:
                raise ConfigError(f"{flag}: expected a TOML path, e.g. {flag} train_configs/llama3_8b.toml")
            out.config = value
        elif value is None:
            out.overrides.append(_bare(name))
        else:
            out.overrides.append(f"{name}={_value(value)}")
    return out
