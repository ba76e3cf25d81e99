"""Variables that carry a device string from its literal to where a device is used.

`dev = "cuda"` ... `model.to(dev)` ... `if dev == "cuda":` -- the name says nothing, but
the string flows into a device position, so the literal is a device and so is every
comparison of that name: both ends are rewritten, or neither (rules/kinds/literals.py
asks here, through PythonFile.device_names).
Found with the stdlib tree before the rewrite walk (the use comes after the literal);
only files that assign a device-looking string to a name no rule knows pay for it.
Names are tracked per file, not per scope: a name used as a device anywhere in the
file is a device everywhere in it.
"""

from __future__ import annotations

import ast
import re

from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import LITERALS
from titan_doctor.migrate.walk.astnames import flat_imports, qualified

_ASSIGNED = re.compile(rb"""(?m)^[ \t]*([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=[ \t]*f?["']""")


def may_flow(rules: RuleSet, data: bytes) -> bool:
    """Cheap text check: is a string assigned to a name that no assign rule covers?"""
    device = LITERALS["device"].cuda.encode()
    if device not in data:
        return False
    return any(
        rules.value_literal(m.group(1).decode()) is None and device in data[m.end() : m.end() + 8]
        for m in _ASSIGNED.finditer(data)
    )


def device_variables(rules: RuleSet, tree: ast.Module) -> frozenset[str]:
    """Names assigned a device literal somewhere in the file and used as a device."""
    literal = LITERALS["device"]
    candidates = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            head = _head(node.value)
            if head is not None and (literal.rewrite(head) or literal.rewrite_head(head)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                candidates.update(
                    t.id for t in targets if isinstance(t, ast.Name) and rules.value_literal(t.id) is None
                )
    if not candidates:
        return frozenset()
    imports = flat_imports(tree)
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for value in _device_args(rules, node, imports):
                if isinstance(value, ast.Name) and value.id in candidates:
                    used.add(value.id)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(
                isinstance(s, ast.Constant) and isinstance(s.value, str) and literal.rewrite(s.value) for s in sides
            ):
                used.update(s.id for s in sides if isinstance(s, ast.Name) and s.id in candidates)
    return frozenset(used)


def _head(value: ast.AST) -> str | None:
    """The literal text a value starts with ("cuda", "cuda:" + ..., f"cuda:{r}")."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.JoinedStr) and value.values and isinstance(value.values[0], ast.Constant):
        return value.values[0].value
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Mod)):
        return _head(value.left)
    if isinstance(value, ast.IfExp):
        return _head(value.body) or _head(value.orelse)
    return None


def _device_args(rules: RuleSet, call: ast.Call, imports: dict[str, str]):
    """The argument values of `call` that literal_arg rules say are devices."""
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    q = qualified(call.func, imports)
    for rule in rules.literal_args:
        if rule.literal != "device":
            continue
        if rule.callee == "*":
            yield from (k.value for k in call.keywords if k.arg in rule.keywords)
            continue
        callee = rule.callee or ""
        hit = q is not None and (q == callee or (callee.endswith(".*") and q.startswith(callee[:-1])))
        if not hit and not (rule.method and rule.method == method):
            continue
        if rule.any_arg:
            yield from call.args
        elif rule.pos is not None and rule.pos < len(call.args):
            yield call.args[rule.pos]
        yield from (k.value for k in call.keywords if rule.any_arg or k.arg in rule.keywords)
    yield from (k.value for k in call.keywords if k.arg and rules.value_literal(k.arg) == "device")
