"""CUDA compute-capability checks are never rewritten (`capability` rules).

`torch.cuda.get_device_capability() >= (8, 0)` and `torch.cuda.get_device_properties(0).major
>= 8` decide something (bf16, a flash kernel, TF32) by the CUDA architecture number.
torch_npu answers both with None, so renaming the call gives code that raises TypeError
on Ascend (or, with TORCH_NPU_DEVICE_CAPABILITY set, compares a stand-in value). Before the
names under it are rewritten, this piece marks the calls whose result is read as a
capability: directly (`get_device_properties(0).major`) or through a name the result is
bound to when the file reads that name's capability attribute (`props = ...` then
`props.major`; matched by name in the file's text, which errs towards a report). names.py
leaves those calls and reports them; a condition holding one is left whole (NPU111).
"""
from __future__ import annotations

import re

import libcst as cst

from titan_doctor.migrate.transform import Context


def readers(source: str, attrs: frozenset[str]) -> dict[str, str]:
    """name -> the capability attribute the file reads from it (`props.major`); the key
    ")" stands for a read straight off a call (`get_device_properties(0).major`)."""
    if not attrs or not any(a in source for a in attrs):
        return {}
    found = re.finditer(r"(\b[A-Za-z_]\w*|\))\s*\.\s*(" + "|".join(map(re.escape, sorted(attrs)))
                        + r")\b", source)
    return {m.group(1): m.group(2) for m in found}


def read_through(source: str, callee: str, readers_: dict[str, str], attrs: frozenset[str]) -> bool:
    """Does the file read a capability attribute off the result of calls spelled by the
    regex `callee` (an imported name, `tc.get_device_properties`): straight off the call,
    or through a name it is bound to that the file reads one from? Used for the import
    bindings, which are rewritten before their uses are seen."""
    if not readers_:
        return False
    words = "|".join(map(re.escape, sorted(attrs)))
    call = rf"(?<![\w.]){callee}\s*\((?:[^()]|\([^()]*\))*\)"
    if re.search(call + rf"\s*\)?\s*\.\s*(?:{words})\b", source):
        return True
    return any(m.group(1) in readers_ for m in
               re.finditer(rf"([A-Za-z_]\w*)\s*(?::=|=)\s*{callee}\s*\(", source))


class Capabilities:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.attrs = frozenset(a for r in ctx.rules.capabilities.values() for a in r.attrs)
        ctx.capability_readers = readers("\n".join(ctx.positions.source_lines), self.attrs)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        value = node.value
        if isinstance(value, cst.NamedExpr):   # (p := get_device_properties(0)).major
            value = value.value
        if node.attr.value in self.attrs and isinstance(value, cst.Call):
            self.ctx.capability_reads[id(value.func)] = "." + node.attr.value

    def _bound(self, target: cst.CSTNode, value: cst.CSTNode | None) -> None:
        if not isinstance(value, cst.Call) or not self.ctx.capability_readers:
            return
        name = target.value if isinstance(target, cst.Name) else (
            target.attr.value if isinstance(target, cst.Attribute) else None)
        attr = self.ctx.capability_readers.get(name) if name else None
        if attr is not None:
            self.ctx.capability_reads[id(value.func)] = f"{name}.{attr}"

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._bound(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bound(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bound(node.target, node.value)
