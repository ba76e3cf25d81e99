"""Shared by the migrate tests: run the codemod on one fixture and render its findings
the way the fixture files store them (path-free `line:col CODE [status] message`).

Fixtures show every rewrite with the `import torch_npu` it needs (`--import-torch-npu
always`), except those under fixtures/imports/, which show the default policy (only
programs get the import).

A fixture with an X.portable.out.* next to its X.out.* shows `--target portable` too
(X.portable.findings.txt); that target never adds the import."""

from __future__ import annotations

from pathlib import Path

from titan_doctor.findings import Finding
from titan_doctor.migrate.python.facts import Place
from titan_doctor.migrate.python.pyfile import migrate_python
from titan_doctor.migrate.rules import RuleSet, load_rules
from titan_doctor.migrate.text.lines import migrate_text

FIXTURES = Path(__file__).parent / "fixtures"
NPU, PORTABLE = "npu", "portable"  # the --target values
_RULES: dict[str, RuleSet] = {}


def rules(target: str = NPU) -> RuleSet:
    if target not in _RULES:
        _RULES[target] = load_rules(target=target)
    return _RULES[target]


def fixture_inputs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*.in.*"))


def portable_inputs() -> list[Path]:
    """The fixtures that show --target portable too."""
    return [p for p in fixture_inputs() if expected_paths(p, PORTABLE)[0].exists()]


def expected_paths(src: Path, target: str = NPU) -> tuple[Path, Path]:
    """X.in.py -> (X.out.py, X.findings.txt); for portable (X.portable.out.py,
    X.portable.findings.txt)."""
    stem, ext = src.name.split(".in.")
    if target == PORTABLE:
        stem += ".portable"
    return src.with_name(f"{stem}.out.{ext}"), src.with_name(f"{stem}.findings.txt")


def render(findings: list[Finding]) -> str:
    return "".join(f"{f.line}:{f.col} {f.code} [{f.status.value}] {f.message}\n" for f in findings)


def run(*args):
    """`titan-doctor migrate ARGS...` through click (paths may be Path objects)."""
    from click.testing import CliRunner

    from titan_doctor.cli import main

    return CliRunner().invoke(main, ["migrate", *map(str, args)])


def fixture_place(src: Path, target: str = NPU) -> Place:
    """The import policy a fixture shows (see the module docstring)."""
    if target == PORTABLE:
        return Place(torch_npu_import="never")
    return Place(torch_npu_import="scripts" if "imports" in src.parent.parts else "always")


def migrate_fixture(src: Path, target: str = NPU) -> tuple[bytes, list[Finding]]:
    data = src.read_bytes()
    if src.suffix == ".py":
        new, findings = migrate_python(data, rules(target), src.name, place=fixture_place(src, target))
    else:
        new, findings = migrate_text(data, rules(target), src.name)
    return new, sorted(findings, key=lambda f: (f.line, f.col, f.code))


if __name__ == "__main__":  # regenerate expectations: review every diff before committing
    import sys

    # `python -m tests.migrate.helpers [--new]`: --new writes only expectations not there yet
    only_new = "--new" in sys.argv
    cases = [(src, NPU) for src in fixture_inputs()] + [(src, PORTABLE) for src in portable_inputs()]
    for src, target in cases:
        out, fnd = expected_paths(src, target)
        if only_new and out.exists():
            continue
        new, findings = migrate_fixture(src, target)
        out.write_bytes(new)
        fnd.write_text(render(findings))
