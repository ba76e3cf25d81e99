"""The stdlib `ast` side of a Python file, for the scans that run before the rewrite walk
(python/skipping.py, gates.py, flows.py): a quiet parse, and flat name resolution. Every
import in the file counts everywhere: an over-approximation, fine for questions whose
wrong answer is a manual finding."""

from __future__ import annotations

import ast
import warnings


def stdlib_tree(data: bytes) -> ast.Module | None:
    """The stdlib parser's tree, or None where it disagrees with libcst (newer syntax, null
    bytes); the file's own warnings (invalid escapes) are not ours to print."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def flat_imports(tree: ast.Module, nodes: list[ast.AST] | None = None) -> dict[str, str]:
    """local name -> qualified name, for every import in the file (relative modules
    keep their leading dots: `from .ops.triton import f` -> ".ops.triton.f"). `nodes`: the
    file's nodes when a caller has already walked it."""
    cached = getattr(tree, "_flat_imports", None)  # several scans ask for the same tree's
    if cached is not None:
        return dict(cached)
    names: dict[str, str] = {}
    for node in ast.walk(tree) if nodes is None else nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    names.setdefault(root, root)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{module}.{a.name}" if module else a.name
    tree._flat_imports = dict(names)
    return names


def qualified(node: ast.AST, imports: dict[str, str]) -> str | None:
    """The qualified name a Name-rooted attribute chain stands for, or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imports:
        return None
    return ".".join([imports[node.id], *reversed(parts)])
