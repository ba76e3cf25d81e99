"""Line and column of a node, tracked during the walk itself.

libcst's PositionProvider computes every node's range up front with a codegen pass, which
costs about a parse; we need positions only for the few nodes that get a finding. So the
walk counts Newline tokens (and newlines inside whitespace and strings) as it passes them,
records the line where each nameable node starts, and finds the column by looking for the
node's text on that line. When statements are skipped (python/skipping.py) the line counter is
resynced from the stdlib parser's spans. tests/migrate/test_differential.py checks every
finding against PositionProvider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from titan_doctor.migrate.cstutil import dotted, full_name

STATEMENTS = (cst.BaseSmallStatement, cst.BaseCompoundStatement)


@dataclass(frozen=True)
class Span:
    """One statement as the stdlib parser sees it."""

    start: int  # first line, decorators included
    end: int  # last line
    inner: int  # statements nested inside (to step over when skipped)
    imports: bool  # an import is nested inside


class Statements(Protocol):
    """The statement map Positions walks along (python/skipping.py builds it from the
    rules): spans in source order, and which statements no rule can match inside."""

    def take(self) -> Span | None: ...
    def skippable(self, node: cst.CSTNode, span: Span) -> bool: ...
    def step_over(self, span: Span) -> None: ...
    def note_binding(self, local: str, qname: str) -> None: ...
    def stop_skipping(self) -> None: ...


class Positions:
    """The first piece of the walk (walk/migrator.py): keeps `line` current, holds the
    source text, and skips the statements the statement map says no rule can match."""

    def __init__(self, source: str, statements: Statements | None) -> None:
        self.line = 1
        self.source = source
        self.source_lines = source.splitlines()
        self._map = statements
        self._lines: dict[int, int] = {}  # id(node) -> line where it starts
        self._cols: dict[int, int] = {}  # line -> where the last column search ended
        self._skipped: dict[int, tuple[Span, bool]] = {}

    # -- counting ---------------------------------------------------------------------------
    def visit_Newline(self, node: cst.Newline) -> None:
        self.line += 1

    def visit_SimpleWhitespace(self, node: cst.SimpleWhitespace) -> None:
        if "\n" in node.value:  # backslash continuations
            self.line += node.value.count("\n")

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        if "\n" in node.value:
            self.line += node.value.count("\n")

    def _note(self, node: cst.CSTNode) -> None:
        self._lines[id(node)] = self.line

    visit_Name = visit_Attribute = visit_FormattedString = visit_ImportAlias = _note

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self._lines[id(node)] = self.line
        if "\n" in node.value:  # triple-quoted strings
            self.line += node.value.count("\n")

    # -- statement skipping -----------------------------------------------------------------
    def visit_Statement(self, node: cst.CSTNode) -> bool | None:
        """Resync the line at each statement; skip statements no rule can match inside."""
        if self._map is None:
            return None
        span = self._map.take()
        if span is None:
            return None
        small = isinstance(node, cst.BaseSmallStatement)
        if small:
            self.line = span.start
        if self._map.skippable(node, span):
            self._map.step_over(span)
            self._skipped[id(node)] = (span, small)
            return False
        return None

    def leave_Statement(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        skipped = self._skipped.pop(id(original), None)
        if skipped is not None:
            span, small = skipped
            self.line = span.end if small else span.end + 1
        return updated

    def skipping(self, node: cst.CSTNode) -> bool:
        """True while `node` is a statement being stepped over (its children are not walked)."""
        return id(node) in self._skipped

    def note_binding(self, local: str, qname: str) -> None:
        if self._map is not None:
            self._map.note_binding(local, qname)

    def stop_skipping(self) -> None:
        if self._map is not None:
            self._map.stop_skipping()

    # -- where a node is --------------------------------------------------------------------
    def line_of(self, node: cst.CSTNode) -> int:
        return self._lines.get(id(node), self.line)

    def of(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, column), both 1-based, of a node this walk has visited."""
        line = self._lines.get(id(node), self.line)
        text = _anchor(node)
        src = self.source_lines[line - 1] if 0 < line <= len(self.source_lines) else ""
        start = self._cols.get(line, 0)
        col = src.find(text, start) if text else -1
        if col < 0 and text:
            col = src.find(text)
        if col < 0 and isinstance(node, cst.Attribute) and "." in text:
            text = text.split(".")[0]  # a chain split over lines: its root starts it
            col = src.find(text, start)
        if col >= 0:
            self._cols[line] = col + 1
            col += text.startswith(".")
        return line, max(col, 0) + 1


def _anchor(node: cst.CSTNode) -> str:
    """Text to look for on the node's line to find its column."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        parts = dotted(node)
        return ".".join(parts) if parts else ("." + node.attr.value if isinstance(node, cst.Attribute) else "")
    if isinstance(node, cst.SimpleString):
        return node.value.split("\n")[0]
    if isinstance(node, cst.FormattedString):
        return node.start
    if isinstance(node, cst.ImportAlias):
        return full_name(node.name)
    return ""
