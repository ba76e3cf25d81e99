"""One Python source through the codemod: parse, scan, walk, add `import torch_npu`."""
from __future__ import annotations

import ast
import difflib
import warnings

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.python import flows
from titan_doctor.migrate.python import gates
from titan_doctor.migrate.rules.kinds.add_import import add_torch_npu_import
from titan_doctor.migrate.rules.load import RuleSet
from titan_doctor.migrate.python.skipping import statement_map
from titan_doctor.migrate.suppress import suppressions
from titan_doctor.migrate.python.transform import build

class _EveryLine(dict):
    """kernel_lines when the file could not be scanned: every device check is suspect."""

    def get(self, key, default=None):
        return ("a CUDA-only kernel this file may use (the stdlib parser could not read it)", "")


def migrate_python(data: bytes, rules: RuleSet, path: str,
                   suppressed: list[Finding] | None = None) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings) for one Python source; raises cst.ParserSyntaxError.
    Findings silenced by `# titan-doctor: ignore` go to `suppressed` when it is given."""
    module = cst.parse_module(data)
    statements = statement_map(data, rules)
    tree = statements.tree if statements is not None else None
    kernel_lines: dict[int, tuple[str, str]] = {}
    if gates.may_gate_kernels(rules, data):
        tree = tree or _stdlib_tree(data)
        kernel_lines = gates.kernel_gate_lines(rules, tree) if tree is not None else _EveryLine()
    device_names = frozenset()
    if flows.may_flow(rules, data):
        tree = tree or _stdlib_tree(data)
        device_names = flows.device_variables(rules, tree) if tree is not None else frozenset()
    migrator = build(rules, path, data.decode(module.encoding, errors="replace"), statements,
                     suppressions(data), kernel_lines, device_names=device_names)
    out = module.visit(migrator)
    ctx = migrator.ctx
    findings = ctx.finish()
    if suppressed is not None:
        suppressed.extend(ctx.suppressed)
    if not ctx.changed:
        return data, findings
    scopes, rule = ctx.scopes, rules.add_import
    if not ctx.needs_npu or scopes.has_torch_npu or rule is None:
        return out.bytes, findings
    if scopes.imports_torch:
        before = out
        out, index = add_torch_npu_import(out)
        findings.append(Finding(code=rule.code, status=Status.FIXED, message=rule.message,
                                path=path, line=_insert_line(data, before, index), col=1))
    elif scopes.imports_torch_nested:  # a lazy `import torch` stays lazy: a person places it
        findings.append(Finding(
            code=rule.code, status=Status.MANUAL, path=path, line=1, col=1,
            message="torch is imported inside functions here: add `import torch_npu` next to "
                    "that import (the rewrites need it)", fix="import torch_npu"))
    return out.bytes, findings


def _stdlib_tree(data: bytes) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def _insert_line(data: bytes, out: cst.Module, index: int) -> int:
    """Input line before which the import was inserted: the line after the statement it
    follows (1 when it goes first). Findings count input lines in every mode.

    The statements before it are imports the transformer may have split onto more lines,
    so the output line is mapped back through a line diff of that prefix."""
    if index == 0:
        return 1
    # codegen of the leading statements only (a whole-module codegen costs a parse)
    prefix = out.with_changes(body=out.body[:index], footer=()).bytes
    last = prefix.count(b"\n")
    a = data.splitlines()[:last]
    b = prefix.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if j1 < last <= j2:
            return (i1 + last - j1 if tag == "equal" else max(i2, i1 + 1)) + 1
    return last + 1


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
