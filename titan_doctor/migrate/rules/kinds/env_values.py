"""What an environment variable's value becomes when its name moves from CUDA/NCCL to
NPU/HCCL: `convert_env(rules, name, value)`.

A rename alone can change what a setting means: NCCL_BUFFSIZE counts bytes and
HCCL_BUFFSIZE counts MB, so copying 4194304 asks HCCL for 4 TB. Each env rule says how its
value converts (rules/migrate/env.toml, `value`); this module applies it to one literal
value, or says what a person must do when the value is not a literal the tool can see.
Both pieces of the env family (env.py) call it: EnvVars in Python (os.environ, dicts,
setdefault, putenv) and the script-line piece (launch scripts, configs); so does
`titan-doctor diagnose` (distributed_env.py)
for the NCCL/CUDA variables it finds in a live environment: one mapping, one conversion,
whichever tool reads the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from titan_doctor.findings import Status
from titan_doctor.migrate.rules.kind import fill
from titan_doctor.migrate.rules.kinds.env_rules import Env
from titan_doctor.migrate.rules.ruleset import RuleSet


@dataclass(frozen=True)
class EnvChange:
    """What to do with one occurrence of a CUDA-side variable.

    new_name:  the NPU-side name to write, or None to leave the name as it is
    new_value: the value to write, or None to leave the value as it is
    status:    FIXED (the tool's change is exact) or MANUAL (a person must act)
    message:   one line for the finding, saying what was done or why not
    why:       for MANUAL with an NPU-side name, why the value cannot move ("" otherwise)
    """

    rule: Env
    new_name: str | None
    new_value: str | None
    status: Status
    message: str
    fix: str
    why: str = ""


def convert_env(rules: RuleSet, name: str, value: str | None, *, value_known: bool = True) -> EnvChange | None:
    """The change for `name` set to `value` (None when no rule knows the name).

    value_known=False: the value is not a literal here (read from the environment,
    computed, or set elsewhere); the name moves only when values keep their meaning
    (value = "same"). A value of None with value_known=True means "no value involved" (a
    presence check, an unset): the name alone moves.
    """
    rule = rules.env_rule(name)
    if rule is None:
        return None
    msg = fill(rule.message, old=name, new=rule.new or "", version=rules.npu_version)
    if rule.new is None:
        return EnvChange(rule, None, None, Status.MANUAL, msg, rule.fix)
    if rule.value == "manual":
        return _manual(rule, name, value, msg, _SYNTAX)
    if not value_known:
        # "same": the value's format carries over (`pattern` only names the literal
        # values known to mean the same); other kinds need the value to convert it
        if rule.value == "same":
            return EnvChange(rule, rule.new, None, Status.FIXED, msg, rule.fix)
        return _manual(rule, name, None, msg, "its value is not a literal here, so it cannot be converted")
    if value is None:
        return EnvChange(rule, rule.new, None, Status.FIXED, msg, rule.fix)
    converted, why = _CONVERT[rule.value](rule, value.strip())
    if converted is None:
        return _manual(rule, name, value, msg, why)
    if converted == value.strip():
        return EnvChange(rule, rule.new, None, Status.FIXED, msg, rule.fix)
    note = f"{msg}, value {value.strip()} -> {converted} ({rule.old_unit} -> {rule.new_unit}, exact)"
    if rule.note:
        note += f"; {rule.note}"
    return EnvChange(rule, rule.new, converted, Status.FIXED, note, rule.fix)


def convert_to(rules: RuleSet, new_name: str, value: str) -> EnvChange | None:
    """`value` read as the CUDA-side variable that becomes `new_name` would be (an
    HCCL_BUFFSIZE that holds a byte count: what NCCL_BUFFSIZE's value means in MB).
    None when no rule converts into `new_name`."""
    for rule in rules.env.values():
        if rule.new == new_name and rule.value not in ("same", "manual"):
            return convert_env(rules, rule.old, value)
    return None


_SYNTAX = "its syntax differs"


def _manual(rule: Env, name: str, value: str | None, msg: str, why: str) -> EnvChange:
    shown = f"{name}={value}" if value is not None else name
    units = f" ({rule.old_unit} -> {rule.new_unit})" if rule.old_unit else ""
    text = f"{shown} not renamed to {rule.new}: {why}{units}"
    return EnvChange(rule, None, None, Status.MANUAL, text, rule.fix or msg, why)


def _same(rule: Env, value: str) -> tuple[str | None, str]:
    if rule.pattern is None or re.fullmatch(rule.pattern, value):
        return value, ""
    return None, f"{value!r} has no {rule.new} equivalent"


def _scale(rule: Env, value: str) -> tuple[str | None, str]:
    if not re.fullmatch(r"\d+", value):
        return None, f"{value!r} is not a whole number of {rule.old_unit}"
    amount, rest = divmod(int(value), rule.factor)
    if rest:
        return None, f"{value} {rule.old_unit} is not a whole number of {rule.new_unit}"
    if rule.min is not None and amount < rule.min:
        return None, f"{value} {rule.old_unit} is below {rule.new}'s minimum of {rule.min} {rule.new_unit}"
    return str(amount), ""


def _map(rule: Env, value: str) -> tuple[str | None, str]:
    table = {k.upper(): v for k, v in rule.values.items()}
    if value.upper() in table:
        return table[value.upper()], ""
    return None, f"{value!r} has no equivalent {rule.new} level"


def _keys(rule: Env, value: str) -> tuple[str | None, str]:
    out, seen = [], set()
    for item in (p.strip() for p in value.split(",") if p.strip()):
        key, sep, setting = item.partition(":")
        if key in rule.rename_keys:
            key = rule.rename_keys[key]
        elif key not in rule.keys:
            return None, f"torch_npu does not accept the setting {key!r}"
        out.append(f"{key}{sep}{setting}")
        seen.add(key)
        seen.add(f"{key}:{setting}")
    for pair in rule.conflicts:
        a, _, b = (s.strip() for s in pair.partition("&"))
        if a in seen and b in seen:
            return None, f"torch_npu refuses {a} together with {b.split(':')[0]}"
    return ",".join(out), ""


def _never(rule: Env, value: str) -> tuple[str | None, str]:
    return None, _SYNTAX


_CONVERT = {"same": _same, "scale": _scale, "map": _map, "keys": _keys, "manual": _never}
