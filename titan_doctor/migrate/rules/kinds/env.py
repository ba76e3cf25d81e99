"""The env family: environment variable names (schema in env_rules.py) and the values set
with them, in Python strings (the EnvVars piece) and in script lines (`rename_in_line`).
Both convert a value through env_values.convert_env.

In Python, where the code writes a variable (`os.environ["NCCL_BUFFSIZE"] = "4194304"`, a
dict of env vars, `os.environ.setdefault(...)`, `os.putenv(...)`), name and literal value
are converted together (4194304 bytes -> "4" MB); where the
value is computed or read back (`os.environ.get("NCCL_DEBUG")`), the name moves only when
values keep their meaning, else a person is asked to convert it. A presence check or an
unset (`"PYTORCH_CUDA_ALLOC_CONF" not in os.environ`, `del os.environ[...]`) carries no
value: it moves with the name when every other use of that name in the file moves, so a
check and the write it guards keep naming the same variable (and stays with a read that
cannot move, so the check still guards it).
"""

from __future__ import annotations

import re

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context, LineContext
from titan_doctor.migrate.cstutil import plain_text, string_value, with_text
from titan_doctor.migrate.rules.kind import Family
from titan_doctor.migrate.rules.kinds.env_rules import ENV
from titan_doctor.migrate.rules.kinds.env_values import EnvChange, convert_env
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import CUDA_VISIBLE_DEVICES, NPU, VISIBLE_DEVICES_ENV

_KEPT_CODE = "NPU114"  # python/backends.py's: code that already runs beyond CUDA

_WRITE_CALLS = ("setdefault", "putenv", "__setitem__")
_NAME_ONLY_CALLS = ("pop", "unsetenv")
_NAME_ONLY = object()  # presence checks and unsets: the value is set somewhere else
# The names a file checks for or unsets: "NAME" in ..., del x["NAME"], .pop("NAME" / unsetenv("NAME"
_CHECKED = re.compile(
    r"""["']([A-Z][A-Z_0-9]*)["']\s*(?:not\s+)?in\b|\bdel\b[^\n]*\[\s*["']([A-Z][A-Z_0-9]*)["']"""
    r"""|(?:\.pop|unsetenv)\(\s*["']([A-Z][A-Z_0-9]*)["']"""
)


class EnvVars:
    """The piece: notes where each name is written (and with what) on the way down,
    renames names and converts values on the way up."""

    def __init__(self, ctx: Context, rules: RuleSet, source: str) -> None:
        self.ctx, self.rules, self._source = ctx, rules, source
        self._written: dict[int, object] = {}  # id(name string) -> value node / _NAME_ONLY
        self._values: dict[int, str] = {}  # id(value node) -> converted value
        self._stays: set[str] = set()  # names some use of which is not renamed

    def visit_Module(self, node: cst.Module) -> None:
        """Before the walk, when the file checks for or unsets a variable a rule knows: which
        names have a use that will not be renamed (a check of such a name stays with it).
        A second tree walk, so only for the few files that need it."""
        checked = {name for m in _CHECKED.finditer(self._source) for name in m.groups() if name}
        if any(self.rules.env_rule(name) is not None for name in checked):
            node.visit(_Uses(self))

    def _change(self, original: cst.SimpleString, value: str) -> EnvChange | None:
        written = self._written.get(id(original))
        if written is _NAME_ONLY:
            if value in self._stays:
                return convert_env(self.rules, value, None, value_known=False)
            return convert_env(self.rules, value, None)  # no value involved: the name alone
        if written is not None:
            literal = _literal(written)
            return convert_env(self.rules, value, literal, value_known=literal is not None)
        return convert_env(self.rules, value, None, value_known=False)  # read back: value elsewhere

    # -- where a name is written, and with what (pre-order) ---------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            key = _subscript_key(t.target)
            if key is not None:
                self._written[id(key)] = node.value

    def visit_Dict(self, node: cst.Dict) -> None:
        for el in node.elements:
            if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                self._written[id(el.key)] = el.value

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = (
            func.attr.value if isinstance(func, cst.Attribute) else (func.value if isinstance(func, cst.Name) else None)
        )
        args = [a for a in node.args if a.keyword is None and not a.star]
        if not args or not isinstance(args[0].value, cst.SimpleString):
            return
        if name in _WRITE_CALLS and len(args) == 2:
            self._written[id(args[0].value)] = args[1].value
        elif name in _NAME_ONLY_CALLS and (name == "unsetenv" or len(args) == 2):
            self._written[id(args[0].value)] = _NAME_ONLY  # pop(name, default): an unset

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if isinstance(node.left, cst.SimpleString) and any(
            isinstance(c.operator, (cst.In, cst.NotIn)) for c in node.comparisons
        ):
            self._written[id(node.left)] = _NAME_ONLY  # "NCCL_DEBUG" in os.environ

    def visit_Del(self, node: cst.Del) -> None:
        key = _subscript_key(node.target)
        if key is not None:
            self._written[id(key)] = _NAME_ONLY

    # -- rewriting --------------------------------------------------------------------------
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        new_value = self._values.pop(id(original), None)
        if new_value is not None:
            return with_text(updated, new_value)
        value = string_value(original)
        if not value or not value[0].isupper() or not value.isupper():
            return updated
        written = self._written.get(id(original))
        change = self._change(original, value)
        escaped = plain_text(original) is None  # escapes inside: a person
        if not self._apply(change, original, escaped):
            return updated
        if change.new_value is not None:
            self._values[id(written)] = change.new_value
        return with_text(updated, change.new_name)

    def _apply(self, change: EnvChange | None, node: cst.CSTNode, manual: bool = False) -> bool:
        """Report the change at `node`; True when the caller should rewrite."""
        if change is None:
            return False
        if manual or not _renamed(change):
            self.ctx.emit(change.rule.code, Status.MANUAL, node, change.message, change.fix)
            return False
        return self.ctx.emit(change.rule.code, Status.FIXED, node, change.message, change.fix, rewrite=True, npu=False)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg):
        """dict(os.environ, NCCL_DEBUG="WARN") / env.update(NCCL_BUFFSIZE="...")."""
        keyword = original.keyword
        if keyword is None or not keyword.value.isupper():
            return updated
        literal = _literal(original.value)
        change = convert_env(self.rules, keyword.value, literal, value_known=literal is not None)
        if not self._apply(change, keyword):
            return updated
        value = updated.value
        if change.new_value is not None:
            value = (
                with_text(value, change.new_value)
                if isinstance(value, cst.SimpleString)
                else value.with_changes(value=change.new_value)
            )
        return updated.with_changes(keyword=keyword.with_changes(value=change.new_name), value=value)

    def leave_Integer(self, original: cst.Integer, updated: cst.Integer):
        new_value = self._values.pop(id(original), None)
        return updated if new_value is None else updated.with_changes(value=new_value)


class _Uses(cst.CSTVisitor):
    """The pre-walk: records writes and checks as the main walk does, and every name whose
    use (a write of a value that cannot convert, a read) is not renamed."""

    def __init__(self, env: EnvVars) -> None:
        super().__init__()
        self.env = env
        self.visit_Assign, self.visit_Dict = env.visit_Assign, env.visit_Dict
        self.visit_Call, self.visit_Comparison, self.visit_Del = env.visit_Call, env.visit_Comparison, env.visit_Del

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if not value or not value.isupper() or self.env._written.get(id(node)) is _NAME_ONLY:
            return
        change = self.env._change(node, value)
        if change is not None and not _renamed(change):
            self.env._stays.add(value)

    def visit_Arg(self, node: cst.Arg) -> None:  # dict(os.environ, NCCL_BUFFSIZE=size)
        word = node.keyword.value if node.keyword is not None else ""
        if word.isupper():
            literal = _literal(node.value)
            change = convert_env(self.env.rules, word, literal, value_known=literal is not None)
            if change is not None and not _renamed(change):
                self.env._stays.add(word)


def _renamed(change: EnvChange) -> bool:
    """Whether the change rewrites the name (else it is a finding for a person)."""
    return change.status is not Status.MANUAL and change.new_name is not None


def _subscript_key(target: cst.BaseExpression) -> cst.SimpleString | None:
    """The string in `x["NAME"]`, or None."""
    if isinstance(target, cst.Subscript) and len(target.slice) == 1:
        index = target.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            return index.value
    return None


def _literal(node: object) -> str | None:
    """The text of a literal value (a plain string or an integer), else None."""
    if isinstance(node, cst.Integer):
        return node.value
    if isinstance(node, cst.SimpleString):
        return plain_text(node)
    return None


# -- script lines -------------------------------------------------------------------------
_VAR = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")
# NAME=value / NAME: value right after a variable name (a literal value: no $, no spaces);
# a quoted key ("NAME": "value" in JSON/YAML) closes its quote first; a comma that
# ends a JSON/YAML item is not part of the value (one inside it, 0,1,2, is)
_VALUE = re.compile(
    r"""(?P<kq>["']?)[ \t]*(?:=|:(?=[ \t"']|\d))[ \t]*(?P<q>["']?)"""
    r"""(?P<value>[^\s"'$`#{}]*?)(?P=q)(?=\s|$|[;#}\]]|,(?:\s|$))"""
)


def rename_in_line(line: str, rules: RuleSet, ctx: LineContext) -> str:
    """The line piece: known environment variable names in one line renamed (or reported),
    with the literal value set with them converted (NCCL_BUFFSIZE bytes -> HCCL_BUFFSIZE
    MB, NCCL_DEBUG levels -> ASCEND_GLOBAL_LOG_LEVEL numbers)."""
    out, pos = [], 0
    for m in _VAR.finditer(line):
        name = m.group(0)
        if m.start() < pos or rules.env_rule(name) is None:
            continue
        # ${NAME:-default} reads the variable: no value is set here
        before = line[m.start() - 1 : m.start()]
        value = None if before == "{" else _VALUE.match(line, m.end())
        if value and value.group("kq") and value.group("kq") != before:
            value = None  # a closing quote with no opening one: not a key
        literal = value.group("value") if value and value.group("value") else None
        if name == CUDA_VISIBLE_DEVICES and ctx.visible:
            _visible_kept(ctx, m.start() + 1)
            continue
        change = convert_env(rules, name, literal, value_known=literal is not None)
        fixed = change.status is Status.FIXED and change.new_name is not None
        shown = ctx.report(
            change.rule.code, Status.FIXED if fixed else Status.MANUAL, change.message, m.start() + 1, change.fix
        )
        if not (fixed and shown):
            continue
        out += [line[pos : m.start()], change.new_name]
        pos = m.end()
        if change.new_value is not None:
            out += [line[pos : value.start("value")], change.new_value]
            pos = value.end("value")
    out.append(line[pos:])
    return "".join(out)


def _visible_kept(ctx: LineContext, col: int) -> None:
    """CUDA_VISIBLE_DEVICES in a script that sets another accelerator's variable too: CUDA's
    setting of several stays; Ascend's is what is missing (said unless it is there)."""
    if NPU in ctx.visible:
        return
    ascend = next(k for k, v in VISIBLE_DEVICES_ENV.items() if v == NPU)
    others = ", ".join(f"{k} ({v})" for k, v in VISIBLE_DEVICES_ENV.items() if v in ctx.visible)
    ctx.report(
        _KEPT_CODE,
        Status.MANUAL,
        f"{CUDA_VISIBLE_DEVICES} is set beside {others}: each accelerator's visible devices are chosen "
        "here, so CUDA's is left as it is",
        col,
        f"set {ascend} beside it for the NPU (logical ids, npu-smi info lists them)",
    )


FAMILY = Family(
    kinds=(ENV,),
    fields={
        "env": dict,  # by exact name
        "env_families": list,  # (prefix, rule) for NAME_* rules, longest prefix first
    },
    python=lambda ctx, rules, file: [EnvVars(ctx, rules, file.positions.source)],
    lines=rename_in_line,
)
