"""The libcst walk that rewrites one parsed module by the rules, collecting findings.

One pass over the tree, shared by small pieces that each do one job:

    Positions      positions.py   line counting, statement skipping, columns
    ScopeTracker   scopes.py      import bindings per scope (what a name stands for)
    Conditions     conditions.py  conditions are rewritten whole or not at all (NPU111)
    EnvVars        envvars.py     environment variable names and their values
    Literals       literals.py    device/backend strings where they are provably one
    Methods        methods.py     .cuda() / .is_cuda on any object
    Capabilities   capability.py  calls read as a CUDA compute capability (never rewritten)
    Names          names.py       torch.cuda.* and friends, through import bindings; imports

`Migrator` dispatches each node to the pieces that have a `visit_<Type>` / `leave_<Type>`
hook (visits in the order above, leaves in reverse, like nested context managers), so
adding behaviour is adding a hook to one piece. `Context` is what the pieces share: the
rules, where each node is, what each name means, and the findings, with every rewrite
logged so a condition can be put back whole and `import torch_npu` is added only when a
kept rewrite needs it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.cstutil import dotted
from titan_doctor.migrate.walk.positions import STATEMENTS, Positions
from titan_doctor.migrate.rules.kind import fill
from titan_doctor.migrate.rules.load import RuleSet
from titan_doctor.migrate.walk.scopes import Scopes, ScopeTracker
from titan_doctor.migrate.python.skipping import StatementMap
from titan_doctor.migrate.suppress import is_suppressed


@dataclass
class Group:
    """A condition being walked: rewrites inside it stand or fall together."""

    node: cst.CSTNode
    first_rewrite: int
    blocked: list[tuple[str, str, cst.CSTNode]] = field(default_factory=list)  # what stays CUDA, fix, where


class Context:
    """What the pieces of one walk share."""

    def __init__(self, rules: RuleSet, path: str, source: str,
                 statements: StatementMap | None = None,
                 suppressed_lines: dict[int, frozenset[str]] | None = None,
                 kernel_lines: dict[int, tuple[str, str]] | None = None, trace: bool = False,
                 device_names: frozenset[str] = frozenset()) -> None:
        self.rules, self.path = rules, path
        self.device_names = device_names      # variables that carry a device string (flows.py)
        self.scopes = Scopes()
        self.positions = Positions(source, statements)
        self.inner: set[int] = set()        # names that are not references (def names, keywords)
        self.touched: set[int] = set()      # original nodes a piece has rewritten
        self.in_import = 0                  # inside an import statement (names.py counts)
        self.kernel_lines = kernel_lines or {}   # line -> (CUDA-only kernel, NPU alternative)
        # capability.py: id(call func) -> how its result is read as a CUDA capability
        # (".major", "props.major"), and the names the file reads a capability from
        self.capability_reads: dict[int, str] = {}
        self.capability_readers: dict[str, tuple[str, ...]] = {}
        self.findings: list[Finding] = []
        self.suppressed: list[Finding] = []
        self.groups: list[Group] = []
        self._suppress = suppressed_lines or {}
        self._rewrites: list[tuple[int, bool]] = []   # (finding index, needs torch_npu)
        self._dead: set[int] = set()                  # finding indices of undone rewrites
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
        binding = self.scopes.lookup(spelled[0])
        if binding is None:
            return None
        q = ".".join([binding[0], *spelled[1:]])
        if self.trace_names is not None:
            self.trace_names.append((node, q))
        return q

    # -- findings ---------------------------------------------------------------------------
    def emit(self, code: str, status: Status, node: cst.CSTNode, message: str, fix: str = "",
             *, rewrite: bool = False, npu: bool = True) -> bool:
        """Record a finding at `node`. False when a `# titan-doctor: ignore` comment on its
        line suppresses it: the caller then leaves the code as it is. `rewrite`: the
        caller changes code with this finding (`npu`: the change needs torch_npu)."""
        line, col = self.positions.of(node)
        finding = Finding(code=code, status=status, message=message, fix=fix,
                          path=self.path, line=line, col=col)
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

    def kernel_gate(self, node: cst.CSTNode, shown: str) -> bool:
        """True (after reporting NPU110) when the device check at `node` selects a CUDA-only
        kernel (gates.py found one on its line): the caller leaves it as it is."""
        gate = self.rules.kernel_gate
        hit = self.kernel_lines.get(self.positions.line_of(node)) if gate is not None else None
        if hit is None:
            return False
        kernel, fix = hit
        self.emit(gate.code, Status.MANUAL, node, fill(gate.message, old=shown, new=kernel), fix or gate.fix)
        return True

    def block(self, node: cst.CSTNode, what: str, fix: str) -> None:
        """Something CUDA-only stays in the condition being walked (if any)."""
        if self.groups:
            self.groups[0].blocked.append((what, fix, node))

    def open_group(self, node: cst.CSTNode) -> None:
        self.groups.append(Group(node, len(self._rewrites)))

    def close_group(self) -> tuple[Group, bool]:
        """(the group, True when its rewrites were undone because something in it stays
        CUDA-only)."""
        group = self.groups.pop()
        undone = self._rewrites[group.first_rewrite:]
        if not (group.blocked and undone):
            return group, False
        self._dead.update(i for i, _ in undone)
        del self._rewrites[group.first_rewrite:]
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


class Migrator(cst.CSTTransformer):
    """Dispatches the walk to the pieces; see the module docstring."""

    def __init__(self, ctx: Context, pieces: list) -> None:
        super().__init__()
        self.ctx = ctx
        self.pieces = [ctx.positions, *pieces]
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


def build(rules: RuleSet, path: str, source: str, statements: StatementMap | None = None,
          suppressed_lines: dict[int, frozenset[str]] | None = None,
          kernel_lines: dict[int, tuple[str, str]] | None = None, trace: bool = False,
          device_names: frozenset[str] = frozenset()) -> Migrator:
    """A Migrator with every piece, ready for `module.visit(...)`."""
    from titan_doctor.migrate.rules.kinds import capability
    from titan_doctor.migrate.rules.kinds.conditions import Conditions
    from titan_doctor.migrate.rules.kinds.env_piece import EnvVars
    from titan_doctor.migrate.rules.kinds.literals_piece import Literals
    from titan_doctor.migrate.rules.kinds.methods import Methods
    from titan_doctor.migrate.rules.kinds.names_piece import Names

    ctx = Context(rules, path, source, statements, suppressed_lines, kernel_lines, trace, device_names)
    pieces = [ScopeTracker(ctx), Conditions(ctx), EnvVars(ctx), Literals(ctx), Methods(ctx),
              capability.piece(ctx), Names(ctx)]
    return Migrator(ctx, [p for p in pieces if p is not None])
