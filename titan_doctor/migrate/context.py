"""What the pieces of one rewrite share, and nothing else: the findings (with inline
suppression), the rewrites made under them, and the conditions being walked.

`Context` serves one libcst walk of a Python module (walk/migrator.py); `LineContext` one
line of a script or config (text/lines.py). Everything else a piece needs (the rules, the
scopes, what the pre-walk scans found, another piece's results) is handed to it by its
builder, so a dependency between pieces is visible where they are built.

Imports nothing of the migrate package but the two leaves cstutil and suppress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.cstutil import dotted
from titan_doctor.migrate.suppress import is_suppressed, silences

Binding = tuple[str, bool]  # (qualified name an import binds, bound under an alias?)


@dataclass(frozen=True)
class Hold:
    """Why the CUDA code at a place stays as it is: the code there already runs on more
    than CUDA, or answers for CUDA by name (python/backends.py finds these places). When
    something is missing for NPU there, `message` says it, once, at `anchor` (line, column)
    under `code`; an empty message keeps the place silent (counted, not reported)."""

    anchor: tuple[int, int]
    code: str = ""
    message: str = ""
    fix: str = ""
    codes: frozenset[str] | None = None  # only rewrites under these codes stay (None: all)
    # the place already handles npu: what other findings would say about its CUDA code
    # (a CUDA-only library, a name torch.npu lacks) is CUDA's case, not something missing
    quiet: bool = False
    # the place runs on more than CUDA (not only the body of a kept CUDA check): notes about
    # a rewrite it would need (a name torch.npu lacks, a "cuda" string of unknown use) go
    guarded: bool = False


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
        hold: Callable[[int, int, str], Hold | None] | None = None,
        report_only: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self._report_only = report_only or {}  # code -> why its rewrites are not made (a target)
        self._where, self._lookup = where, lookup
        self._hold = hold  # (line, column, code) -> why a rewrite there stays, or None
        self.kept = 0  # rewrites not made because the code there already runs beyond CUDA
        self._holds_said: set[tuple[int, int, str]] = set()
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

    def where(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, column) of a visited node."""
        return self._where(node)

    def held(self, node: cst.CSTNode, code: str) -> Hold | None:
        """The Hold on `node`'s place, if any (python/backends.py)."""
        return self._hold(*self._where(node), code) if self._hold is not None else None

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
        note: bool = False,
    ) -> bool:
        """Record a finding at `node`. False when a `# titan-doctor: ignore` comment on its
        line suppresses it, or (for a rewrite) when the code there already runs on more
        than CUDA (a Hold): the caller then leaves the code as it is. `rewrite`: the
        caller changes code with this finding (`npu`: the change needs torch_npu); `note`:
        the finding is about a rewrite not made (a missing NPU name, an unknown "cuda")."""
        line, col = self._where(node)
        finding = Finding(code=code, status=status, message=message, fix=fix, path=self.path, line=line, col=col)
        if is_suppressed(self._suppress, line, code):
            self.suppressed.append(finding)
            return False
        if self._hold is not None:
            hold = self._hold(line, col, code)
            if hold is not None and rewrite:
                self.keep(hold)
                return False
            if hold is not None and status is Status.MANUAL and (hold.quiet or (note and not hold.guarded)):
                self.kept += 1
                return True
        if rewrite and code in self._report_only:  # --target portable: reported, not made
            finding = Finding(
                code=code,
                status=Status.MANUAL,
                message=f"{message}: not rewritten, {self._report_only[code]}",
                fix=fix,
                path=self.path,
                line=line,
                col=col,
            )
            self.findings.append(finding)
            self.block(node, message, fix)
            return False
        if status is Status.MANUAL and not rewrite:
            key = (code, line, col, message)
            if key in self._manual_seen:
                return True
            self._manual_seen.add(key)
        self.findings.append(finding)
        if self.trace_findings is not None:
            self.trace_findings.append((len(self.findings) - 1, node))
        if rewrite:
            self._rewrites.append((len(self.findings) - 1, npu))
        return True

    def keep(self, hold: Hold) -> None:
        """A rewrite not made because of `hold`: counted; its place's finding said once."""
        self.kept += 1
        if not hold.message:
            return
        line, col = hold.anchor
        key = (line, col, hold.code)
        if key in self._holds_said:
            return
        self._holds_said.add(key)
        finding = Finding(
            code=hold.code, status=Status.MANUAL, message=hold.message, fix=hold.fix, path=self.path, line=line, col=col
        )
        if is_suppressed(self._suppress, line, hold.code):
            self.suppressed.append(finding)
        else:
            self.findings.append(finding)

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
        """The findings, each site its own (undone rewrites left out)."""
        return [f for i, f in enumerate(self.findings) if i not in self._dead]


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
    report_only: str = ""  # why nothing in this file is rewritten (a CI workflow), if so
    # the accelerators besides CUDA whose visible-devices variable the file sets (words.py):
    # there CUDA_VISIBLE_DEVICES is CUDA's setting of several, left as it is
    visible: frozenset[str] = frozenset()
    report_codes: dict[str, str] | None = None  # code -> why its changes are not made (a target)

    def report(self, code: str, status: Status, message: str, col: int, fix: str) -> bool:
        """Record a finding at `col` of the line; False when it is suppressed, or the file
        is only reported (`report_only`), and the text must stay as it is."""
        only = self.report_only or (self.report_codes or {}).get(code, "")
        if only and status is Status.FIXED:
            status, message = Status.MANUAL, f"{message}: not rewritten, {only}"
        finding = Finding(code=code, status=status, message=message, fix=fix, path=self.path, line=self.line, col=col)
        if silences(self.ignore, code):
            if self.suppressed is not None:
                self.suppressed.append(finding)
            return False
        self.findings.append(finding)
        return not only
