"""Shared by the migrate tests: run the codemod on one fixture and render its findings
the way the fixture files store them (path-free `line:col CODE [status] message`).

Fixtures show every rewrite with the `import torch_npu` it needs (`--import-torch-npu
always`), except those under fixtures/imports/, which show the default policy (only
programs get the import)."""

from __future__ import annotations

from pathlib import Path

from titan_doctor.findings import Finding
from titan_doctor.migrate.python.facts import Place
from titan_doctor.migrate.python.pyfile import migrate_python
from titan_doctor.migrate.rules import RuleSet, load_rules
from titan_doctor.migrate.text.lines import migrate_text

FIXTURES = Path(__file__).parent / "fixtures"
_RULES: RuleSet | None = None


def rules() -> RuleSet:
    global _RULES
    if _RULES is None:
        _RULES = load_rules()
    return _RULES


def fixture_inputs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.in.*"))


def expected_paths(src: Path) -> tuple[Path, Path]:
    """X.in.py -> (X.out.py, X.findings.txt)."""
    stem, ext = src.name.split(".in.")
    return src.with_name(f"{stem}.out.{ext}"), src.with_name(f"{stem}.findings.txt")


def render(findings: list[Finding]) -> str:
    return "".join(f"{f.line}:{f.col} {f.code} [{f.status.value}] {f.message}\n" for f in findings)


def run(*args):
    """`titan-doctor migrate ARGS...` through click (paths may be Path objects)."""
    from click.testing import CliRunner

    from titan_doctor.cli import main

    return CliRunner().invoke(main, ["migrate", *map(str, args)])


def fixture_place(src: Path) -> Place:
    """The import policy a fixture shows (see the module docstring)."""
    return Place(torch_npu_import="scripts" if "imports" in src.parent.parts else "always")


def migrate_fixture(src: Path) -> tuple[bytes, list[Finding]]:
    data = src.read_bytes()
    if src.suffix == ".py":
        new, findings = migrate_python(data, rules(), src.name, place=fixture_place(src))
    else:
        new, findings = migrate_text(data, rules(), src.name)
    return new, sorted(findings, key=lambda f: (f.line, f.col, f.code))


if __name__ == "__main__":  # regenerate expectations: review every diff before committing
    for src in fixture_inputs():
        new, findings = migrate_fixture(src)
        out, fnd = expected_paths(src)
        out.write_bytes(new)
        fnd.write_text(render(findings))
