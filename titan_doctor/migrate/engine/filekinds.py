"""Which files migrate reads, and how: the one place that maps a file name to a kind of
file. Discovery, the runner's dispatch and the pre-commit hook's `files` pattern (tested
to agree, tests/migrate/test_cli.py) all read this, so a new kind of file is added here
once."""

from __future__ import annotations

from pathlib import PurePath

from titan_doctor.migrate.rules.kind import PYTHON_CODE, SCRIPT_LINES
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.text.formats import is_text_file

PYTHON = "python"  # the libcst walk
NOTEBOOK = "notebook"  # Jupyter: code cells through the same walk, shell lines line by line
TEXT = "text"  # launch scripts and configs, line by line (text/lines.py)
REPORT = "report"  # a `file` rule: reported as a whole (.cu)

# which rewriters' rules can apply to each kind of file (their pre-filters decide what is read)
REWRITTEN_BY = {PYTHON: (PYTHON_CODE,), NOTEBOOK: (PYTHON_CODE, SCRIPT_LINES), TEXT: (SCRIPT_LINES,)}

PYTHON_SUFFIXES = (".py",)
NOTEBOOK_SUFFIXES = (".ipynb",)


def kind_of(path: PurePath, rules: RuleSet) -> str | None:
    """The kind of file `path` is, or None when migrate has nothing to do with it."""
    if path.suffix in rules.files:
        return REPORT
    if path.suffix in PYTHON_SUFFIXES:
        return PYTHON
    if path.suffix in NOTEBOOK_SUFFIXES:
        return NOTEBOOK
    if is_text_file(path):
        return TEXT
    return None
