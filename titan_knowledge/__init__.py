"""Knowledge kept as data: the one loader for the TOML files under rules/.

Both tools read rules/ through here (the doctor its migrate rules, version matrix and log
signatures; the trainer its device table), so this package imports neither of them and
nothing heavier than the standard library. In a checkout the data is the repository's
rules/ folder; an installed wheel carries it as titan_knowledge/rules.

Every [[table]] entry carries a `source` (a citation, or a key of the file's [sources]
table, which is expanded here); entries of the tables in REQUIRED carry those keys too.
A file that fails to parse or breaks either rule is a `KnowledgeError` naming the file and
entry, which the tools turn into exit 2 instead of a traceback.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_PACKAGE = Path(__file__).resolve().parent


class KnowledgeError(Exception):
    """A rules/ data file is missing or malformed."""


def rules_dir() -> Path:
    """rules/ inside an installed wheel, else the checkout's top-level rules/."""
    installed = _PACKAGE / "rules"
    return installed if installed.is_dir() else _PACKAGE.parent / "rules"


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as e:
        raise KnowledgeError(f"{path}: file not found") from e
    except tomllib.TOMLDecodeError as e:
        raise KnowledgeError(f"{path}: invalid TOML: {e}") from e


# Keys every entry of a table must have: (file, table) -> keys. Checked at load so a
# broken entry is one clear line, not a KeyError deep inside a check.
REQUIRED: dict[tuple[str, str], tuple[str, ...]] = {
    ("log_signatures", "signature"): ("id", "title", "pattern", "cause", "fix"),
    ("error_codes", "acl"): ("code", "name", "meaning"),
    ("error_codes", "acl_class"): ("digit", "meaning", "rank", "fix"),
    ("error_codes", "acl_module"): ("digits", "module"),
    ("error_codes", "component"): ("char", "module", "fix"),
    ("error_codes", "ecode"): ("code", "title", "cause", "fix"),
    ("error_codes", "hccl_result"): ("code", "name", "fix"),
    ("error_codes", "nccl_result"): ("code", "name", "text", "cause", "fix"),
    ("error_codes", "pta_module"): ("digits", "name", "meaning"),
    ("error_codes", "pta_error"): ("code", "meaning"),
    ("hccl_env", "range"): ("name", "min", "max", "default", "unit", "why"),
    ("hccl_env", "leftover"): ("name", "equivalent"),
    ("versions", "compat"): ("cann", "torch", "torch_npu"),
    ("versions", "python"): ("torch", "python"),
}


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    """rules/<name>.toml as a dict, every [[table]] entry checked for a `source` and the
    keys REQUIRED of its table (cached: every caller shares one parse and one check)."""
    data = load_toml(rules_dir() / f"{name}.toml")
    sources = data.get("sources", {})
    for key, entries in data.items():
        if isinstance(entries, list) and all(isinstance(e, dict) for e in entries):
            require_sources(entries, f"{name}.toml [[{key}]]")
            require_keys(entries, REQUIRED.get((name, key), ()), f"{name}.toml [[{key}]]")
            for e in entries:
                e["source"] = expand_source(e["source"], sources)
    return data


def expand_source(source: Any, sources: dict[str, str]) -> Any:
    """'acl-rt; https://...' -> the [sources] text of acl-rt, then the rest as written."""
    if not isinstance(source, str):
        return source
    head, sep, rest = source.partition("; ")
    return sources[head] + sep + rest if head in sources else source


def require_keys(entries: list[dict[str, Any]], keys: tuple[str, ...], file: str) -> None:
    for i, e in enumerate(entries):
        missing = [k for k in keys if k not in e]
        if missing:
            raise KnowledgeError(f"{file}: entry {i} ({e.get('id') or e.get('code') or e.get('name') or '?'}) "
                                 f"lacks {', '.join(missing)}")


def require_sources(entries: list[dict[str, Any]], file: str) -> None:
    """Knowledge without a source cannot be reviewed: refuse it."""
    for i, e in enumerate(entries):
        if not e.get("source"):
            raise KnowledgeError(f"{file}: entry {i} ({e.get('id') or e.get('code') or '?'}) has no 'source'")


def devices() -> list[dict[str, Any]]:
    """rules/devices.toml's [[device]] entries (memory and peak FLOPs per card)."""
    entries = load("devices").get("device", [])
    for e in entries:
        missing = [k for k in ("name", "match", "memory_gib", "peak_tflops") if k not in e]
        if missing:
            raise KnowledgeError(f"devices.toml: {e.get('name', '?')}: missing {', '.join(missing)}")
    return entries


def lookup_device(device_name: str, table: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The first devices.toml entry whose `match` substrings all occur in the runtime name."""
    lowered = device_name.lower()
    for entry in table if table is not None else devices():
        if all(m.lower() in lowered for m in entry["match"]):
            return entry
    return None


def typed_entry(entry: dict[str, Any], schema: type, where: str) -> tuple[Any, list[str]]:
    """One TOML table as an instance of the frozen dataclass `schema`, checked in full.

    Returns (instance or None, errors). Every problem is its own one-line error naming
    `where` and the key: a missing required key, a key the schema does not know (a typo
    such as `keyword =` would otherwise be ignored silently), a value of the wrong type.
    Lists become tuples and tables become dicts, so the instance is hashable-ish and
    cannot be changed after loading.
    """
    import dataclasses
    import typing

    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
    errors = [f"{where}: unknown key '{k}' (known: {', '.join(sorted(fields))})"
              for k in entry if k not in fields]
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in entry:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                errors.append(f"{where}: missing '{name}'")
            continue
        value, problem = _coerce(entry[name], hints[name])
        if problem:
            errors.append(f"{where}: '{name}' {problem}")
        else:
            values[name] = value
    if errors:
        return None, errors
    return schema(**values), []


def _coerce(value: Any, hint: Any) -> tuple[Any, str]:
    """(value converted to `hint`, "" ) or (None, what is wrong)."""
    import types
    import typing

    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None, ""
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0]) if len(inner) == 1 else (value, "")
    if hint is bool:
        return (value, "") if isinstance(value, bool) else (None, f"must be true or false, not {value!r}")
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return (value, "") if ok else (None, f"must be an integer, not {value!r}")
    if hint is str:
        if not isinstance(value, str) or not value:
            return None, f"must be a non-empty string, not {value!r}"
        return value, ""
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            return None, f"must be a list of strings, not {value!r}"
        return tuple(value), ""
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            return None, f"must be a table of strings, not {value!r}"
        return dict(value), ""
    return value, ""
