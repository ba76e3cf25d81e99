"""Conditions are rewritten whole or not at all (NPU111).

`torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)`: rewriting
only the first call gives code that passes its first test on an NPU and crashes (or lies)
on the second. So every condition (the test of an if/elif/while/assert, and any outermost
boolean, comparison, `not` or conditional expression) is a group: when something in it
stays CUDA-only (a reported name, a torch.cuda name torch.npu lacks), the rewrites made
inside it are undone and one finding says why (the `mixed_condition` rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context
from titan_doctor.migrate.rules.kind import Example, Family, Kind, PythonFile, Rule, fill, set_field
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.walk.positions import Positions

_SHOWN = 80


@dataclass(frozen=True, kw_only=True)
class MixedCondition(Rule):
    """A condition that mixes a rewritable CUDA call with a CUDA-only one is left whole."""


class Conditions:
    """The piece: opens a group at each condition, closes it where the condition ends."""

    def __init__(self, ctx: Context, rule: MixedCondition | None, positions: Positions) -> None:
        self.ctx, self.rule, self.positions = ctx, rule, positions
        self._bodies: dict[int, cst.If | cst.While] = {}  # id(body) -> its if/while
        self._undo: set[int] = set()  # if/while whose test goes back

    def _can_open(self, node: cst.CSTNode) -> bool:
        return self.rule is not None and not self.ctx.groups and not self.positions.skipping(node)

    # if/elif/while: the test is the group; it ends where the body starts
    def visit_If(self, node: cst.If | cst.While) -> None:
        if self._can_open(node):
            self.ctx.open_group(node.test)
            self._bodies[id(node.body)] = node

    visit_While = visit_If

    def _body(self, node: cst.CSTNode) -> None:
        owner = self._bodies.pop(id(node), None)
        if owner is not None and self.ctx.closes_group(owner.test):
            if self._close():
                self._undo.add(id(owner))

    visit_IndentedBlock = visit_SimpleStatementSuite = _body

    def leave_If(self, original: cst.If | cst.While, updated: cst.If | cst.While):
        if id(original) in self._undo:
            self._undo.discard(id(original))
            return updated.with_changes(test=original.test)
        return updated

    leave_While = leave_If

    # assert, and an outermost boolean / comparison / not / conditional expression
    def _open(self, node: cst.CSTNode) -> None:
        if self._can_open(node):
            self.ctx.open_group(node)

    visit_Assert = visit_BooleanOperation = visit_Comparison = visit_IfExp = _open

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Not):
            self._open(node)

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        if self.ctx.closes_group(original):
            return original if self._close() else updated
        return updated

    leave_Assert = leave_BooleanOperation = leave_Comparison = leave_IfExp = _leave
    leave_UnaryOperation = _leave

    def _close(self) -> bool:
        """End the open group; True when its rewrites were undone (and reported)."""
        group, undone = self.ctx.close_group()
        if not undone:
            return False
        what, fix, node = group.blocked[0]
        shown = cst.Module([]).code_for_node(group.node).strip().replace("\n", " ")
        if len(shown) > _SHOWN:
            shown = shown[: _SHOWN - 3] + "..."
        self.ctx.emit(
            self.rule.code,
            Status.MANUAL,
            node,
            fill(self.rule.message, old=shown, new=what),
            f"{self.rule.fix}; {fix}" if fix else self.rule.fix,
        )
        return True


def _pieces(ctx: Context, rules: RuleSet, file: PythonFile) -> list:
    return [Conditions(ctx, rules.mixed_condition, file.positions)]


MIXED_CONDITION = Kind(
    "mixed_condition",
    MixedCondition,
    set_field("mixed_condition"),
    valid=(
        Example(
            "import torch\n\nif torch.cuda.is_available() and torch.cuda.device_count() > 1:\n    pass\n",
            fixed="import torch\n\nif torch.npu.is_available() and torch.npu.device_count() > 1:\n    pass\n",
        ),
    ),
    invalid=(
        Example(
            "import torch\n\nif torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8:\n    pass\n"
        ),
    ),
)

FAMILY = Family(
    kinds=(MIXED_CONDITION,),
    fields={"mixed_condition": lambda: None},
    python=_pieces,
)
