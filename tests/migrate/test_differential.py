"""The fast path against libcst's own metadata, over every fixture and examples/.

The transformer tracks lines, columns and import bindings itself (positions.py,
scopes.py) because libcst's PositionProvider and QualifiedNameProvider cost more than
the whole parse. Here, and only here, the slow providers run on the same tree and every
finding's line:col and every resolved name must agree with them; and with statement
skipping off, every use that QualifiedNameProvider ties to a rule must be one the
transformer resolved (no misses).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst._metadata_dependent import LazyValue
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider, QualifiedNameSource

from titan_doctor.migrate.cstutil import dotted
from titan_doctor.migrate.python import gates
from titan_doctor.migrate.python.skipping import statement_map
from titan_doctor.migrate.python.transform import build
from titan_doctor.migrate.suppress import suppressions

from .helpers import FIXTURES, rules

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*FIXTURES.rglob("*.py"), *(ROOT / "examples").glob("*.py")])
IDS = [str(p.relative_to(ROOT)) for p in SOURCES]


def _walk(data: bytes, skipping: bool):
    """(ctx, positions, qualified names) for one walk over a metadata-wrapped module."""
    wrapper = MetadataWrapper(cst.parse_module(data), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    lazy = wrapper.resolve(QualifiedNameProvider)
    qnames = {node: (v() if isinstance(v, LazyValue) else v) for node, v in lazy.items()}
    statements = statement_map(data, rules())
    kernel_lines = gates.kernel_gate_lines(rules(), statements.tree) if gates.may_gate_kernels(rules(), data) else {}
    migrator = build(
        rules(),
        "x.py",
        data.decode("utf-8"),
        statements if skipping else None,
        suppressions(data),
        kernel_lines,
        trace=True,
    )
    wrapper.module.visit(migrator)
    return migrator.ctx, positions, qnames


@pytest.mark.parametrize("src", SOURCES, ids=IDS)
def test_positions_and_names_match_libcst_metadata(src):
    ctx, positions, qnames = _walk(src.read_bytes(), skipping=True)
    for index, node in ctx.trace_findings:
        f = ctx.findings[index]
        start = positions[node].start
        assert (f.line, f.col) == (start.line, start.column + 1), f"{f.code} {f.message}"
    for node, ours in ctx.trace_names:
        theirs = qnames.get(node, set())
        if _local_fallback(node, theirs):
            continue
        assert ours in {q.name for q in theirs}, f"{cst.Module([]).code_for_node(node)}: {ours} not in {theirs}"


def _local_fallback(node: cst.CSTNode, theirs) -> bool:
    """`try: from flash_attn import f / except ImportError: f = None`: the transformer
    keeps the import's meaning for `f` (scopes.Scopes.bind); QualifiedNameProvider
    reports only the local fallback."""
    spelled = cst.helpers.get_full_name_for_node(node)
    return bool(theirs) and all(q.source is QualifiedNameSource.LOCAL and q.name == spelled for q in theirs)


@pytest.mark.parametrize(
    "src", [p for p in SOURCES if "shadowing" not in p.name], ids=[i for i in IDS if "shadowing" not in i]
)
def test_every_rule_name_libcst_resolves_is_seen(src):
    ctx, _, qnames = _walk(src.read_bytes(), skipping=False)
    seen = {id(node) for node, _ in ctx.trace_names}
    missed = []
    for node, names in qnames.items():
        if not isinstance(node, (cst.Name, cst.Attribute)) or id(node) in ctx.inner:
            continue
        if dotted(node) is None:
            continue  # `f(0).total_memory`: libcst names it f.total_memory, but it is no name
        for q in names:
            if q.source is QualifiedNameSource.IMPORT and rules().name_rule(q.name) and id(node) not in seen:
                missed.append(f"{cst.Module([]).code_for_node(node)} ({q.name})")
    assert missed == []


def test_the_comparison_covers_real_work():
    findings = names = 0
    for src in SOURCES:
        ctx, _, _ = _walk(src.read_bytes(), skipping=True)
        findings += len(ctx.trace_findings)
        names += len(ctx.trace_names)
    assert findings > 300 and names > 500, (findings, names)
