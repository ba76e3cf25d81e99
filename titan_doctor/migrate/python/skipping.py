"""Which statements of a file the walk can skip without looking inside.

Walking every libcst node costs about as much as parsing the file, and in a CUDA file
most statements mention nothing a rule matches. The stdlib parser (C, ~5x faster than
libcst) gives each statement's line span; a statement whose lines contain no marker word
(the last name of a rule, a literal, an env var) and no local alias of a rule's name
cannot match and is skipped. Imports are never skipped (they bind names), nor are
compound statements that contain imports (try: import x). The same spans resync the
walk's line counter at every simple statement (walk/positions.py).
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from titan_doctor.migrate.rules.kind import PYTHON_CODE
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.walk.astnames import stdlib_tree
from titan_doctor.migrate.walk.positions import Span

_NEVER_SKIP = (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)
_SCOPES = (cst.FunctionDef, cst.ClassDef)


class StatementMap:
    """ast statements in source order, consumed one per libcst statement visited."""

    def __init__(self, tree: ast.Module, data: bytes, rules: RuleSet) -> None:
        self.tree = tree  # also read by gates.py and flows.py: one stdlib parse serves all
        self._spans: list[Span] = []
        _collect(tree.body, self._spans)
        self._next = 0
        self._rules = rules
        self._lines = data.split(b"\n")
        hot = rules.prefilters[PYTHON_CODE].line_re
        self._hot_lines = {i for i, line in enumerate(self._lines, 1) if hot.search(line)}
        self._aliases: list[re.Pattern] = []
        self._all_hot = False

    def take(self) -> Span | None:
        if self._next >= len(self._spans):
            return None
        span = self._spans[self._next]
        self._next += 1
        return span

    def step_over(self, span: Span) -> None:
        self._next += span.inner

    def note_binding(self, local: str, qname: str) -> None:
        """`from torch import cuda as tc`: lines using `tc` can match although they
        spell no marker word (so can `Float8LinearConfig` from torchao.float8)."""
        at_or_below = self._rules.name_rule(qname) is not None or qname in self._rules.implicit_callees
        aliased = local != qname.split(".")[-1]
        if at_or_below or (aliased and qname in self._rules.name_prefixes):
            self._aliases.append(re.compile(rb"(?<![\w.])" + re.escape(local.encode()) + rb"\b"))

    def stop_skipping(self) -> None:
        """`from torch.cuda import *`: any bare name may now be a rule's name."""
        self._all_hot = True

    def skippable(self, node: cst.CSTNode, span: Span) -> bool:
        if self._all_hot or isinstance(node, _NEVER_SKIP):
            return False
        if span.imports and not isinstance(node, _SCOPES):
            return False
        if any(i in self._hot_lines for i in range(span.start, span.end + 1)):
            return False
        if self._aliases:
            text = b"\n".join(self._lines[span.start - 1 : span.end])
            if any(a.search(text) for a in self._aliases):
                return False
        return True


def _children(node: ast.stmt):
    """Nested statement lists in source order (bodies, else, handlers, finally, cases)."""
    for name in ("body", "handlers", "orelse", "finalbody", "cases"):
        for child in getattr(node, name, ()):
            if isinstance(child, ast.stmt):
                yield [child]
            else:  # ExceptHandler / match_case hold statements
                yield child.body


def _collect(stmts: list[ast.stmt], out: list[Span]) -> tuple[int, bool]:
    """Append a Span per statement in pre-order; return (count, any import) for the list."""
    total, imports = 0, False
    for node in stmts:
        index = len(out)
        out.append(None)  # placeholder until the nested statements are known
        inner, nested_imports = 0, False
        for group in _children(node):
            n, imp = _collect(group, out)
            inner += n
            nested_imports = nested_imports or imp
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        out[index] = Span(start, node.end_lineno or node.lineno, inner, nested_imports)
        total += 1 + inner
        imports = imports or nested_imports or isinstance(node, (ast.Import, ast.ImportFrom))
    return total, imports


def statement_map(data: bytes, rules: RuleSet) -> StatementMap | None:
    """None when the stdlib parser disagrees with libcst (newer syntax): walk everything."""
    tree = stdlib_tree(data)
    return StatementMap(tree, data, rules) if tree is not None else None
