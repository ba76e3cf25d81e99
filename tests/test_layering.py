"""The boundaries docs/architecture.md draws.

- Layers: in each package, a module imports only from a lower layer or from its own unit
  (a subpackage or a top-level module); two units on one layer do not know each other.
  Imports inside functions count: a deferred import that goes up is still a cycle.
- titan_train imports nothing from titan_doctor; titan_knowledge (the rules/ loader both
  tools share) imports neither tool nor torch.
- Only titan_train/runtime/device.py talks to torch.npu / torch.cuda, and only device.py and
  models/kernels.py (the fused NPU ops) import torch_npu, inside a function, so importing
  any trainer module works on a machine without CANN."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Packages whose __init__ is only a docstring (the layer picture): nothing to place.
PACKAGE_DOCS = {"titan_doctor.migrate"}

# Bottom layer first. A unit is a subpackage or module; a module belongs to the unit with the
# longest matching name. The package's own __init__ (its version) is importable from anywhere.
LAYERS = {
    "titan_train": [
        ["titan_train.runtime"],
        ["titan_train.config"],
        ["titan_train.models", "titan_train.components", "titan_train.data", "titan_train.memory"],
        ["titan_train.distributed", "titan_train.checkpoint.formats"],
        ["titan_train.checkpoint"],
        ["titan_train.step"],
        ["titan_train.build"],
        ["titan_train.validation"],
        ["titan_train.train"],
        ["titan_train.cli"],
        ["titan_train.__main__"],
    ],
    "titan_doctor": [
        ["titan_doctor.findings"],
        # the codemod's own layers (titan_doctor/migrate/__init__.py draws them)
        ["titan_doctor.migrate.cstutil", "titan_doctor.migrate.suppress", "titan_doctor.migrate.npu_api"],
        ["titan_doctor.migrate.context"],
        ["titan_doctor.migrate.walk"],
        ["titan_doctor.migrate.rules"],
        ["titan_doctor.migrate.python", "titan_doctor.migrate.text"],
        ["titan_doctor.migrate.notebook"],
        ["titan_doctor.migrate.engine"],
        ["titan_doctor.migrate.command"],
        # diagnose reads migrate's env-var rules (distributed_env: the NCCL -> HCCL names)
        ["titan_doctor.diagnose", "titan_doctor.convert"],
        ["titan_doctor.cli"],
        ["titan_doctor.__main__"],
    ],
}


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _attribute_chains(path: Path) -> set[str]:
    chains = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            chains.add(f"{node.value.id}.{node.attr}")
    return chains


def test_trainer_never_imports_the_doctor():
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "titan_train").rglob("*.py")
        if any(m.split(".")[0] == "titan_doctor" for m in _imported_modules(p))
    ]
    assert offenders == []


def test_the_knowledge_loader_stands_alone():
    imported = {m.split(".")[0] for p in (REPO / "titan_knowledge").rglob("*.py") for m in _imported_modules(p)}
    assert imported & {"titan_train", "titan_doctor", "torch", "numpy"} == set()


TORCH_NPU_IMPORTERS = {"runtime/device.py", "models/kernels.py"}


def test_only_the_device_and_kernels_modules_touch_npu_or_cuda_apis():
    offenders = []
    for p in (REPO / "titan_train").rglob("*.py"):
        if p.relative_to(REPO / "titan_train").as_posix() not in TORCH_NPU_IMPORTERS and "torch_npu" in {
            m.split(".")[0] for m in _imported_modules(p)
        }:
            offenders.append(f"{p.name}: imports torch_npu")
        if p.relative_to(REPO / "titan_train").as_posix() != "runtime/device.py":
            offenders += [f"{p.name}: {c}" for c in _attribute_chains(p) & {"torch.npu", "torch.cuda"}]
    assert offenders == []


def test_torch_npu_is_never_imported_at_module_level():
    offenders = []
    for p in (REPO / "titan_train").rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        in_functions = {
            id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if id(node) not in in_functions:
                offenders += [f"{p.name}:{node.lineno}" for n in names if n.split(".")[0] == "torch_npu"]
    assert offenders == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_with_origin(path: Path) -> set[str]:
    """Every module a file imports, `from a import b` also as `a.b` (b may be a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _unit(name: str, tiers: list[list[str]]) -> tuple[str, int] | None:
    best = None
    for level, units in enumerate(tiers):
        for unit in units:
            if (name == unit or name.startswith(unit + ".")) and (best is None or len(unit) > len(best[0])):
                best = (unit, level)
    return best


def _layer_violations(package: str) -> tuple[list[str], list[str]]:
    tiers, unplaced, wrong = LAYERS[package], [], []
    for path in sorted((REPO / package).rglob("*.py")):
        name = _module_name(path)
        if name == package or name in PACKAGE_DOCS:
            continue
        here = _unit(name, tiers)
        if here is None:
            unplaced.append(name)
            continue
        for imported in _imports_with_origin(path):
            if imported.split(".")[0] != package or imported == package:
                continue
            there = _unit(imported, tiers)
            if there is None or there[0] == here[0] or here[0].startswith(there[0] + "."):
                continue  # not a module (a name from a package), its own unit, or its parent's __init__
            if there[1] >= here[1]:
                how = "a sibling on its layer" if there[1] == here[1] else "up a layer"
                wrong.append(f"{name} imports {imported} ({how}: {there[0]})")
    return unplaced, sorted(wrong)


def test_every_module_has_a_layer():
    """A new subpackage or top-level module must be placed in LAYERS (and in docs/architecture.md)."""
    assert [_layer_violations(p)[0] for p in LAYERS] == [[] for _ in LAYERS]


def test_imports_point_down_the_layers():
    assert {p: _layer_violations(p)[1] for p in LAYERS} == {p: [] for p in LAYERS}


def test_the_layer_test_catches_an_upward_import(tmp_path, monkeypatch):
    """The checker itself can fail: a runtime module importing the trainer's loop is caught."""
    fake = tmp_path / "titan_train"
    (fake / "runtime").mkdir(parents=True)
    (fake / "runtime" / "x.py").write_text("from titan_train.train import main\nfrom titan_train.config import job\n")
    (fake / "models").mkdir()
    (fake / "models" / "y.py").write_text("def f():\n    from titan_train.data import stream\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    unplaced, wrong = _layer_violations("titan_train")
    assert unplaced == []
    assert wrong == [
        "titan_train.models.y imports titan_train.data (a sibling on its layer: titan_train.data)",
        "titan_train.models.y imports titan_train.data.stream (a sibling on its layer: titan_train.data)",
        "titan_train.runtime.x imports titan_train.config (up a layer: titan_train.config)",
        "titan_train.runtime.x imports titan_train.config.job (up a layer: titan_train.config)",
        "titan_train.runtime.x imports titan_train.train (up a layer: titan_train.train)",
        "titan_train.runtime.x imports titan_train.train.main (up a layer: titan_train.train)",
    ]
