"""Method rules (`kind = "method"`): `.cuda()` -> `.npu()` and `.is_cuda` -> `.is_npu` on
any object that is not the torch module itself (`torch.cuda` is a module, handled by the
names family). --target portable (rules/portable.py): `.cuda()` -> `.to(<the current
accelerator's type>)`, only with no device argument (`.cuda(rank)` is reported)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context
from titan_doctor.migrate.cstutil import dotted
from titan_doctor.migrate.rules.kind import Example, Family, Kind, PythonFile, Rule, fill
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import NPU_PACKAGE


@dataclass(frozen=True, kw_only=True)
class Method(Rule):
    """.old() / .old -> .new on any object (call = true: only when called)."""

    old: str
    new: str
    call: bool = False


class Methods:
    """The piece: renames the attribute where a method rule names it."""

    def __init__(self, ctx: Context, rules: RuleSet, file: PythonFile) -> None:
        self.ctx, self.rules = ctx, rules
        self._kernel_check = file.kernel_gate
        self._called: dict[int, cst.Call] = {}  # attribute nodes that are the func of a call
        self._scopes = file.scopes
        self._to: dict[int, cst.BaseExpression] = {}  # id(call) -> portable .to() device
        gate = rules.kernel_gate
        self._gates = {g[1:] for g in gate.gates if g.startswith(".")} if gate else set()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute):
            self._called[id(node.func)] = node

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        ctx = self.ctx
        if id(original) in ctx.inner or id(original) in ctx.touched or ctx.in_import:
            return updated
        rule = self.rules.methods.get(original.attr.value)
        if rule is None or (rule.call and id(original) not in self._called):
            return updated
        if dotted(original) is not None:
            q = ctx.qname(original)
            if q is not None and q.split(".")[0] in ("torch", NPU_PACKAGE):
                return updated  # torch.cuda itself, not a tensor/module method
        if rule.old in self._gates and self._kernel_check(original.attr, "." + rule.old):
            return updated
        if rule.call and self.rules.portable_exprs:
            return self._portable(rule, original, updated)
        msg = fill(rule.message, old=rule.old, new=rule.new, version=self.rules.npu_version)
        if not ctx.emit(rule.code, Status.FIXED, original.attr, msg, rule.fix, rewrite=True):
            return updated
        return updated.with_changes(attr=cst.Name(rule.new))

    def _portable(self, rule: Method, original: cst.Attribute, updated: cst.Attribute):
        """.cuda() -> .to(<device type>); the call's leave adds the argument."""
        call = self._called[id(original)]
        torch = self._scopes.torch_alias
        why = ""
        if any(a.keyword is None or a.keyword.value == "device" for a in call.args):
            why = f".{rule.old}(...) names a device index (--target portable rewrites .{rule.old}() only)"
        elif torch is None:
            why = "no torch binding here"
        if why:
            msg = f".{rule.old}(...): not rewritten, {why}"
            self.ctx.emit(rule.code, Status.MANUAL, original.attr, msg, rule.fix, note=True)
            return updated
        text = self.rules.portable_text("device", torch)
        msg = f".{rule.old}() -> .to({text})"
        if not self.ctx.emit(rule.code, Status.FIXED, original.attr, msg, rule.fix, rewrite=True):
            return updated
        self._to[id(call)] = cst.parse_expression(text)
        return updated.with_changes(attr=cst.Name("to"))

    def leave_Call(self, original: cst.Call, updated: cst.Call):
        device = self._to.pop(id(original), None)
        if device is None:
            return updated
        first = cst.Arg(
            device,
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if updated.args else cst.MaybeSentinel.DEFAULT,
        )
        return updated.with_changes(args=[first, *updated.args])


def _index(rules: RuleSet, rule: Method) -> None:
    rules.methods[rule.old] = rule


METHOD = Kind(
    "method",
    Method,
    _index,
    markers=lambda r: (r.old,),
    valid=(
        Example("y = x.cpu()\n"),
        Example(
            "import torch\n\nok = torch.cuda.is_available()\n",  # a module, not a method
            fixed="import torch\n\nok = torch.npu.is_available()\n",
        ),
    ),
    invalid=(
        Example("y = model.cuda()\n", fixed="y = model.npu()\n"),
        Example("on_gpu = t.is_cuda\n", fixed="on_gpu = t.is_npu\n"),
    ),
)

FAMILY = Family(
    kinds=(METHOD,),
    fields={"methods": dict},  # by the method's name
    python=lambda ctx, rules, file: [Methods(ctx, rules, file)],
)
