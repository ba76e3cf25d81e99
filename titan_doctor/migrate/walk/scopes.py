"""Import bindings per Python scope, tracked in the walk's own single pass.
`Scopes` is the data; `ScopeTracker` is the piece of the walk (migrator.py) that feeds it.

libcst's QualifiedNameProvider resolves every node of a module up front; measured on
torchtitan it costs ~10x a parse (ScopeProvider alone ~5x), which would make migrate
slower than the whole parse+codegen floor it is measured against. We need one question
answered, "which import does this root name come from, here?", so we track bindings as
the walk goes: imports bind qualified names, everything else (parameters,
assignments, loop/with/except targets, defs, classes) binds a plain local that shadows
them. Class bodies do not leak into nested functions; `global` goes to the module.

Known limit (documented in tests): a use that precedes a local rebinding of the same name
in the same function resolves to the outer import. Python would raise
UnboundLocalError there, so the rewrite cannot make working code wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from titan_doctor.migrate.context import Binding, Context
from titan_doctor.migrate.cstutil import full_name
from titan_doctor.migrate.walk.positions import Positions


@dataclass
class _Scope:
    kind: str  # module | function | class | comprehension
    names: dict[str, Binding | None] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)


class Scopes:
    """A stack of scopes with `lookup(name)` -> the import binding visible there, or None."""

    def __init__(self) -> None:
        self.stack = [_Scope("module")]
        self.torch_alias: str | None = None  # module-level name bound to `torch`
        self.imports_torch = False  # a module-level import of torch or torch.*
        self.imports_torch_nested = False  # torch imported only inside a function/class
        self.has_torch_npu = False  # a module-level import of torch_npu exists
        self.star_modules: list[str] = []  # `from M import *` at module level

    @property
    def at_module(self) -> bool:
        return len(self.stack) == 1

    def push(self, kind: str) -> None:
        self.stack.append(_Scope(kind))

    def pop(self) -> None:
        self.stack.pop()

    def bind(self, name: str, binding: Binding | None = None) -> None:
        scope = self.stack[-1]
        if name in scope.globals:
            scope = self.stack[0]
        # a name that *may* come from an import keeps that meaning (try/except fallbacks)
        if binding is not None or scope.names.get(name) is None:
            scope.names[name] = binding

    def bind_target(self, target: cst.CSTNode) -> None:
        """Names bound by an assignment/for/with target."""
        if isinstance(target, cst.Name):
            self.bind(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self.bind_target(el.value)
        elif isinstance(target, cst.StarredElement):
            self.bind_target(target.value)

    def bind_params(self, params: cst.Parameters) -> None:
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            self.bind(p.name.value)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                self.bind(star.name.value)

    def declare_global(self, names) -> None:
        self.stack[-1].globals.update(n.name.value for n in names)

    def bind_import(self, node: cst.Import | cst.ImportFrom) -> list[tuple[str, Binding]]:
        """Bind the names an import statement defines; returns the import bindings made."""
        made: list[tuple[str, Binding]] = []
        if isinstance(node, cst.Import):
            for a in node.names:
                full = full_name(a.name)
                self._note_module(full, a.asname)
                if a.asname is not None:
                    made.append((full_name(a.asname.name), (full, True)))
                else:
                    root = full.split(".")[0]
                    made.append((root, (root, False)))
        else:
            module = full_name(node.module) if node.module is not None else ""
            root = module.split(".")[0]
            self.imports_torch_nested |= not self.at_module and not node.relative and root == "torch"
            if self.at_module and not node.relative:
                self.has_torch_npu |= root == "torch_npu"
                self.imports_torch |= root == "torch"
            if isinstance(node.names, cst.ImportStar):
                if self.at_module and not node.relative:
                    self.star_modules.append(module)
                return []
            for a in node.names:
                name = full_name(a.name)
                local = full_name(a.asname.name) if a.asname else name
                if node.relative:
                    self.bind(local)
                else:
                    made.append((local, (f"{module}.{name}", a.asname is not None)))
        for local, binding in made:
            self.bind(local, binding)
        return made

    def _note_module(self, full: str, asname) -> None:
        root = full.split(".")[0]
        if not self.at_module:
            self.imports_torch_nested |= root == "torch"
            return
        if root == "torch_npu":
            self.has_torch_npu = True
        self.imports_torch |= root == "torch"
        if full == "torch" and self.torch_alias is None:
            self.torch_alias = full_name(asname.name) if asname is not None else "torch"
        elif root == "torch" and asname is None and self.torch_alias is None:
            self.torch_alias = "torch"

    def bound(self, name: str) -> bool:
        """True when `name` has any binding visible here (an import or a plain local)."""
        innermost = len(self.stack) - 1
        for i in range(innermost, -1, -1):
            scope = self.stack[i]
            if scope.kind == "class" and i != innermost:
                continue
            if name in scope.names or name in scope.globals:
                return True
        return False

    def lookup(self, name: str) -> Binding | None:
        innermost = len(self.stack) - 1
        for i in range(innermost, -1, -1):
            scope = self.stack[i]
            if scope.kind == "class" and i != innermost:
                continue  # class bodies are not visible from nested scopes
            if name in scope.globals:
                return self.stack[0].names.get(name)
            if name in scope.names:
                return scope.names[name]
        return None


class ScopeTracker:
    """The walk's binding hooks: imports bind qualified names, everything else binds a
    local; names that are not references (def/class names, keywords, parameters, `as`
    targets, `global` lists) go to ctx.inner so no rewriter treats them as uses. Each
    import binding is told to `positions` (a line using an alias cannot be skipped);
    `ruled(module)`: does a rule match names under it (a star import of such a module
    stops statement skipping)."""

    def __init__(self, ctx: Context, scopes: Scopes, positions: Positions, ruled: Callable[[str], object]) -> None:
        self.ctx, self.scopes, self.positions = ctx, scopes, positions
        self._ruled = ruled

    def visit_Import(self, node: cst.Import) -> None:
        stars = len(self.scopes.star_modules)
        for local, binding in self.scopes.bind_import(node):
            self.positions.note_binding(local, binding[0])
        if len(self.scopes.star_modules) > stars and self._ruled(self.scopes.star_modules[-1]):
            self.positions.stop_skipping()  # any bare name may come from it now

    visit_ImportFrom = visit_Import

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.bind(node.name.value)
        self.ctx.inner.add(id(node.name))
        self.visit_Lambda(node)

    def visit_Lambda(self, node: cst.Lambda | cst.FunctionDef) -> None:
        self.scopes.push("function")
        self.scopes.bind_params(node.params)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.bind(node.name.value)
        self.ctx.inner.add(id(node.name))
        self.scopes.push("class")

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:  # f(cuda=1): a keyword, not a reference
            self.ctx.inner.add(id(node.keyword))

    def visit_AsName(self, node: cst.AsName) -> None:
        self.ctx.inner.add(id(node.name))

    def visit_Param(self, node: cst.Param) -> None:
        self.ctx.inner.add(id(node.name))

    def _push_comp(self, node) -> None:
        self.scopes.push("comprehension")

    def _pop_scope(self, original, updated):
        self.scopes.pop()
        return updated

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _push_comp
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _pop_scope
    leave_FunctionDef = leave_Lambda = leave_ClassDef = _pop_scope

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.scopes.bind_target(node.target)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self.scopes.bind_target(t.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.scopes.bind_target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.scopes.bind_target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.scopes.bind_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.scopes.bind_target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.scopes.bind_target(node.asname.name)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self.scopes.bind_target(node.name.name)

    def visit_Global(self, node: cst.Global) -> None:
        self.scopes.declare_global(node.names)
        self.ctx.inner.update(id(n.name) for n in node.names)
