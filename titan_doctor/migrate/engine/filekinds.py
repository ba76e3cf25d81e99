"""Which files migrate reads, and how: the one place that maps a file name to a kind.

Discovery, the engine's dispatch and the pre-commit hook's file pattern (tested to agree)
all read this table, so a new kind is added here once.
"""
from __future__ import annotations

from pathlib import PurePath

from titan_doctor.migrate.rules.kind import PYTHON_CODE, SCRIPT_LINES
from titan_doctor.migrate.rules.load import RuleSet
from titan_doctor.migrate.text.lines import TEXT_NAMES, TEXT_SUFFIXES, is_text_file

PYTHON = "python"        # the libcst transformer
NOTEBOOK = "notebook"    # Jupyter: code cells through the same transformer
TEXT = "text"            # launch scripts and configs, line by line (textfiles.py)
REPORT = "report"        # a `file` rule: reported as a whole (.cu)

# which rewriters' rules can apply to each kind (their pre-filters decide what is read)
REWRITERS = {PYTHON: (PYTHON_CODE,), NOTEBOOK: (PYTHON_CODE, SCRIPT_LINES), TEXT: (SCRIPT_LINES,)}

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


def known_suffixes(rules: RuleSet) -> set[str]:
    """Every suffix some kind claims (for the pre-commit hook's `files` pattern)."""
    return {*PYTHON_SUFFIXES, *NOTEBOOK_SUFFIXES, *TEXT_SUFFIXES, *rules.files}


def known_names() -> set[str]:
    return set(TEXT_NAMES)
