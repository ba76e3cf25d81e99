"""One Python source through the codemod: parse, the pre-walk scans, the walk, and
`import torch_npu` where the kept rewrites need it."""

from __future__ import annotations

import ast
import warnings

import libcst as cst

from titan_doctor.findings import Finding
from titan_doctor.migrate.python import flows, gates
from titan_doctor.migrate.python.skipping import statement_map
from titan_doctor.migrate.python.transform import build
from titan_doctor.migrate.rules.kinds.add_import import add_after_walk
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.suppress import suppressions
from titan_doctor.migrate.walk.astnames import stdlib_tree


class _EveryLine(dict):
    """kernel_lines when the file could not be scanned: every device check is suspect."""

    def get(self, key, default=None):
        return ("a CUDA-only kernel this file may use (the stdlib parser could not read it)", "")


def migrate_python(
    data: bytes, rules: RuleSet, path: str, suppressed: list[Finding] | None = None
) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings) for one Python source; raises cst.ParserSyntaxError.
    Findings silenced by `# titan-doctor: ignore` go to `suppressed` when it is given."""
    module = cst.parse_module(data)
    statements = statement_map(data, rules)
    tree = statements.tree if statements is not None else None  # one stdlib parse serves all
    kernel_lines: dict[int, tuple[str, str]] = {}
    if gates.may_gate_kernels(rules, data):
        tree = tree or stdlib_tree(data)
        kernel_lines = gates.kernel_gate_lines(rules, tree) if tree is not None else _EveryLine()
    device_names = frozenset()
    if flows.may_flow(rules, data):
        tree = tree or stdlib_tree(data)
        device_names = flows.device_variables(rules, tree) if tree is not None else frozenset()
    migrator = build(
        rules,
        path,
        data.decode(module.encoding, errors="replace"),
        statements,
        suppressions(data),
        kernel_lines,
        device_names=device_names,
    )
    out = module.visit(migrator)
    ctx = migrator.ctx
    findings = ctx.finish()
    if suppressed is not None:
        suppressed.extend(ctx.suppressed)
    if not ctx.changed:
        return data, findings
    out, added = add_after_walk(data, out, rules, migrator.scopes, ctx.needs_npu, path)
    if added is not None:
        findings.append(added)
    return out.bytes, findings


def parse_error(data: bytes, error: cst.ParserSyntaxError) -> tuple[str, int, int]:
    """(message, line, column) for a file libcst cannot parse, at the place CPython's own
    parser names ("'(' was never closed" points at the bracket, where libcst would point
    at the end of the file). libcst's own place when CPython accepts the file."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(data)
    except SyntaxError as e:
        if e.lineno:
            return e.msg, e.lineno, max(e.offset or 1, 1)
    except ValueError:  # null bytes
        pass
    return error.message, error.raw_line, error.raw_column + 1
