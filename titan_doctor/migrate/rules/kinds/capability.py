"""CUDA compute-capability checks are never rewritten (`capability` rules).

`torch.cuda.get_device_capability() >= (8, 0)` and `torch.cuda.get_device_properties(0).major
>= 8` decide something (bf16, a flash kernel, TF32) by the CUDA architecture number.
torch_npu answers both with None, so renaming the call gives code that raises TypeError
on Ascend (or, with TORCH_NPU_DEVICE_CAPABILITY set, compares a stand-in value). Before the
names under it are rewritten, this piece marks the calls whose result is read as a
capability: directly (`get_device_properties(0).major`) or through a name the result is
bound to when the file reads that name's capability attribute (`props = ...` then
`props.major`; matched by name in the file's text, which errs towards a report). The names
piece (names.py; this kind belongs to the names family) is handed these
marks, leaves those calls and reports them; a condition holding one is left whole (NPU111).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from titan_doctor.migrate.context import Context
from titan_doctor.migrate.rules.kind import Example, Kind, Rule, fill, name_line, name_words
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.walk.positions import Positions


@dataclass(frozen=True, kw_only=True)
class Capability(Rule):
    """A CUDA compute-capability (or other hardware property) check, never rewritten and
    reported at each use: the call `match` itself when `attrs` is empty
    (torch.cuda.get_device_capability: its result is the capability), else those
    attributes read from its result (`get_device_properties(0).major`,
    `.multi_processor_count`), directly or through a name the result is bound to
    (`props = ...; props.major`). torch_npu answers these with None (or a configured
    stand-in), so a comparison raises or lies on Ascend and only a person knows what the
    check was for: `fix` names what to ask instead. The expression or condition holding
    one is left whole (a condition with NPU111). Other uses of the call (`.name`,
    `.total_memory`) are rewritten as usual."""

    match: str
    attrs: tuple[str, ...] = ()


@dataclass
class CapabilityReads:
    """How one file reads capabilities: `readers` from its text before the walk, `calls`
    marked by the Capabilities piece during it (id(call func) -> how its result is read,
    ".major" or "props.major")."""

    attrs: frozenset[str]
    readers: dict[str, tuple[str, ...]]
    calls: dict[int, str] = field(default_factory=dict)

    @classmethod
    def scan(cls, source: str, rules: RuleSet) -> CapabilityReads:
        attrs = frozenset(a for r in rules.capabilities.values() for a in r.attrs)
        return cls(attrs, readers(source, attrs))

    def through(self, source: str, callee: str, attrs: frozenset[str]) -> bool:
        """Does the file read a capability attribute off the result of calls spelled by
        the regex `callee` (an imported name, `tc.get_device_properties`): straight off
        the call, or through a name it is bound to that the file reads one from? Asked for
        the import bindings, which are rewritten before their uses are seen."""
        if not self.readers:
            return False
        words = "|".join(map(re.escape, sorted(attrs)))
        call = rf"(?<![\w.]){callee}\s*\((?:[^()]|\([^()]*\))*\)"
        if re.search(call + rf"\s*\)?\s*\.\s*(?:{words})\b", source):
            return True
        return any(
            m.group(1) in self.readers for m in re.finditer(rf"([A-Za-z_]\w*)\s*(?::=|=)\s*{callee}\s*\(", source)
        )


def readers(source: str, attrs: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """name -> the capability attributes the file reads from it (`props.major`); the key
    ")" stands for a read straight off a call (`get_device_properties(0).major`)."""
    if not attrs or not any(a in source for a in attrs):
        return {}
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"(\b[A-Za-z_]\w*|\))\s*\.\s*(" + "|".join(map(re.escape, sorted(attrs))) + r")\b", source):
        found.setdefault(m.group(1), set()).add(m.group(2))
    return {name: tuple(sorted(read)) for name, read in found.items()}


class Capabilities:
    """The piece that marks, in pre-order, each call whose result is read as a capability
    (into `reads.calls`, which the names piece reads as it leaves the call)."""

    def __init__(self, ctx: Context, reads: CapabilityReads, positions: Positions) -> None:
        self.ctx, self.reads, self.positions = ctx, reads, positions
        self.attrs = reads.attrs

    # The expression that reads a capability is a group (context.Group): when names.py
    # keeps the call, rewrites inside it (`get_device_properties("cuda")`) go back too.
    def _hold(self, call: cst.Call, how: str, whole: cst.CSTNode) -> None:
        self.reads.calls[id(call.func)] = how
        if not self.ctx.groups and not self.positions.skipping(whole):
            self.ctx.open_group(whole)

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        if self.ctx.closes_group(original):
            _, undone = self.ctx.close_group()
            return original if undone else updated
        return updated

    leave_Attribute = leave_Call = _leave

    def visit_Attribute(self, node: cst.Attribute) -> None:
        value = node.value
        if isinstance(value, cst.NamedExpr):  # (p := get_device_properties(0)).major
            value = value.value
        if node.attr.value in self.attrs and isinstance(value, cst.Call):
            self._hold(value, "." + node.attr.value, node)

    def _bound(self, target: cst.CSTNode, value: cst.CSTNode | None) -> None:
        if not isinstance(value, cst.Call):
            return
        name = (
            target.value
            if isinstance(target, cst.Name)
            else (target.attr.value if isinstance(target, cst.Attribute) else None)
        )
        read = self.reads.readers.get(name) if name else None
        if read:
            self._hold(value, "/".join(f"{name}.{a}" for a in read), value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._bound(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bound(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bound(node.target, node.value)


def _index(rules: RuleSet, rule: Capability) -> None:
    rules.capabilities[rule.match] = rule


KIND = Kind(
    "capability",
    Capability,
    _index,
    markers=lambda r: name_words(r.match),
    line=lambda r: name_line(r.match),
    describe=lambda r: fill(r.message, old=r.match, new="", version="").strip(),
    valid=(
        Example(
            "import torch\n\nname = torch.cuda.get_device_properties(0).name\n",
            fixed="import torch\n\nname = torch.npu.get_device_properties(0).name\n",
        ),
    ),
    invalid=(
        Example("import torch\n\nif torch.cuda.get_device_capability() >= (8, 0):\n    use_bf16()\n"),
        Example("import torch\n\nprops = torch.cuda.get_device_properties(0)\nbig = props.major >= 8\n"),
    ),
)
