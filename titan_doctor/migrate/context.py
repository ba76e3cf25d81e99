"""What the pieces of one rewrite share, and nothing else: the findings (with inline
suppression), the rewrites made under them, and the conditions being walked.

`Context` serves one libcst walk of a Python module (walk/migrator.py); `LineContext` one
line of a script or config (text/lines.py). Everything else a piece needs (the rules, the
scopes, what the pre-walk scans found, another piece's results) is handed to it by its
builder, so a dependency between pieces is visible where they are built.

Imports nothing of the migrate package but the two leaves cstutil and suppress.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.cstutil import dotted
from titan_doctor.migrate.suppress import is_suppressed, silences

Binding = tuple[str, bool]  # (qualified name an import binds, bound under an alias?)


@dataclass
class Group:
    """A condition being walked: rewrites inside it stand or fall together."""

    node: cst.CSTNode
    first_rewrite: int
    blocked: list[tuple[str, str, cst.CSTNode]] = field(default_factory=list)  # what stays CUDA, fix, where


class Context:
    """The log of one walk: findings, the rewrites made with them, open condition groups,
    and which nodes are no references (`inner`) or already rewritten (`touched`).

    `where(node)` gives a visited node's (line, column) and `lookup(name)` the import
    binding visible for a root name; both come from the walk (walk/positions.py,
    walk/scopes.py)."""

    def __init__(
        self,
        path: str,
        where: Callable[[cst.CSTNode], tuple[int, int]],
        lookup: Callable[[str], Binding | None],
        suppressed_lines: dict[int, frozenset[str]] | None = None,
        trace: bool = False,
    ) -> None:
        self.path = path
        self._where, self._lookup = where, lookup
        self.inner: set[int] = set()  # names that are not references (def names, keywords)
        self.touched: set[int] = set()  # original nodes a piece has rewritten
        self.in_import = 0  # inside an import statement
        self.findings: list[Finding] = []
        self.suppressed: list[Finding] = []
        self.groups: list[Group] = []
        self._suppress = suppressed_lines or {}
        self._rewrites: list[tuple[int, bool]] = []  # (finding index, needs torch_npu)
        self._dead: set[int] = set()  # finding indices of undone rewrites
        self._manual_seen: set[tuple] = set()
        self._report_uses: dict[str, list[int]] = {}
        # for tests/migrate/test_differential.py: (finding index, node) and (node, qname)
        self.trace_findings: list[tuple[int, cst.CSTNode]] | None = [] if trace else None
        self.trace_names: list[tuple[cst.CSTNode, str]] | None = [] if trace else None

    # -- names ------------------------------------------------------------------------------
    def qname(self, node: cst.CSTNode) -> str | None:
        """The qualified name a Name-rooted chain stands for, through its import binding."""
        spelled = dotted(node)
        if spelled is None:
            return None
        binding = self._lookup(spelled[0])
        if binding is None:
            return None
        q = ".".join([binding[0], *spelled[1:]])
        if self.trace_names is not None:
            self.trace_names.append((node, q))
        return q

    # -- findings ---------------------------------------------------------------------------
    def emit(
        self,
        code: str,
        status: Status,
        node: cst.CSTNode,
        message: str,
        fix: str = "",
        *,
        rewrite: bool = False,
        npu: bool = True,
    ) -> bool:
        """Record a finding at `node`. False when a `# titan-doctor: ignore` comment on its
        line suppresses it: the caller then leaves the code as it is. `rewrite`: the
        caller changes code with this finding (`npu`: the change needs torch_npu)."""
        line, col = self._where(node)
        finding = Finding(code=code, status=status, message=message, fix=fix, path=self.path, line=line, col=col)
        if is_suppressed(self._suppress, line, code):
            self.suppressed.append(finding)
            return False
        if status is Status.MANUAL and not rewrite:
            key = (code, line, message)
            if key in self._manual_seen:
                return True
            self._manual_seen.add(key)
        self.findings.append(finding)
        if self.trace_findings is not None:
            self.trace_findings.append((len(self.findings) - 1, node))
        if rewrite:
            self._rewrites.append((len(self.findings) - 1, npu))
        return True

    def report_once(self, key: str, code: str, node: cst.CSTNode, message: str, fix: str) -> None:
        """A report rule speaks once per file (at its first use), counting the rest:
        a Triton kernel file is one job for a person, not four hundred."""
        if key in self._report_uses:
            self._report_uses[key][1] += 1
            return
        if self.emit(code, Status.MANUAL, node, message, fix):
            self._report_uses[key] = [len(self.findings) - 1, 0]

    # -- groups: rewrites that stand or fall together ---------------------------------------
    def block(self, node: cst.CSTNode, what: str, fix: str) -> None:
        """Something CUDA-only stays in the condition being walked (if any)."""
        if self.groups:
            self.groups[0].blocked.append((what, fix, node))

    def open_group(self, node: cst.CSTNode) -> None:
        self.groups.append(Group(node, len(self._rewrites)))

    def closes_group(self, node: cst.CSTNode) -> bool:
        """True when `node` is the outermost open group's node (its leave ends the group)."""
        return bool(self.groups) and self.groups[0].node is node

    def close_group(self) -> tuple[Group, bool]:
        """(the group, True when its rewrites were undone because something in it stays
        CUDA-only)."""
        group = self.groups.pop()
        undone = self._rewrites[group.first_rewrite :]
        if not (group.blocked and undone):
            return group, False
        self._dead.update(i for i, _ in undone)
        del self._rewrites[group.first_rewrite :]
        return group, True

    def undo(self, index: int) -> None:
        """Take back the rewrite recorded with finding `index` (the caller restores the code)."""
        self._dead.add(index)
        self._rewrites = [r for r in self._rewrites if r[0] != index]

    @property
    def changed(self) -> bool:
        return bool(self._rewrites)

    @property
    def needs_npu(self) -> bool:
        return any(npu for _, npu in self._rewrites)

    def finish(self) -> list[Finding]:
        """The findings, with "(+N more in this file)" on report rules that fired again."""
        out = list(self.findings)
        for index, more in self._report_uses.values():
            if more:
                f = out[index]
                out[index] = dataclasses.replace(f, message=f"{f.message} (+{more} more in this file)")
        return [f for i, f in enumerate(out) if i not in self._dead]


@dataclass
class LineContext:
    """Where one script line's findings go: `findings`, or `suppressed` when the line's
    `# titan-doctor: ignore[...]` comment (`ignore`: the codes it names) covers the code,
    and the change is then not made."""

    path: str
    line: int
    findings: list[Finding]
    ignore: frozenset[str] | None
    suppressed: list[Finding] | None

    def report(self, code: str, status: Status, message: str, col: int, fix: str) -> bool:
        """Record a finding at `col` of the line; False when it is suppressed and the text
        must stay as it is."""
        finding = Finding(code=code, status=status, message=message, fix=fix, path=self.path, line=self.line, col=col)
        if silences(self.ignore, code):
            if self.suppressed is not None:
                self.suppressed.append(finding)
            return False
        self.findings.append(finding)
        return True
