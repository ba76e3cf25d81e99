"""The boundaries ARCHITECTURE.md draws: titan_train imports nothing from titan_doctor;
titan_knowledge (the rules/ loader both tools share) imports neither tool nor torch; only
titan_train/runtime/device.py talks to torch.npu / torch.cuda, and only device.py and kernels.py
(the fused NPU ops) import torch_npu, inside a function, so that importing any trainer
module works on a machine without CANN."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "titan_train").rglob("*.py")
                 if any(m.split(".")[0] == "titan_doctor" for m in _imported_modules(p))]
    assert offenders == []


def test_the_knowledge_loader_stands_alone():
    imported = {m.split(".")[0] for p in (REPO / "titan_knowledge").rglob("*.py") for m in _imported_modules(p)}
    assert imported & {"titan_train", "titan_doctor", "torch", "numpy"} == set()


TORCH_NPU_IMPORTERS = {"device.py", "kernels.py"}


def test_only_the_device_and_kernels_modules_touch_npu_or_cuda_apis():
    offenders = []
    for p in (REPO / "titan_train").rglob("*.py"):
        if p.name not in TORCH_NPU_IMPORTERS and "torch_npu" in {m.split(".")[0] for m in _imported_modules(p)}:
            offenders.append(f"{p.name}: imports torch_npu")
        if p.name != "device.py":
            offenders += [f"{p.name}: {c}" for c in _attribute_chains(p) & {"torch.npu", "torch.cuda"}]
    assert offenders == []


def test_torch_npu_is_never_imported_at_module_level():
    offenders = []
    for p in (REPO / "titan_train").rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        in_functions = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for n in ast.walk(f)}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if id(node) not in in_functions:
                offenders += [f"{p.name}:{node.lineno}" for n in names if n.split(".")[0] == "torch_npu"]
    assert offenders == []
