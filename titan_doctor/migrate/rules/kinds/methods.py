"""Method rules: `.cuda()` -> `.npu()` and `.is_cuda` -> `.is_npu` on any object that is not
the torch module itself (`torch.cuda` is a module, handled by names.py)."""
from __future__ import annotations

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.cstutil import dotted
from titan_doctor.migrate.rules.kind import fill
from titan_doctor.migrate.python.transform import Context


class Methods:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rules = ctx.rules
        self._called: set[int] = set()   # attribute nodes that are the func of a call
        gate = ctx.rules.kernel_gate
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
            if q is not None and q.split(".")[0] in ("torch", "torch_npu"):
                return updated  # torch.cuda itself, not a tensor/module method
        if rule.old in self._gates and ctx.kernel_gate(original.attr, "." + rule.old):
            return updated
        msg = fill(rule.message, old=rule.old, new=rule.new, version=self.rules.npu_version)
        if not ctx.emit(rule.code, Status.FIXED, original.attr, msg, rule.fix, rewrite=True):
            return updated
        return updated.with_changes(attr=cst.Name(rule.new))
