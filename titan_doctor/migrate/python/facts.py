"""What one file's migration needs to know of the other modules of its tree.

A file is migrated alone (in a worker process), but what it may rewrite depends on the
rest of the tree: `check_cuda_fp8_capability()` defined in utils/environment.py runs
nvidia-smi, so the `torch.cuda.is_available() and not check_cuda_fp8_capability()` in
state.py guards CUDA-only code and stays (NPU110); `backend == "hccl"` in the module that
starts the process group means the `backend="nccl"` defaults of the package's other
modules are CUDA's case of a value the package already picks per device, and stay
(python/backends.py); a name that carries a device string in one module carries it in
the module it is handed to (python/flows.py). So the runner first scans every Python
file for these facts (`file_facts`, cheap: only files whose text can hold one are
parsed), merges them (`TreeFacts.merge`), then migrates each file with the result. Names
are matched by name across modules: an over-approximation whose wrong answer is a manual
finding, never a wrong rewrite.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from titan_doctor.migrate.python import backends, flows, gates
from titan_doctor.migrate.rules.kind import PYTHON_CODE
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import NPU
from titan_doctor.migrate.walk.astnames import flat_imports, qualified, stdlib_tree

_DEF = re.compile(rb"(?m)^(?:async\s+)?def\s")


@dataclass(frozen=True)
class FileFacts:
    """One module's facts (see the module docstring)."""

    cuda_only: dict[str, gates.Hit] = field(default_factory=dict)  # top-level function -> why
    calls: dict[str, frozenset[str]] = field(default_factory=dict)  # top-level function -> first-party calls
    values: dict[str, frozenset[str]] = field(default_factory=dict)  # name -> devices it is compared with
    device_names: frozenset[str] = frozenset()
    package: str | None = None  # the top-level package the module belongs to
    kept: frozenset[str] = frozenset()  # torch.cuda.* names a package module keeps (backends.py)
    markers: frozenset[str] = frozenset()  # top-level functions that answer for CUDA by name


@dataclass(frozen=True)
class TreeFacts:
    """The merged facts of a tree, handed to every file's migration."""

    cuda: gates.TreeCuda = gates.TreeCuda({}, frozenset())
    values: dict[str, frozenset[str]] = field(default_factory=dict)  # compared with npu's value in a package
    device_names: frozenset[str] = frozenset()
    cuda_re: re.Pattern | None = None  # text of a call to one of cuda.functions
    kept: frozenset[str] = frozenset()  # names the package keeps CUDA: mock.patch targets keep them too
    # functions that answer for CUDA by name (require_torch_gpu beside require_non_cpu): a
    # test another module decorates with one stays CUDA's; markers_re finds such a decorator
    markers: frozenset[str] = frozenset()
    markers_re: re.Pattern | None = None

    @classmethod
    def merge(cls, files: Iterable[FileFacts | None]) -> TreeFacts:
        files = [f for f in files if f is not None]
        functions: dict[str, gates.Hit] = {}
        for f in files:
            functions.update(f.cuda_only)
        changed = True
        while changed:  # a function calling another module's CUDA-only function is CUDA-only
            changed = False
            for f in files:
                for name, called in f.calls.items():
                    if name in functions:
                        continue
                    via = next((c for c in sorted(called) if c in functions), None)
                    if via is not None:
                        functions[name] = (f"{via} -> {functions[via][0]}", functions[via][1])
                        changed = True
        values: dict[str, set[str]] = {}
        for f in files:
            for name, devices in f.values.items():
                values.setdefault(name, set()).update(devices)
        cuda_re = None
        if functions:
            cuda_re = re.compile(
                rb"(?<![\w])(?:" + b"|".join(re.escape(n.encode()) for n in sorted(functions)) + rb")\b"
            )
        markers = frozenset().union(*(f.markers for f in files)) if files else frozenset()
        markers_re = None
        if markers:
            markers_re = re.compile(
                rb"@[\w.\s]*?(?<![\w])(?:" + b"|".join(re.escape(n.encode()) for n in sorted(markers)) + rb")\b"
            )
        return cls(
            gates.TreeCuda(functions, frozenset(f.package for f in files if f.package)),
            {n: frozenset(d) for n, d in values.items() if NPU in d},
            frozenset().union(*(f.device_names for f in files)) if files else frozenset(),
            cuda_re,
            frozenset().union(*(f.kept for f in files)) if files else frozenset(),
            markers,
            markers_re,
        )


def file_facts(rules: RuleSet, data: bytes, in_package: bool, package: str | None) -> FileFacts | None:
    """The facts of one module (None: it holds none), parsing it only when its text can."""
    cuda = (
        bool(_DEF.search(data))
        and rules.kernel_re is not None
        and rules.may_match(data, (PYTHON_CODE,))  # cheap: no rule word, nothing CUDA-only
        and bool(rules.kernel_re.search(data))
    )
    holds_here = backends.may_hold(data)
    values = in_package and holds_here
    devices = flows.may_flow(rules, data)
    if not (cuda or holds_here or devices or package):
        return None
    if not (cuda or holds_here or devices):
        return FileFacts(package=package)
    tree = stdlib_tree(data)
    if tree is None:
        return FileFacts(package=package)
    cuda_only: dict[str, gates.Hit] = {}
    if cuda:
        cuda_only = gates.cuda_only_functions(rules, tree)
    calls = _first_party_calls(tree, package) if _DEF.search(data) else {}
    compared = backends.value_mentions(tree, compared_only=True) if values else {}
    holds = backends.scan(rules, tree, data.split(b"\n")) if holds_here else None
    return FileFacts(
        cuda_only,
        calls,
        {n: frozenset(d) for n, d in compared.items() if rules.value_literal(n) is not None},
        flows.device_variables(rules, tree) if devices else frozenset(),
        package,
        _kept(rules, tree, holds) if values and holds is not None else frozenset(),
        holds.cuda_defs if holds is not None else frozenset(),
    )


def _kept(rules: RuleSet, tree: ast.Module, holds: backends.Holds) -> frozenset[str]:
    """The renamed names (torch.cuda.empty_cache) a module uses where they stay CUDA."""
    if not holds.regions:
        return frozenset()
    imports = flat_imports(tree)
    kept = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            q = qualified(node, imports)
            hit = rules.name_rule(q) if q else None
            if hit is not None and hasattr(hit[0], "new"):
                if holds.at(node.lineno, node.col_offset + 1, hit[0].code) is not None:
                    kept.add(q)
    return frozenset(kept)


def _first_party_calls(tree: ast.Module, package: str | None) -> dict[str, frozenset[str]]:
    """top-level function -> the names it calls that it imports from its own package
    (relative imports, or absolute ones under `package`)."""
    imports = flat_imports(tree)
    own = {
        local
        for local, q in imports.items()
        if q.startswith(".") or (package is not None and q.split(".")[0] == package)
    }
    for node in tree.body:  # and the module's own functions, which may call those
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own.add(node.name)
            imports.setdefault(node.name, node.name)
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            called = {
                n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            } & own
            if called:
                out[node.name] = frozenset(imports[c].rsplit(".", 1)[-1] for c in called)
    return out


@dataclass(frozen=True)
class Place:
    """Where a file sits, as its migration needs it: the tree's facts, whether it is a
    module of a package (a folder with __init__.py), and when `import torch_npu` is added
    (rules/kinds/add_import.py: scripts, always, never)."""

    facts: TreeFacts | None = None
    in_package: bool = False
    torch_npu_import: str = "scripts"
    # the module is CUDA's one of a set of per-device modules (accelerators/cuda.py beside
    # mps.py and xla.py): the devices of its siblings (python/backends.py keeps it whole)
    device_siblings: tuple[str, ...] = ()
