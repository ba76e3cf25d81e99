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

from titan_doctor.migrate.python.transform import Context


def readers(source: str, attrs: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """name -> the capability attributes the file reads from it (`props.major`); the key
    ")" stands for a read straight off a call (`get_device_properties(0).major`)."""
    if not attrs or not any(a in source for a in attrs):
        return {}
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"(\b[A-Za-z_]\w*|\))\s*\.\s*(" + "|".join(map(re.escape, sorted(attrs)))
                         + r")\b", source):
        found.setdefault(m.group(1), set()).add(m.group(2))
    return {name: tuple(sorted(read)) for name, read in found.items()}


def read_through(source: str, callee: str, readers_: dict[str, tuple[str, ...]],
                 attrs: frozenset[str]) -> bool:
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


def piece(ctx: Context) -> "Capabilities | None":
    """The walk's piece for this file, or None when the file reads no capability
    attribute at all (most files: the walk then pays nothing for this class)."""
    attrs = frozenset(a for r in ctx.rules.capabilities.values() for a in r.attrs)
    ctx.capability_readers = readers(ctx.positions.source, attrs)
    return Capabilities(ctx, attrs) if ctx.capability_readers else None


class Capabilities:
    def __init__(self, ctx: Context, attrs: frozenset[str]) -> None:
        self.ctx = ctx
        self.attrs = attrs

    # The expression that reads a capability is a group (transform.Group): when names.py
    # keeps the call, rewrites inside it (`get_device_properties("cuda")`) go back too.
    def _hold(self, call: cst.Call, how: str, whole: cst.CSTNode) -> None:
        self.ctx.capability_reads[id(call.func)] = how
        if not self.ctx.groups and not self.ctx.positions.skipping(whole):
            self.ctx.open_group(whole)

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        groups = self.ctx.groups
        if groups and groups[0].node is original:
            _, undone = self.ctx.close_group()
            return original if undone else updated
        return updated

    leave_Attribute = leave_Call = _leave

    def visit_Attribute(self, node: cst.Attribute) -> None:
        value = node.value
        if isinstance(value, cst.NamedExpr):   # (p := get_device_properties(0)).major
            value = value.value
        if node.attr.value in self.attrs and isinstance(value, cst.Call):
            self._hold(value, "." + node.attr.value, node)

    def _bound(self, target: cst.CSTNode, value: cst.CSTNode | None) -> None:
        if not isinstance(value, cst.Call) or not self.ctx.capability_readers:
            return
        name = target.value if isinstance(target, cst.Name) else (
            target.attr.value if isinstance(target, cst.Attribute) else None)
        read = self.ctx.capability_readers.get(name) if name else None
        if read:
            self._hold(value, "/".join(f"{name}.{a}" for a in read), value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._bound(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bound(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bound(node.target, node.value)
