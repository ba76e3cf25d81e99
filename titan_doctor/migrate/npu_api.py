"""What torch_npu really provides, read statically from its wheel (it cannot be imported
without CANN).

Two jobs: `provided_names` builds the list of names `torch.npu` offers (kept as data in
rules/migrate/npu_api.toml, so a torch.cuda name torch_npu lacks is reported, not renamed),
and `resolves` checks that a dotted name the rules emit exists in the package source.
Refresh the data after a torch_npu release:

    python -m titan_doctor.migrate.npu_api torch_npu-X.whl > rules/migrate/npu_api.toml
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
import zipfile
from pathlib import Path

PACKAGE = "torch_npu"


def wheel_sources(wheel: Path) -> dict[str, str]:
    """Every torch_npu/**/*.py in the wheel, by path, as text."""
    with zipfile.ZipFile(wheel) as zf:
        return {
            n: zf.read(n).decode("utf-8", "replace")
            for n in zf.namelist()
            if n.startswith(PACKAGE + "/") and n.endswith(".py")
        }


def _parse(text: str) -> ast.Module:
    with warnings.catch_warnings():  # the wheel's own invalid escapes are not our concern
        warnings.simplefilter("ignore")
        return ast.parse(text)


def declared_all(sources: dict[str, str], module: str = "torch_npu.npu") -> list[str]:
    """The module's literal __all__ (names it promises, some created by its C extension)."""
    path = _module_file(sources, module)
    return _literal_all(_parse(sources[path])) if path else []


def _module_file(sources: dict[str, str], module: str) -> str | None:
    base = module.replace(".", "/")
    for cand in (base + "/__init__.py", base + ".py"):
        if cand in sources:
            return cand
    return None


def _literal_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return []
    return []


def _bindings(tree: ast.Module) -> set[str]:
    """Top-level names a module defines or imports by name (not `import x` modules)."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names if a.name != "*")
    return out


def provided_names(sources: dict[str, str], module: str = "torch_npu.npu") -> list[str]:
    """Names of `module` (torch.npu is torch_npu.npu): __all__, top-level definitions
    (private ones too: people call torch.cuda.memory._record_memory_history) and
    submodules."""
    path = _module_file(sources, module)
    if path is None:
        raise ValueError(f"{module} not found in the wheel")
    tree = _parse(sources[path])
    names = set(_literal_all(tree)) | _bindings(tree)
    names.update(submodules(sources, module))
    return sorted(n for n in names if not n.startswith("__"))


def submodules(sources: dict[str, str], module: str = "torch_npu.npu") -> list[str]:
    prefix = module.replace(".", "/") + "/"
    subs = set()
    for p in sources:
        if p.startswith(prefix):
            child = p[len(prefix) :].split("/")[0].removesuffix(".py")
            if child and child != "__init__" and not child.startswith("_"):
                subs.add(child)
    return sorted(subs)


def _absolute(module: str, level: int, target: str | None, is_pkg: bool) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    keep = len(parts) - level + (1 if is_pkg else 0)
    base = parts[:keep]
    return ".".join(base + ([target] if target else []))


def _word_in(sources: dict[str, str], paths: list[str], word: str) -> bool:
    pat = re.compile(r"\b" + re.escape(word) + r"\b")
    return any(p in sources and pat.search(sources[p]) for p in paths)


def resolves(sources: dict[str, str], dotted: str, _depth: int = 0) -> bool:
    """True when `dotted` (torch.npu.X... or torch_npu.X...) exists in the package source.

    Follows module files, `from . import` bindings, star imports, classes and their
    bodies. Members of compiled modules (torch_npu._C) count as present when the source
    uses them as `Owner.member` somewhere.
    """
    if dotted.startswith("torch.npu"):
        dotted = "torch_npu.npu" + dotted[len("torch.npu") :]
    parts = dotted.split(".")
    if parts[0] != PACKAGE or _depth > 12:
        return False
    # walk from the package root: a binding (`from .mstx import mstx`) shadows a submodule
    return _resolve_in(sources, PACKAGE, parts[1:], _depth)


def _resolve_in(sources: dict[str, str], module: str, rest: list[str], depth: int) -> bool:
    if not rest:
        return True
    if depth > 12:
        return False
    path = _module_file(sources, module)
    is_pkg = path.endswith("__init__.py")
    tree = _parse(sources[path])
    name, tail = rest[0], rest[1:]
    stars = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return not tail
        if isinstance(node, ast.ClassDef) and node.name == name:
            return all(_word_in({"c": ast.get_source_segment(sources[path], node) or ""}, ["c"], t) for t in tail)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if not tail:
                    return True
                # an instance of a helper class: its members live in the modules it uses
                deps = [path] + [
                    _module_file(sources, _absolute(module, n.level, n.module, is_pkg)) or ""
                    for n in tree.body
                    if isinstance(n, ast.ImportFrom)
                ]
                deps += [p for p in sources if p.startswith(path.rsplit("/", 1)[0] + "/")]
                return all(_word_in(sources, deps, t) for t in tail)
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, node.level, node.module, is_pkg)
            for alias in node.names:
                if alias.name == "*":
                    stars.append(target)
                elif (alias.asname or alias.name) == name:
                    full = f"{target}.{alias.name}"
                    if _module_file(sources, full):
                        return _resolve_in(sources, full, tail, depth + 1)
                    if _module_file(sources, target) and target != module:
                        return _resolve_in(sources, target, [alias.name] + tail, depth + 1)
                    # compiled module: accept members the Python source itself uses
                    return not tail or _word_in(sources, list(sources), ".".join([alias.name] + tail))
    for target in stars:
        if _module_file(sources, target) and _resolve_in(sources, target, rest, depth + 1):
            return True
    sub = f"{module}.{name}"
    if _module_file(sources, sub):
        return _resolve_in(sources, sub, tail, depth + 1)
    return False


def render_toml(sources: dict[str, str], version: str) -> str:
    def listing(names):
        return "[\n" + "".join(f'    "{n}",\n' for n in names) + "]"

    lines = [
        "# Names torch.npu provides (torch.npu is torch_npu.npu), read statically from the",
        f"# torch_npu {version} wheel. Regenerate: python -m titan_doctor.migrate.npu_api WHEEL",
        "[torch_npu]",
        f'version = "{version}"',
        f'source = "torch_npu {version} wheel (PyPI): torch_npu/npu/__init__.py (__all__, '
        'top-level definitions) and its public submodules"',
        f"npu = {listing(provided_names(sources))}",
        "",
        "# torch.npu.<submodule>.<name>",
        "[torch_npu.submodules]",
    ]
    for sub in submodules(sources):
        module = f"torch_npu.npu.{sub}"
        if _module_file(sources, module):
            lines.append(f"{sub} = {listing(provided_names(sources, module))}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m titan_doctor.migrate.npu_api torch_npu-X.whl", file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    version = wheel.name.split("-")[1]
    sys.stdout.write(render_toml(wheel_sources(wheel), version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
