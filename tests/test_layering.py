"""The boundaries ARCHITECTURE.md draws: titan_train imports nothing from titan_doctor,
titan_knowledge (the rules/ loader both tools share) imports neither tool nor torch, and
only titan_train/device.py talks to torch.npu / torch.cuda / torch_npu."""
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


def test_only_the_device_module_touches_npu_or_cuda_apis():
    offenders = []
    for p in (REPO / "titan_train").rglob("*.py"):
        if p.name == "device.py":
            continue
        if "torch_npu" in {m.split(".")[0] for m in _imported_modules(p)}:
            offenders.append(f"{p.name}: imports torch_npu")
        offenders += [f"{p.name}: {c}" for c in _attribute_chains(p) & {"torch.npu", "torch.cuda"}]
    assert offenders == []
