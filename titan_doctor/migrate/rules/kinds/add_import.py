"""The add_import rule: `import torch_npu` in a module whose kept rewrites need it. It goes
in once, after the first top-level torch import, and before any import that needs
torch.npu to exist already; a torch imported only inside functions stays lazy, and a
person is asked to add the import there. Applied after the walk (python/pyfile.py).

Which modules get it is a policy (`--import-torch-npu`): torch 2.5+ loads torch_npu by
itself when torch is imported (torch_npu's `torch.backends` entry point; torch_npu
2.13.0 pairs with torch 2.13.0), so the import is only belt and braces, and in a library
it turns an optional backend into a hard dependency: a package that imports it no longer
imports where torch_npu is missing. So by default (SCRIPTS) it goes only into programs:
a module with a top-level `if __name__ == "__main__":` that is not part of a package (no
__init__.py beside it), and notebooks, and into a module whose rewrites wrote the name
torch_npu itself (torch_npu.profiler.profile: only the import binds it). ALWAYS adds it to
every module that needs it, NEVER to none (a module naming torch_npu is then reported)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.cstutil import full_name
from titan_doctor.migrate.rules.kind import Example, Family, Kind, Rule, set_field
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import NPU_MODULE, NPU_PACKAGE
from titan_doctor.migrate.walk.scopes import Scopes

_NPU = ".".join(NPU_MODULE)
SCRIPTS, ALWAYS, NEVER = "scripts", "always", "never"
POLICIES = (SCRIPTS, ALWAYS, NEVER)


@dataclass(frozen=True, kw_only=True)
class AddImport(Rule):
    """The `import torch_npu` insertion, in files that import torch."""


def add_after_walk(
    data: bytes,
    out: cst.Module,
    rules: RuleSet,
    scopes: Scopes,
    needs_npu: bool,
    path: str,
    place=None,
    tree=None,
) -> tuple[cst.Module, Finding | None]:
    """`out` (the walked module) with `import torch_npu` added when a kept rewrite needs
    it, the file imports torch at module level and the policy of its `place`
    (python/facts.Place) allows it, with its finding (at an input line); a MANUAL finding
    instead when torch is imported only inside functions."""
    rule = rules.add_import
    if not needs_npu or scopes.has_torch_npu or rule is None:
        return out, None
    policy = getattr(place, "torch_npu_import", ALWAYS) if place is not None else ALWAYS
    message = rule.message
    if policy == NEVER or (policy == SCRIPTS and (getattr(place, "in_package", False) or not is_program(out))):
        # torch binds torch.npu by itself, but a rewrite that wrote the name torch_npu
        # (torch_npu.profiler.profile) needs the import, or the module fails with NameError
        if not names_torch_npu(out):
            return out, None
        if policy == NEVER:
            return out, _ask_for_import(
                rule,
                path,
                f"the rewrites here name {NPU_PACKAGE} itself ({NPU_PACKAGE}.profiler): "
                f"add `import {NPU_PACKAGE}` (not added: --import-torch-npu never)",
            )
        message = f"{message}; the rewrites here name {NPU_PACKAGE} itself, which only the import binds"
    if scopes.imports_torch:
        new, index = add_torch_npu_import(out)
        return new, Finding(
            code=rule.code,
            status=Status.FIXED,
            message=message,
            path=path,
            line=_insert_line(data, out, index),
            col=1,
        )
    if scopes.imports_torch_nested:  # a lazy `import torch` stays lazy: a person places it
        return out, _ask_for_import(
            rule,
            path,
            f"torch is imported inside functions here: add `import {NPU_PACKAGE}` next to "
            "that import (the rewrites need it)",
        )
    return out, None


def _ask_for_import(rule, path, message: str) -> Finding:
    """The import a person must add (the file's first line is where the report points)."""
    return Finding(
        code=rule.code, status=Status.MANUAL, path=path, line=1, col=1, message=message, fix=f"import {NPU_PACKAGE}"
    )


class _NameUse(cst.CSTVisitor):
    """Finds the name torch_npu used in code (imports aside)."""

    def __init__(self) -> None:
        self.found = False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == NPU_PACKAGE:
            self.found = True


def names_torch_npu(module: cst.Module) -> bool:
    """Does the module's code use the name torch_npu itself (`torch_npu.profiler.profile`)?"""
    finder = _NameUse()
    module.visit(finder)
    return finder.found


def is_program(module: cst.Module) -> bool:
    """A module run as a program: it has a top-level `if __name__ == "__main__":`."""
    for stmt in module.body:
        if isinstance(stmt, cst.If) and isinstance(stmt.test, cst.Comparison):
            test = stmt.test
            sides = [test.left, *(c.comparator for c in test.comparisons)]
            names = [s.value for s in sides if isinstance(s, cst.Name)]
            strings = [s.evaluated_value for s in sides if isinstance(s, cst.SimpleString)]
            if names == ["__name__"] and strings == ["__main__"]:
                return True
    return False


def add_torch_npu_import(module: cst.Module) -> tuple[cst.Module, int]:
    """Insert `import torch_npu` after the first top-level torch import, wherever it is
    (code before it, such as `os.environ[...] = ...` or a notebook's `%pip install` cell,
    runs first), else after the leading imports / docstring. Returns the module and the
    0-based body index used."""
    body = list(module.body)
    at = None
    lead = 0
    for i, stmt in enumerate(body):
        small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []
        imports = [s for s in small if isinstance(s, (cst.Import, cst.ImportFrom))]
        docstring = (
            i == 0
            and len(small) == 1
            and isinstance(small[0], cst.Expr)
            and isinstance(small[0].value, (cst.SimpleString, cst.ConcatenatedString))
        )
        if lead == i and (imports or docstring):
            lead = i + 1
        if any(_imports_npu(s) for s in imports):  # torch_npu must come before these
            at = i if at is None else min(at, i)
            break
        if at is None and any(_imports_torch(s) for s in imports):
            at = i + 1
    at = lead if at is None else at
    line = cst.SimpleStatementLine([cst.Import([cst.ImportAlias(cst.Name(NPU_PACKAGE))])])
    body.insert(at, line)
    return module.with_changes(body=body), at


def _imports_npu(stmt) -> bool:
    """An import that needs torch_npu loaded first (torch.npu / `from torch import npu`)."""
    if isinstance(stmt, cst.Import):
        return any(full_name(a.name).startswith(_NPU) for a in stmt.names)
    if stmt.relative or stmt.module is None:
        return False
    module = full_name(stmt.module)
    names = [] if isinstance(stmt.names, cst.ImportStar) else [full_name(a.name) for a in stmt.names]
    return module.startswith(_NPU) or (module == NPU_MODULE[0] and NPU_MODULE[1] in names)


def _imports_torch(stmt) -> bool:
    if isinstance(stmt, cst.Import):
        return any(full_name(a.name).split(".")[0] == "torch" for a in stmt.names)
    if stmt.relative or stmt.module is None:
        return False
    return full_name(stmt.module).split(".")[0] == "torch"


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


ADD_IMPORT = Kind(
    "add_import",
    AddImport,
    set_field("add_import"),
    valid=(
        Example("import torch\n\nx = torch.ones(2)\n"),
        Example(  # a module, not a program: torch loads torch_npu by itself
            "import torch\n\ntorch.cuda.synchronize()\n",
            fixed="import torch\n\ntorch.npu.synchronize()\n",
        ),
        Example(
            'import torch\nimport torch_npu\n\nif __name__ == "__main__":\n    torch.cuda.synchronize()\n',
            fixed='import torch\nimport torch_npu\n\nif __name__ == "__main__":\n    torch.npu.synchronize()\n',
        ),
    ),
    invalid=(
        Example(
            'import torch\n\nif __name__ == "__main__":\n    torch.cuda.synchronize()\n',
            fixed='import torch\nimport torch_npu\n\nif __name__ == "__main__":\n    torch.npu.synchronize()\n',
        ),
        Example(
            'def f():\n    import torch\n    torch.cuda.synchronize()\n\n\nif __name__ == "__main__":\n    f()\n',
            fixed='def f():\n    import torch\n    torch.npu.synchronize()\n\n\nif __name__ == "__main__":\n    f()\n',
        ),
    ),
)

FAMILY = Family(kinds=(ADD_IMPORT,), fields={"add_import": lambda: None})
