"""Method rules (`kind = "method"`): `.cuda()` -> `.npu()` and `.is_cuda` -> `.is_npu` on
any object that is not the torch module itself (`torch.cuda` is a module, handled by the
names family)."""

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
        self._called: set[int] = set()  # attribute nodes that are the func of a call
        gate = rules.kernel_gate
        self._gates = {g[1:] for g in gate.gates if g.startswith(".")} if gate else set()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute):
            self._called.add(id(node.func))

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
        msg = fill(rule.message, old=rule.old, new=rule.new, version=self.rules.npu_version)
        if not ctx.emit(rule.code, Status.FIXED, original.attr, msg, rule.fix, rewrite=True):
            return updated
        return updated.with_changes(attr=cst.Name(rule.new))


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
