"""The libcst transform of one Python module: a Migrator (walk/migrator.py) over every rule
kind's pieces, in the registry's order (rules/registry.py), after the two the walk itself
needs:

    Positions      walk/positions.py    line counting, statement skipping, columns
    ScopeTracker   walk/scopes.py       import bindings per scope (what a name stands for)
    then per family of rule kinds (rules/kinds/):
    Conditions     conditions.py        conditions are rewritten whole or not at all (NPU111)
    EnvVars        env.py               environment variable names and their values
    Literals       literals.py          device/backend strings where they are provably one
    Methods        methods.py           .cuda() / .is_cuda on any object
    Capabilities   capability.py        calls read as a CUDA compute capability (never rewritten)
    Names          names.py             torch.cuda.* and friends, through import bindings; imports
    Strings        strings.py           string literals that ask NVIDIA's tools (nvidia-smi)

What the pieces share is the Context (context.py: findings, rewrites, groups); what this
file offers them besides is a PythonFile (rules/kind.py): the positions, the scopes, what
the pre-walk scans found (python/flows.py, python/gates.py) and the kernel gate check.
"""

from __future__ import annotations

from titan_doctor.migrate.context import Context
from titan_doctor.migrate.python.backends import Holds
from titan_doctor.migrate.python.skipping import StatementMap
from titan_doctor.migrate.rules.kind import PythonFile
from titan_doctor.migrate.rules.kinds import kernel_gate
from titan_doctor.migrate.rules.registry import PYTHON_PIECES
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.walk.migrator import Migrator
from titan_doctor.migrate.walk.positions import Positions
from titan_doctor.migrate.walk.scopes import Scopes, ScopeTracker


def build(
    rules: RuleSet,
    path: str,
    source: str,
    statements: StatementMap | None = None,
    suppressed_lines: dict[int, frozenset[str]] | None = None,
    kernel_lines: dict[int, tuple[str, str]] | None = None,
    trace: bool = False,
    device_names: frozenset[str] = frozenset(),
    holds: Holds | None = None,
    kept_names: frozenset[str] = frozenset(),
) -> Migrator:
    """A Migrator with every piece, ready for `module.visit(...)`. `holds`: where CUDA
    stays because the code already runs on more than CUDA (python/backends.py)."""
    positions, scopes = Positions(source, statements), Scopes()
    hold = holds.at if holds is not None and holds.regions else None
    ctx = Context(path, positions.of, scopes.lookup, suppressed_lines, trace, hold, rules.report_only)
    file = PythonFile(
        positions,
        scopes,
        device_names,
        kernel_gate.checker(ctx, rules, kernel_lines or {}, positions.line_of),
        holds.names if holds is not None else {},
        holds.bound if holds is not None else frozenset(),
        kept_names,
    )
    pieces = [positions, ScopeTracker(ctx, scopes, positions, rules.name_rule)]
    for make in PYTHON_PIECES:
        pieces += [p for p in make(ctx, rules, file) if p is not None]
    return Migrator(ctx, scopes, pieces)
