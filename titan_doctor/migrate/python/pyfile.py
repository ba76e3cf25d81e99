"""One Python source through the codemod: parse, the pre-walk scans, the walk, and
`import torch_npu` where the kept rewrites need it (and the file's place allows it)."""

from __future__ import annotations

import ast
import warnings

import libcst as cst

from titan_doctor.findings import Finding
from titan_doctor.migrate.python import backends, flows, gates
from titan_doctor.migrate.python.facts import Place
from titan_doctor.migrate.python.requirements import is_setup_py, setup_requirements
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
    data: bytes,
    rules: RuleSet,
    path: str,
    suppressed: list[Finding] | None = None,
    place: Place | None = None,
    kept: list[int] | None = None,
) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings) for one Python source; raises cst.ParserSyntaxError.
    Findings silenced by `# titan-doctor: ignore` go to `suppressed` when it is given; the
    number of rewrites left undone because the code already runs beyond CUDA is added to
    `kept`."""
    place = place or Place()
    facts = place.facts
    module = cst.parse_module(data)
    statements = statement_map(data, rules)
    tree = statements.tree if statements is not None else None  # one stdlib parse serves all
    kernel_lines: dict[int, tuple[str, str]] = {}
    protected: list = []
    if gates.may_gate_kernels(rules, data, facts.cuda_re if facts else None):
        tree = tree or stdlib_tree(data)
        if tree is not None:
            kernel_lines, protected = gates.kernel_gates(rules, tree, facts.cuda if facts else None)
        else:
            kernel_lines = _EveryLine()
    device_names = frozenset()
    if flows.may_flow(rules, data):
        tree = tree or stdlib_tree(data)
        device_names = flows.device_variables(rules, tree) if tree is not None else frozenset()
    if facts is not None and facts.device_names:  # a name that carries a device in another module
        device_names |= facts.device_names
    tree_values = facts.values if facts is not None and place.in_package else {}
    holds = None
    markers = facts.markers if facts is not None else frozenset()
    marked = bool(markers) and facts.markers_re is not None and facts.markers_re.search(data) is not None
    if tree_values or protected or marked or backends.may_hold(data):
        tree = tree or stdlib_tree(data)
        if tree is not None:
            holds = backends.scan(rules, tree, data.split(b"\n"), tree_values, device_names, protected, markers)
    if place.device_siblings:  # CUDA's module of a per-device set: all of it stays
        holds = holds or backends.Holds()
        holds.regions.append(((1, 1), (1 << 30, 1), backends.module_hold(place.device_siblings)))
    quiet = suppressions(data)
    migrator = build(
        rules,
        path,
        data.decode(module.encoding, errors="replace"),
        statements,
        quiet,
        kernel_lines,
        device_names=device_names,
        holds=holds,
        kept_names=facts.kept if facts is not None else frozenset(),
    )
    out = module.visit(migrator)
    ctx = migrator.ctx
    findings = ctx.finish()
    if suppressed is not None:
        suppressed.extend(ctx.suppressed)
    if kept is not None:
        kept.append(ctx.kept)
    if is_setup_py(path):
        tree = tree or stdlib_tree(data)
        if tree is not None:
            found, silent = setup_requirements(rules, tree, data.split(b"\n"), path, quiet)
            findings += found
            if suppressed is not None:
                suppressed.extend(silent)
    if not ctx.changed:
        return data, findings
    out, added = add_after_walk(data, out, rules, migrator.scopes, ctx.needs_npu, path, place, tree)
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
