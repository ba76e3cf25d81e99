"""Every rule kind's own VALID / INVALID examples (rules/kinds/*.py, `Kind.valid` /
`Kind.invalid`), run through migrate with the built-in rules as the files they name.

A VALID example gets no finding of its kind, an INVALID one at least one; either way the
file comes out as the example says (`fixed`, or unchanged). So a kind's module documents
what its rules catch, and a new kind cannot join the registry without showing it.
"""

from __future__ import annotations

import sys

import pytest

from titan_doctor.migrate.engine import runner
from titan_doctor.migrate.rules import registry
from titan_doctor.migrate.rules.load import builtin_files
from titan_knowledge import load_toml

from .helpers import rules


def _codes_by_kind() -> dict[str, set[str]]:
    """kind -> the codes its built-in rules report under (a rename's gate code too)."""
    codes: dict[str, set[str]] = {}
    for path in builtin_files():
        for entry in load_toml(path).get("rule", []):
            found = codes.setdefault(entry["kind"], set())
            found.add(entry["code"])
            if entry.get("gate_code"):
                found.add(entry["gate_code"])
    return codes


CODES = _codes_by_kind()
CASES = [
    (kind.name, verdict, i, example)
    for kind in registry.KINDS.values()
    for verdict, examples in (("valid", kind.valid), ("invalid", kind.invalid))
    for i, example in enumerate(examples)
]


@pytest.mark.parametrize("kind, verdict, i, example", CASES, ids=[f"{k}-{v}-{i}" for k, v, i, _ in CASES])
def test_example(tmp_path, kind, verdict, i, example):
    path = tmp_path / example.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example.source)
    result = runner.process_file(path, rules(), example.name)
    ours = [
        f"{f.line}:{f.col} {f.code} [{f.status.value}] {f.message}" for f in result.findings if f.code in CODES[kind]
    ]
    if verdict == "valid":
        assert ours == [], f"a VALID {kind} example has findings of its kind"
    else:
        assert ours, f"an INVALID {kind} example has no finding of its kind: {result.findings}"
    expected = example.source if example.fixed is None else example.fixed
    assert result.new.decode() == expected


def test_every_kind_shows_what_it_leaves_and_what_it_catches():
    assert [k for k in registry.KINDS.values() if not (k.valid and k.invalid)] == []


def test_every_builtin_kind_is_registered():
    assert set(CODES) <= set(registry.KINDS)


def test_the_registry_docstring_lists_its_families_in_order():
    """The table in rules/registry.py's docstring is the walk order; keep it true."""
    listed = [line.split()[0] for line in registry.__doc__.splitlines() if line.startswith("    ") and line.split()]
    module_of = {
        id(m.FAMILY): name.rsplit(".", 1)[-1]
        for name, m in list(sys.modules.items())
        if name.startswith("titan_doctor.migrate.rules.kinds.") and hasattr(m, "FAMILY")
    }
    assert listed == [module_of[id(f)] for f in registry.FAMILIES]


def test_the_walk_docstring_lists_its_pieces_in_order():
    """python/transform.py's docstring names every piece of a walk, in walk order."""
    from titan_doctor.migrate.python import transform

    listed = [
        line.split()[0]
        for line in transform.__doc__.splitlines()
        if line.startswith("    ") and line.split()[0][:1].isupper()
    ]
    source = "import torch\n\nbig = torch.cuda.get_device_properties(0).major >= 8\n"  # Capabilities too
    migrator = transform.build(rules(), "x.py", source)
    assert listed == [type(p).__name__ for p in migrator.pieces]
