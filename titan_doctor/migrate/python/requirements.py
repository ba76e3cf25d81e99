"""setup.py's requirement strings: a CUDA-only package in `install_requires` or an
`extras_require` list (`"gpu": ["bitsandbytes", "triton>=3"]`) is reported like the same
line of a requirements file (NPU804, the text rules with `dependency = true`).

Every string of setup.py that is shaped like a requirement and sits in a list, tuple, set
or dict value counts: projects build these lists in variables before `setup()` gets
them (`extras["testing"] = [...]`), so the call alone would miss most of them.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePath

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.rules.kind import fill
from titan_doctor.migrate.rules.kinds.text import dependency_matches
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.suppress import is_suppressed

SETUP = "setup.py"
_REQUIREMENT = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*(?:[<>=!~;@ ].*)?$")
_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict)


def is_setup_py(path: str) -> bool:
    return PurePath(path).name == SETUP


def setup_requirements(
    rules: RuleSet, tree: ast.Module, lines: list[bytes], path: str, suppressed: dict[int, frozenset[str]]
) -> tuple[list[Finding], list[Finding]]:
    """(findings, suppressed findings) for the CUDA-only packages setup.py requires."""
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    found: list[Finding] = []
    quiet: list[Finding] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if not isinstance(parents.get(id(node)), _CONTAINERS) or not _REQUIREMENT.match(node.value):
            continue
        for rule, shown, offset in dependency_matches(node.value, rules):
            text = lines[node.lineno - 1] if node.lineno <= len(lines) else b""
            col = len(text[: node.col_offset].decode("utf-8", "replace")) + 2 + offset  # past the quote
            finding = Finding(
                code=rule.code,
                status=Status.MANUAL,
                message=fill(rule.message, old=shown, new=""),
                fix=rule.fix,
                path=path,
                line=node.lineno,
                col=col,
            )
            (quiet if is_suppressed(suppressed, node.lineno, rule.code) else found).append(finding)
    found.sort(key=lambda f: (f.line, f.col))
    return found, quiet
