"""The libcst walk that every piece of a Python rewrite shares: one pass over the tree.

`Migrator` dispatches each node to the pieces that have a `visit_<Type>` / `leave_<Type>`
hook (`visit_Statement` / `leave_Statement` for every statement): visits in the order the
pieces are given, leaves in reverse, like nested context managers. A visit hook that
returns False stops the walk below that node (the other visit hooks still run: skipped
statements still bind names); a leave hook that returns another kind of node ends that
node's leaves. So adding behaviour is adding a hook to one piece; the order of the pieces
is the rule kinds' registry (rules/registry.py), after Positions and ScopeTracker.

This package (walk/) knows no rules: it may import context and cstutil only.
"""

from __future__ import annotations

import libcst as cst

from titan_doctor.migrate.context import Context
from titan_doctor.migrate.walk.positions import STATEMENTS
from titan_doctor.migrate.walk.scopes import Scopes


class Migrator(cst.CSTTransformer):
    """Dispatches the walk to `pieces`, in order (see the module docstring). `ctx` is the
    walk's log and `scopes` the import bindings it fed, both read after the walk."""

    def __init__(self, ctx: Context, scopes: Scopes, pieces: list) -> None:
        super().__init__()
        self.ctx, self.scopes = ctx, scopes
        self.pieces = pieces
        self._visits: dict[type, tuple] = {}
        self._leaves: dict[type, tuple] = {}

    def _hooks(self, kind: type) -> tuple[tuple, tuple]:
        name = kind.__name__
        visits, leaves = [], []
        statement = issubclass(kind, STATEMENTS)
        for piece in self.pieces:
            for attr in (f"visit_{name}", "visit_Statement" if statement else None):
                if attr and hasattr(piece, attr):
                    visits.append(getattr(piece, attr))
        for piece in reversed(self.pieces):
            for attr in (f"leave_{name}", "leave_Statement" if statement else None):
                if attr and hasattr(piece, attr):
                    leaves.append(getattr(piece, attr))
        self._visits[kind], self._leaves[kind] = tuple(visits), tuple(leaves)
        return self._visits[kind], self._leaves[kind]

    def on_visit(self, node: cst.CSTNode) -> bool:
        hooks = self._visits.get(type(node))
        if hooks is None:
            hooks = self._hooks(type(node))[0]
        go = True
        for hook in hooks:
            if hook(node) is False:
                go = False  # the others still run: skipped statements still bind names
        return go

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        kind = type(original)
        hooks = self._leaves.get(kind)
        if hooks is None:
            hooks = self._hooks(kind)[1]
        for hook in hooks:
            updated = hook(original, updated)
            if type(updated) is not kind:
                break  # replaced by another kind of node (or a FlattenSentinel): done
        return updated

    def on_visit_attribute(self, node, attribute) -> None:
        """No per-field hooks are used: skip libcst's lookup for them (a third of a walk)."""

    def on_leave_attribute(self, original_node, attribute) -> None:
        pass
