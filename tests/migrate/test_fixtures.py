"""Fixture pairs: every X.in.* under fixtures/ must migrate to X.out.* with exactly the
findings in X.findings.txt, and migrating the output again must change nothing."""

from __future__ import annotations

import pytest

from titan_doctor.findings import Status
from titan_doctor.migrate.rules.load import builtin_files
from titan_knowledge import load_toml

from .helpers import FIXTURES, expected_paths, fixture_inputs, migrate_fixture, render

CASES = fixture_inputs()
IDS = [str(p.relative_to(FIXTURES)) for p in CASES]


@pytest.mark.parametrize("src", CASES, ids=IDS)
def test_fixture_output_and_findings(src):
    out_path, findings_path = expected_paths(src)
    new, findings = migrate_fixture(src)
    assert new == out_path.read_bytes(), f"output differs from {out_path.name}"
    assert render(findings) == findings_path.read_text()


@pytest.mark.parametrize("src", CASES, ids=IDS)
def test_second_run_changes_nothing(src, tmp_path):
    out_path, _ = expected_paths(src)
    again = tmp_path / src.name.replace(".in.", ".")
    again.write_bytes(out_path.read_bytes())
    new, findings = migrate_fixture(again)
    assert new == out_path.read_bytes()
    assert not [f for f in findings if f.status is Status.FIXED]


def _all_codes() -> list[str]:
    codes = set()
    for path in builtin_files():
        for rule in load_toml(path).get("rule", []):
            codes.add(rule["code"])
            if rule.get("gate_code"):
                codes.add(rule["gate_code"])
    return sorted(codes)


def _codes_in_fixtures() -> set[str]:
    seen = set()
    for src in CASES:
        text = expected_paths(src)[1].read_text()
        seen.update(line.split()[1] for line in text.splitlines() if line.strip())
    return seen


FIXTURE_CODES = _codes_in_fixtures()


@pytest.mark.parametrize("code", _all_codes())
def test_every_rule_code_has_a_fixture(code):
    # NPU706 files (.cu) are covered by the engine tests: a fixture cannot be a .cu file
    if code == "NPU706" and "NPU706" not in FIXTURE_CODES:
        pytest.skip("covered in test_engine.test_cuda_source_file_reported")
    assert code in FIXTURE_CODES, f"no fixture shows {code}"


def test_alias_matrix_is_complete():
    """The alias cases the issue makes mandatory each have their own fixture."""
    names = {p.name for p in (FIXTURES / "alias").glob("*.in.py")}
    assert {
        "import_torch_as.in.py",
        "from_torch_import_cuda.in.py",
        "from_cuda_import_as.in.py",
        "distributed_as.in.py",
        "shadowing.in.py",
    } <= names
