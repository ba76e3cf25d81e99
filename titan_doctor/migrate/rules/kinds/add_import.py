"""Where `import torch_npu` goes in a module that now needs it: once, after the first
top-level torch import, and before any import that needs torch.npu to exist already."""
from __future__ import annotations

import libcst as cst

from titan_doctor.migrate.cstutil import full_name
from titan_doctor.migrate.rules.kind import NPU_MODULE, NPU_PACKAGE

_NPU = ".".join(NPU_MODULE)


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
        docstring = (i == 0 and len(small) == 1 and isinstance(small[0], cst.Expr)
                     and isinstance(small[0].value, (cst.SimpleString, cst.ConcatenatedString)))
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
    names = [] if isinstance(stmt.names, cst.ImportStar) else [
        full_name(a.name) for a in stmt.names]
    return module.startswith(_NPU) or (module == NPU_MODULE[0] and NPU_MODULE[1] in names)


def _imports_torch(stmt) -> bool:
    if isinstance(stmt, cst.Import):
        return any(full_name(a.name).split(".")[0] == "torch"
                   for a in stmt.names)
    if stmt.relative or stmt.module is None:
        return False
    return full_name(stmt.module).split(".")[0] == "torch"
