"""Which device checks in a file select a CUDA-only kernel (NPU110).

`if x.device.type == "cuda":` (or `x.is_cuda`, `torch.cuda.is_available()`) often decides
between a CUDA-only kernel (triton, flash-attn, xformers, apex, a CUDA extension) and a
device-generic fallback. Flipping such a check to "npu" sends NPU tensors into the CUDA
kernel; leaving it keeps NPU tensors on the generic path. So before the rewrite walk, the
file is scanned once with the stdlib parser (its tree is already built for statement
skipping) and every check whose guarded code reaches a CUDA-only kernel is listed by line;
the rewriters leave those and report them.

What a check guards: the branches of the `if`/`while`/conditional expression it is the
test of, plus the rest of the function when a branch returns or raises early (or after an
`assert`); elsewhere (`use_triton = x.is_cuda and HAS_TRITON`) the statement itself. A
flag set from a check (`ON_GPU = torch.cuda.is_available()`) carries it to the `if ON_GPU:`
that uses it, and a predicate function that returns one (`def _eligible(x): return x.is_cuda
and ...`) carries it to `if not _eligible(x): return fallback(x)`.
CUDA-only means: a name under a `kernel = true` report rule (resolved through the file's
imports), a name imported from a module whose path matches the kernel_gate rule's
`module_globs` (`from .ops.triton.layer_norm import rms_norm_fn`), a function or method of
this file that uses one (`self._triton_forward(x)`, `kernel[grid](...)`, or hands one on:
`run_tuned(_kernel, x)`, `local_map(...)(_fused)`), an object
built by torch.utils.cpp_extension.load, or another library's switch named for CUDA that the
check is handed to (`MergeOptions(cuda=torch.cuda.is_available())`). Name resolution here
is flat (every import in the file counts everywhere): an over-approximation, which errs on
the safe side (a manual finding, never a wrong rewrite).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from titan_doctor.migrate.rules.kind import glob_re
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import LITERALS
from titan_doctor.migrate.walk.astnames import flat_imports, qualified

_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_CUDA_WORD = LITERALS["device"].cuda
_OPTION_FIX = (
    "on Ascend pass False (or that library's own NPU option, where it has one): a true switch runs its CUDA path"
)
# a keyword named for CUDA handed a value (`cuda=`, `use_cuda=`): see _Scan._cuda_option
_CUDA_KEYWORD = re.compile(rb"[(,]\s*(?:\w+_)?cuda(?:_\w+)?\s*=(?!=)")
_FLAG_VALUES = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Call, ast.Attribute)


_CUDA_ATTR = re.compile(rb"\btorch\s*\.\s*cuda\s*\.\s*([A-Za-z_]\w*)")
# a module path spelled as a string: importlib.import_module("apex.optimizers"),
# name.startswith("bitsandbytes."), an optimizer factory's "apex.FusedAdam" entry
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\.?$")


def may_gate_kernels(rules: RuleSet, data: bytes, tree_cuda_re: re.Pattern | None = None) -> bool:
    """Cheap text check: does the file spell a device check and something CUDA-only (a
    kernel library, NVML, nvidia-smi, a capability, a torch.cuda name torch.npu lacks, a
    CUDA-only function of another module of the tree: `tree_cuda_re`)?"""
    if rules.kernel_gate is None or rules.kernel_re is None or rules.gate_re is None:
        return False
    if not rules.gate_re.search(data):
        return False
    if rules.kernel_re.search(data) or (tree_cuda_re is not None and tree_cuda_re.search(data)):
        return True
    if _CUDA_KEYWORD.search(data):
        return True
    return any(m.group(1).decode() not in rules.npu_names for m in _CUDA_ATTR.finditer(data))


def cuda_only_functions(rules: RuleSet, tree: ast.Module, tree_cuda: TreeCuda | None = None) -> dict[str, Hit]:
    """The top-level functions of a module that use something CUDA-only, directly or by
    calling one that does (for the tree's other modules: python/facts.py)."""
    scan = _Scan(rules, tree, tree_cuda, functions_only=True)
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {name: hit for name, hit in scan.kernel_defs.items() if name in top}


Hit = tuple[str, str]  # (what is CUDA-only, e.g. "_fused -> triton.jit"; the NPU alternative)


@dataclass(frozen=True)
class TreeCuda:
    """The CUDA-only functions of the tree's other modules (python/facts.py), by name, and
    the first-party packages an import of one comes from (relative imports count too)."""

    functions: dict[str, Hit]
    packages: frozenset[str]


def kernel_gate_lines(rules: RuleSet, tree: ast.Module, tree_cuda: TreeCuda | None = None) -> dict[int, Hit]:
    """line -> the CUDA-only code the device check on that line guards, and its NPU
    alternative (the fix of the rule that says it is CUDA-only)."""
    return kernel_gates(rules, tree, tree_cuda)[0]


def kernel_gates(
    rules: RuleSet, tree: ast.Module, tree_cuda: TreeCuda | None = None
) -> tuple[dict[int, Hit], list[ast.stmt]]:
    """(kernel_gate_lines, the statements those checks protect): the body of an `if` whose
    check stays, the rest of the block after `if not <check>: return` or an assert, the
    body of a def or class under a skip decorator. Their own CUDA calls stay CUDA too, so
    the code a kept check guards is left whole (python/pyfile.py holds them)."""
    scan = _Scan(rules, tree, tree_cuda)
    return scan.lines, scan.protected


class _Scan:
    def __init__(
        self, rules: RuleSet, tree: ast.Module, tree_cuda: TreeCuda | None = None, functions_only: bool = False
    ) -> None:
        self.rules = rules
        self.tree_cuda = tree_cuda
        self._strict = False
        self._names_seen: dict[tuple, Hit | None] = {}
        gate = rules.kernel_gate
        self.gate_names = {g for g in gate.gates if not g.startswith(".")}
        self.gate_attrs = {g[1:] for g in gate.gates if g.startswith(".")}
        self.function_re = glob_re(gate.module_globs)
        self.module_re = glob_re((*gate.module_globs, *gate.extension_globs))
        self.tree = tree
        self.nodes = list(ast.walk(tree))  # walked once: the scans below read this list
        self.docstrings = {
            id(n.value) for n in self.nodes if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        }
        self.import_strings = {  # import_module("apex.optimizers"), name.startswith("bitsandbytes.")
            id(a)
            for n in self.nodes
            if isinstance(n, ast.Call) and _imports_by_name(n.func)
            for a in n.args
            if isinstance(a, ast.Constant)
        }
        self.called: set[int] = set()
        self.device = LITERALS["device"]
        self.bindings: dict[str, str] = {}
        self.kernel_objects: dict[str, Hit] = {}
        self.lines: dict[int, Hit] = {}
        self.protected: list[ast.stmt] = []  # what the kept checks guard
        self.kernel_defs: dict[str, Hit] = {}
        self.gate_vars: dict[str, list[int]] = {}  # ON_GPU = torch.cuda.is_available()
        self.gate_funcs: dict[str, list[int]] = {}  # def _eligible(x): return x.is_cuda and ...
        self._bind(tree)
        if functions_only:
            self.called = {id(n.func) for n in self.nodes if isinstance(n, ast.Call)}
            self.kernel_defs = self._kernel_defs()
            return
        self.candidates = self._candidate_lines(tree)
        if not self.candidates:
            return
        self.called = {id(n.func) for n in self.nodes if isinstance(n, ast.Call)}
        self.kernel_defs = self._kernel_defs()
        for node in self.nodes:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, _FLAG_VALUES)
            ):  # a boolean flag, not a value using one
                lines = self._gate_lines(node.value)
                if lines:
                    self.gate_vars.setdefault(node.targets[0].id, []).extend(lines)
        self.gate_funcs = _predicates(self.nodes, self._gate_lines)
        self._walk_block(tree.body, [])

    # -- what names mean --------------------------------------------------------------------
    def _bind(self, tree: ast.Module) -> None:
        self.bindings.update(flat_imports(tree, self.nodes))
        for node in self.nodes:  # ext = load(name=..., sources=[...]): a CUDA extension
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                builder = self._qname(node.value.func)
                if builder in self.rules.kernel_gate.builders:
                    rule = self.rules.names.get(builder)
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            self.kernel_objects[t.id] = (
                                f"{t.id}, built by {builder.rsplit('.', 1)[1]}",
                                rule.fix if rule else "",
                            )

    def _qname(self, node: ast.AST) -> str | None:
        return qualified(node, self.bindings)

    def _kernel_module(self, module: str, called: bool = False) -> bool:
        """called: the last component is a function (a module is never called), so
        extension_globs do not apply to it: `get_cuda_rng_tracker()` is Python."""
        if module.lstrip(".").split(".")[0] == "torch":
            return False  # torch's own modules are rewritten, not kernels
        parts = [c for c in module.strip(".").split(".") if c]
        return any(
            (self.function_re if called and i == len(parts) - 1 else self.module_re).match(c)
            for i, c in enumerate(parts)
        )

    def _kernel_name(self, qname: str, called: bool = False) -> Hit | None:
        """What makes a resolved name CUDA-only (and its NPU alternative), or None (asked
        for every use of every imported name: answered once per name)."""
        key = (qname, called, self._strict)
        if key not in self._names_seen:
            self._names_seen[key] = self._kernel_name_uncached(qname, called)
        return self._names_seen[key]

    def _kernel_name_uncached(self, qname: str, called: bool) -> Hit | None:
        shown = qname.lstrip(".")
        if self._strict:
            rule = self.rules.kernel_rule(shown)
            stays = (shown, rule.fix) if rule is not None else None
        else:
            stays = self.rules.stays_cuda(shown)
        if stays is not None:
            return stays
        tree = self.tree_cuda
        if tree is not None and tree.functions:
            last = shown.rsplit(".", 1)[-1]
            first_party = qname.startswith(".") or shown.split(".")[0] in tree.packages
            if first_party and last in tree.functions:
                return tree.functions[last]
        module = qname.rsplit(".", 1)[0] if "." in qname.strip(".") else qname
        if self._kernel_module(module) or self._kernel_module(qname, called):
            return shown, self._fix_for_module(qname)
        return None

    def _fix_for_module(self, qname: str) -> str:
        """The fix of the kernel library a module path names (".ops.triton.x" -> triton's)."""
        words = set(re.split(r"[._]", qname))
        for key, rule in self.rules.names.items():
            if getattr(rule, "kernel", False) and key.split(".")[0] in words:
                return rule.fix
        return self.rules.kernel_gate.fix

    # -- where kernels are used -------------------------------------------------------------
    def _kernel_defs(self) -> dict[str, Hit]:
        """Functions, methods and classes of this file that use a CUDA-only kernel, directly
        or by calling one that does (one walk of the file, each node counted for every def
        around it; calls are followed afterwards). A class counts by its methods:
        `_Fused.apply(x)` runs its forward."""
        direct: dict[str, Hit] = {}
        calls: dict[str, dict[str, None]] = {}  # in source order: the same explanation every run
        defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        stack: list[tuple[ast.AST, tuple[str, ...]]] = [(n, ()) for n in reversed(self.tree.body)]
        while stack:
            node, owners = stack.pop()
            if owners:
                if any(o not in direct for o in owners):
                    hit = self._kernel_at(node)
                    if hit:
                        for o in owners:
                            direct.setdefault(o, hit)
                name = _called_name(node)
                if name is None and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    name = node.id  # passed on, not called: _run_tuned(_kernel, ...), local_map(...)(f)
                if name is not None:
                    for o in owners:
                        calls[o][name] = None
            if isinstance(node, defs):
                calls.setdefault(node.name, {})
                inner = (*owners, node.name)
                children = [(c, inner) for c in (*node.decorator_list, *node.body)]
            else:
                children = [(c, owners) for c in ast.iter_child_nodes(node)]
            stack.extend(reversed(children))
        found = {name: (f"{name} -> {hit[0]}", hit[1]) for name, hit in direct.items()}
        changed = True
        while changed:
            changed = False
            for name, called in calls.items():
                via = next((c for c in called if c in found and c != name), None) if name not in found else None
                if via is not None:
                    found[name] = (f"{name} -> {found[via][0]}", found[via][1])
                    changed = True
        return found

    def _uses_kernel(self, nodes, strict: bool = False) -> Hit | None:
        """The first CUDA-only thing used in `nodes`; `strict`: kernels only (see _mark)."""
        self._strict = strict
        try:
            for top in nodes:
                for node in ast.walk(top):
                    hit = self._kernel_at(node)
                    if hit:
                        return hit
            return None
        finally:
            self._strict = False

    def _kernel_string(self, value: str, id_: int) -> Hit | None:
        """A string naming a CUDA-only library's module ("apex.", "bitsandbytes.optim"): the
        code imports it by name (the check before it guards that import)."""
        if "." not in value or not _DOTTED.match(value):
            return None
        if id_ not in self.import_strings and not value.endswith("."):
            return None  # "triton.cudagraphs" handed to an inductor config is a key, not a module
        path = value.rstrip(".")
        rule = self.rules.kernel_rule(path) or self.rules.kernel_rule(path.split(".")[0])
        return (repr(value), rule.fix) if rule is not None else None

    def _kernel_at(self, node: ast.AST) -> Hit | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and self.rules.strings:
            if id(node) in self.docstrings:
                return None
            for pattern, rule in self.rules.strings:  # "nvidia-smi" handed to subprocess
                if rule.kernel and pattern.search(node.value):
                    return repr(node.value), rule.fix
            return self._kernel_string(node.value, id(node))
        if (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) and not self._strict
        ):  # props(...).major
            q = self._qname(node.value.func)
            cap = self.rules.capabilities.get(q) if q else None
            if cap is not None and node.attr in cap.attrs:
                return f"{q}(...).{node.attr}", cap.fix
        if isinstance(node, ast.Name):
            if node.id in self.kernel_objects:
                return self.kernel_objects[node.id]
            if node.id in self.kernel_defs:  # a kernel function handed to another call
                return self.kernel_defs[node.id]
            q = self.bindings.get(node.id)
            return self._kernel_name(q, id(node) in self.called) if q else None
        if isinstance(node, ast.Attribute):
            q = self._qname(node)
            return self._kernel_name(q, id(node) in self.called) if q else None
        if isinstance(node, ast.Import):
            return next((self._kernel_name(a.name) for a in node.names if self._kernel_name(a.name)), None)
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            hit = self._kernel_name(module + ".*")
            return (module.lstrip("."), hit[1]) if hit else None
        name = _called_name(node)
        if name is not None and name in self.kernel_defs:
            return self.kernel_defs[name]
        return None

    # -- the device checks ------------------------------------------------------------------
    def _candidate_lines(self, tree: ast.Module) -> set[int]:
        """Lines holding a device check or a flag named like one (one walk of the file)."""
        lines = set(self._gate_lines(tree))
        if not lines:
            return lines  # no check at all: no flag or predicate can hold one either
        flags = {
            n.targets[0].id
            for n in self.nodes
            if isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and n.lineno in lines
        }
        if flags:  # `if ON_GPU:` is a check too
            lines |= {n.lineno for n in self.nodes if isinstance(n, ast.Name) and n.id in flags}
        predicates = _predicates(self.nodes, lambda e: [ln for ln in range(e.lineno, e.end_lineno + 1) if ln in lines])
        if predicates:  # `if _eligible(x):` too
            lines |= {n.lineno for n in self.nodes if _called_name(n) in predicates}
        return lines

    def _touches(self, node: ast.AST) -> bool:
        end = getattr(node, "end_lineno", None) or getattr(node, "lineno", 0)
        start = min([getattr(node, "lineno", 0), *(d.lineno for d in getattr(node, "decorator_list", ()))])
        return any(line in self.candidates for line in range(start, end + 1))

    def _gate_lines(self, expr: ast.AST) -> list[int]:
        """Lines of the device checks inside an expression."""
        lines = []
        for node in ast.walk(expr):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if (
                        isinstance(side, ast.Constant)
                        and isinstance(side.value, str)
                        and (self.device.rewrite(side.value) is not None)
                    ):
                        lines.append(side.lineno)
            elif isinstance(node, ast.Attribute) and node.attr in self.gate_attrs:
                lines.append(node.end_lineno or node.lineno)
            elif isinstance(node, ast.Call) and self._qname(node.func) in self.gate_names:
                lines.append(node.func.lineno)
            elif isinstance(node, ast.Name) and node.id in self.gate_vars:
                lines.extend(self.gate_vars[node.id])  # the check made where the flag was set
            if isinstance(node, ast.Call) and _called_name(node) in self.gate_funcs:
                lines.extend(self.gate_funcs[_called_name(node)])  # the checks the predicate returns
        return lines

    def _mark(
        self, expr: ast.AST, region: list[ast.AST], own: list[ast.AST] = (), guarded: list[ast.stmt] = ()
    ) -> None:
        """`region`: what the check may select; `own`: the check's own statement or
        expression, where only kernels count (a torch.cuda name or a capability next to the
        check in one condition is the condition's to report, NPU111); `guarded`: the
        statements that run only when the check passes, kept with it."""
        lines = self._gate_lines(expr)
        if not lines:
            return
        hit = (
            self._uses_kernel(region)
            or self._uses_kernel(own, strict=True)
            or self._tree_call_in(expr)
            or self._cuda_option(expr)
        )
        if hit:
            for line in lines:
                self.lines.setdefault(line, hit)
            self.protected.extend(guarded)

    def _cuda_option(self, expr: ast.AST) -> Hit | None:
        """A check handed to another library's switch named for CUDA
        (`MergeOptions(cuda=torch.cuda.is_available())`): that library runs its CUDA code
        when the switch is on, which the flipped check would turn on on an NPU. A callee of
        this file or its tree is migrated with it, so its switch moves with the check."""
        for node in ast.walk(expr):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg is None or _CUDA_WORD not in kw.arg.lower().split("_") or not self._gate_lines(kw.value):
                    continue
                q = self._qname(node.func)
                if q is None or q.startswith(".") or q.split(".")[0] in self._first_party():
                    continue
                return f"{q.rsplit('.', 1)[-1]}({kw.arg}=...), {q.split('.')[0]}'s switch for CUDA", _OPTION_FIX
        return None

    def _first_party(self) -> frozenset[str]:
        return self.tree_cuda.packages if self.tree_cuda is not None else frozenset()

    def _tree_call_in(self, expr: ast.AST) -> Hit | None:
        """A CUDA-only function of another module called in the check itself
        (`torch.cuda.is_available() and not check_cuda_fp8_capability()`): no rule names
        it, so the condition's own grouping (NPU111) cannot see it; the check stays here."""
        if self.tree_cuda is None or not self.tree_cuda.functions:
            return None
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                q = self._qname(node.func)
                if q is not None:
                    last = q.lstrip(".").rsplit(".", 1)[-1]
                    first_party = q.startswith(".") or q.split(".")[0] in self.tree_cuda.packages
                    if first_party and last in self.tree_cuda.functions:
                        return self.tree_cuda.functions[last]
        return None

    def _walk_block(
        self, body: list[ast.stmt], after: list[ast.stmt], fn: ast.AST | None = None, chosen: tuple = ()
    ) -> None:
        """`after`: what runs after this block in the enclosing blocks of the same function
        (an early exit or an assert in a nested block guards that too). `fn`: the function
        this block is in, through ifs only: there an `assert <check>` or `if not <check>:
        raise/return` that stays makes the whole function CUDA's (it cannot finish
        elsewhere), so all of it is kept, its defaults too. `chosen`: the tests of the ifs
        of this function the block sits in, which picked the branch an assert or early exit
        guards (`if name.startswith("apex."): assert torch.cuda.is_available()`)."""
        for i, stmt in enumerate(body):
            if not self._touches(stmt):
                continue  # no device check anywhere inside: nothing to decide here
            rest = [*body[i + 1 :], *after]
            if isinstance(stmt, (ast.If, ast.While)):
                region = [*stmt.body, *stmt.orelse]
                negative = _negated(stmt.test)
                guarded = list(stmt.orelse if negative else stmt.body)
                if isinstance(stmt, ast.If) and _exits(stmt):
                    region += [*rest, *chosen]
                    if negative and stmt.body and isinstance(stmt.body[-1], _EXITS):
                        guarded = list(body[i + 1 :])
                        if fn is not None and isinstance(stmt.body[-1], (ast.Return, ast.Raise)):
                            guarded = [fn]
                self._mark(stmt.test, region, guarded=guarded)
                self._walk_exprs(stmt.test)
            elif isinstance(stmt, ast.Assert):
                self._mark(
                    stmt.test, [*rest, *chosen], own=[stmt], guarded=[fn] if fn is not None else list(body[i + 1 :])
                )
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                # @unittest.skipIf(not torch.cuda.is_available(), ...): the check guards the body
                for decorator in stmt.decorator_list:
                    self._mark(decorator, stmt.body, own=[decorator], guarded=list(stmt.body))
                    self._walk_exprs(decorator)
            else:
                self._walk_exprs(stmt, skip_bodies=True)
            scope = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            inner = stmt if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if not scope:
                inner = fn if isinstance(stmt, ast.If) else None  # through ifs only
            for child in _child_blocks(stmt):
                tests = () if scope else chosen
                if isinstance(stmt, ast.If) and child is stmt.body:  # the else is not what the test chose
                    tests = (*chosen, stmt.test)
                self._walk_block(child, [] if scope else rest, inner, tests)

    def _walk_exprs(self, node: ast.AST, skip_bodies: bool = False) -> None:
        """Device checks outside if/while/assert tests: in a conditional expression its
        branches are the region, elsewhere the enclosing statement."""
        for sub in _expressions(node) if skip_bodies else [node]:
            for inner in ast.walk(sub):
                if isinstance(inner, ast.IfExp):
                    self._mark(inner.test, [inner.body, inner.orelse])
            if skip_bodies:
                self._mark(sub, [], own=[sub])


def _imports_by_name(func: ast.AST) -> bool:
    """importlib.import_module, __import__, find_spec, a project's _import_class, and
    str.startswith (a path prefix tested to pick the importer)."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return "import" in name.lower() or name in ("find_spec", "startswith")


def _negated(test: ast.AST) -> bool:
    """`not <check>` (or `<check> != "cuda"`, or an `or` of such): the check passes in the
    else branch."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return all(_negated(v) for v in test.values)
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.NotIn))


def _called_name(node: ast.AST) -> str | None:
    """`f(...)`, `self.f(...)`, `cls.f(...)`, `kernel[grid](...)`: the name of a function of
    this file that the call may run."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Subscript):  # kernel[grid](...)
        func = func.value
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        return func.attr
    return None


def _predicates(nodes: list[ast.AST], gate_lines) -> dict[str, list[int]]:
    """Functions of this file (among `nodes`, the file's walked nodes) whose return value
    holds a device check: name -> its lines."""
    found: dict[str, list[int]] = {}
    for d in nodes:
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = [
                ln
                for r in ast.walk(d)
                if isinstance(r, ast.Return) and r.value is not None
                for ln in gate_lines(r.value)
            ]
            if lines:
                found[d.name] = lines
    return found


def _exits(stmt: ast.If) -> bool:
    """A branch that leaves the block early makes the rest of the block guarded too."""
    return any(branch and isinstance(branch[-1], _EXITS) for branch in (stmt.body, stmt.orelse))


def _child_blocks(stmt: ast.stmt):
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


def _expressions(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a statement holds itself (not those of nested statements)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [*stmt.decorator_list]
    out = []
    for _field, value in ast.iter_fields(stmt):
        if isinstance(value, ast.AST) and not isinstance(value, ast.stmt):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, ast.AST) and not isinstance(v, (ast.stmt, ast.excepthandler)))
    return out
