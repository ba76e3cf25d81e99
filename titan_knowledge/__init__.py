"""Knowledge kept as data: the one loader for the TOML files under rules/.

Both tools read rules/ through here (the doctor its migrate rules, version matrix and log
signatures; the trainer its device table), so this package imports neither of them and
nothing heavier than the standard library. In a checkout the data is the repository's
rules/ folder; an installed wheel carries it as titan_knowledge/rules.

Every [[table]] entry is checked by one mechanism, `check_entry` against a schema: the
migrate rules as frozen dataclasses (typed_entry), the other tables as `record`s that name
the keys their readers need (SCHEMAS). Every entry carries a `source` (a citation, or a
key of the file's [sources] table, which is expanded here). A file that fails to parse or
breaks its schema is a `KnowledgeError` naming the file and entry, which the tools turn
into exit 2 instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing
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


# -- one way to check an entry ------------------------------------------------------------
# Every [[table]] entry under rules/ is checked against a schema: a dataclass whose fields
# are the entry's keys (no default: required; a type: checked and converted). The migrate
# rules are read AS their schema (typed_entry: frozen dataclasses, unknown keys refused);
# the other tables stay dicts for their readers and are checked by a `record` schema that
# names the keys they need (other keys allowed, so a new optional key needs no change here).
_OPEN = "__titan_open__"  # a record: keys beyond its fields are allowed


def record(name: str, *keys: str) -> type:
    """A schema for a table read as dicts: `source` (a non-empty string) and `keys`
    required, any value type, other keys allowed."""
    fields = [("source", str)] + [(k, Any) for k in keys if k != "source"]
    schema = dataclasses.make_dataclass(name, fields, frozen=True)
    setattr(schema, _OPEN, True)
    return schema


ENTRY = record("Entry")  # any table not named below: a source is enough

# (file, table) -> schema. Checked at load so a broken entry is one clear line, not a
# KeyError deep inside a check.
SCHEMAS: dict[tuple[str, str], type] = {
    ("log_signatures", "signature"): record("Signature", "id", "title", "pattern", "cause", "fix"),
    ("error_codes", "acl"): record("AclCode", "code", "name", "meaning"),
    ("error_codes", "acl_class"): record("AclClass", "digit", "meaning", "rank", "fix"),
    ("error_codes", "acl_module"): record("AclModule", "digits", "module"),
    ("error_codes", "component"): record("Component", "char", "module", "fix"),
    ("error_codes", "ecode"): record("ECode", "code", "title", "cause", "fix"),
    ("error_codes", "hccl_result"): record("HcclResult", "code", "name", "fix"),
    ("error_codes", "nccl_result"): record("NcclResult", "code", "name", "text", "cause", "fix"),
    ("error_codes", "pta_module"): record("PtaModule", "digits", "name", "meaning"),
    ("error_codes", "pta_error"): record("PtaError", "code", "meaning"),
    ("hccl_env", "range"): record("HcclRange", "name", "min", "max", "default", "unit", "why"),
    ("versions", "compat"): record("Compat", "cann", "torch", "torch_npu"),
    ("versions", "python"): record("PythonCompat", "torch", "python"),
    ("devices", "device"): record("Device", "name", "match", "memory_gib", "peak_tflops"),
    ("torchtitan_job_config", "section"): record("TorchtitanSection", "name", "keys"),
}


@functools.cache
def load(name: str) -> dict[str, Any]:
    """rules/<name>.toml as a dict, every [[table]] entry checked against its schema
    (SCHEMAS, else a `source` is required) and its source expanded (cached: every caller
    shares one parse and one check)."""
    data = load_toml(rules_dir() / f"{name}.toml")
    sources = data.get("sources", {})
    errors = []
    for key, entries in data.items():
        if isinstance(entries, list) and all(isinstance(e, dict) for e in entries):
            schema = SCHEMAS.get((name, key), ENTRY)
            for i, e in enumerate(entries):
                label = e.get("id") or e.get("code") or e.get("name") or "?"
                _, problems = check_entry(e, schema, f"{name}.toml [[{key}]]: entry {i} ({label})")
                errors += problems
                if not problems:
                    e["source"] = expand_source(e["source"], sources)
    if errors:
        raise KnowledgeError("\n".join(errors))
    return data


def expand_source(source: Any, sources: dict[str, str]) -> Any:
    """'acl-rt; https://...' -> the [sources] text of acl-rt, then the rest as written."""
    if not isinstance(source, str):
        return source
    head, sep, rest = source.partition("; ")
    return sources[head] + sep + rest if head in sources else source


def devices() -> list[dict[str, Any]]:
    """rules/devices.toml's [[device]] entries (memory and peak FLOPs per card)."""
    return load("devices").get("device", [])


def lookup_device(device_name: str, table: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The first devices.toml entry whose `match` substrings all occur in the runtime name."""
    lowered = device_name.lower()
    for entry in table if table is not None else devices():
        if all(m.lower() in lowered for m in entry["match"]):
            return entry
    return None


def check_entry(entry: dict[str, Any], schema: type, where: str) -> tuple[dict[str, Any], list[str]]:
    """(the entry's values converted to the schema's field types, the problems), each
    problem one line naming `where`: the required keys it lacks (one line for all), a key
    the schema does not know (unless the schema is an open `record`: a typo such as
    `keyword =` would otherwise be ignored silently), a value of the wrong type."""
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
    errors = []
    missing = [
        name
        for name, f in fields.items()
        if name not in entry and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        errors.append(f"{where} lacks {', '.join(missing)}")
    if not getattr(schema, _OPEN, False):
        errors += [f"{where}: unknown key '{k}' (known: {', '.join(sorted(fields))})" for k in entry if k not in fields]
    values: dict[str, Any] = {}
    for name in fields:
        if name not in entry:
            continue
        value, problem = _entry_value(entry[name], hints[name])
        if problem:
            errors.append(f"{where}: '{name}' {problem}")
        else:
            values[name] = value
    return values, errors


def typed_entry(entry: dict[str, Any], schema: type, where: str) -> tuple[Any, list[str]]:
    """One TOML table as an instance of the frozen dataclass `schema`, checked in full by
    check_entry. Returns (instance or None, errors). Lists become tuples and tables become
    dicts, so the instance cannot be changed after loading."""
    values, errors = check_entry(entry, schema, where)
    if errors:
        return None, errors
    return schema(**values), []


def coerce(value: Any, hint: Any) -> tuple[Any, bool]:
    """One TOML value as the type `hint` names: (converted, True), or (value, False) when it
    is not of that type. The one TOML-to-dataclass converter: rules/ entries here and the
    trainer's job config (titan_train/config/job.py) both read through it, each phrasing a
    mismatch for its own readers. Lists become tuples where the hint says tuple; an int is
    accepted (as a float) where a float is; true/false are never numbers."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None, True
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0]) if len(inner) == 1 else (value, True)
    if hint is bool:
        return value, isinstance(value, bool)
    if hint in (int, float):
        number = isinstance(value, int) and not isinstance(value, bool) or (hint is float and isinstance(value, float))
        return (hint(value) if number else value), number
    if hint is str:
        return value, isinstance(value, str)
    if origin in (list, tuple):
        if not isinstance(value, list):
            return value, False
        items = [coerce(v, args[0] if args else Any) for v in value]
        if not all(ok for _, ok in items):
            return value, False
        converted = [v for v, _ in items]
        return (tuple(converted) if origin is tuple else converted), True
    if origin is dict:
        if not isinstance(value, dict):
            return value, False
        items = {k: coerce(v, args[1] if args else Any) for k, v in value.items()}
        return ({k: v for k, (v, _) in items.items()}, True) if all(ok for _, ok in items.values()) else (value, False)
    return value, True


# What a rules/ value must be, in the words of an error (rules never mean an empty string).
_EXPECTED = {
    bool: "true or false",
    int: "an integer",
    str: "a non-empty string",
    tuple: "a list of strings",
    dict: "a table of strings",
}


def _entry_value(value: Any, hint: Any) -> tuple[Any, str]:
    """(value converted to `hint`, "") or (None, what is wrong), for one rules/ entry key."""
    converted, ok = coerce(value, hint)
    if ok and (converted == "" or isinstance(converted, tuple) and "" in converted):
        ok = False
    if ok:
        return converted, ""
    inner = (
        [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType)
        else [hint]
    )
    base = typing.get_origin(inner[0]) or inner[0]
    return None, f"must be {_EXPECTED.get(base, getattr(base, '__name__', base))}, not {value!r}"
