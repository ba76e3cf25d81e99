"""The libcst transformer: rewrites one parsed module by the rules, collecting findings.

Names are resolved through import bindings (QualifiedNameProvider), never by spelling, so
`import torch as th; th.cuda.synchronize()` and `from torch.cuda import synchronize as sync`
are both seen as torch.cuda.synchronize. A rewrite keeps the user's spelling: an aliased
binding keeps its alias, and only the part of the chain that names CUDA changes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import PositionProvider, QualifiedNameProvider, QualifiedNameSource

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.rules import RuleSet

DEVICE_RE = re.compile(r"^cuda(:\d+)?$")
FSTRING_DEVICE_RE = re.compile(r"^cuda(:|$)")
BACKEND_RE = re.compile(r"^(?:\w+:)?\w+(?:,(?:\w+:)?\w+)*$")
COMPARE_OPS = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)


def rewrite_literal(kind: str, value: str) -> str | None:
    """The NPU spelling of a device/backend string, or None when it is not one."""
    if kind == "device":
        return "npu" + value[4:] if DEVICE_RE.match(value) else None
    if BACKEND_RE.match(value) and re.search(r"\bnccl\b", value):
        return re.sub(r"\bcuda:", "npu:", re.sub(r"\bnccl\b", "hccl", value))
    return None


def dotted(node: cst.BaseExpression) -> list[str] | None:
    """['th', 'cuda', 'synchronize'] for a Name-rooted attribute chain, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return parts[::-1]


def build_dotted(parts: list[str]) -> cst.BaseExpression:
    node: cst.BaseExpression = cst.Name(parts[0])
    for p in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(p))
    return node


def replace_root(node: cst.BaseExpression, name: str) -> cst.BaseExpression:
    if isinstance(node, cst.Attribute):
        return node.with_changes(value=replace_root(node.value, name))
    return node.with_changes(value=name)


def import_module_path(parts: list[str]) -> list[str]:
    """torch.npu is registered in sys.modules, its submodules are not: import those from
    torch_npu.npu (the same objects)."""
    if parts[:2] == ["torch", "npu"] and len(parts) > 2:
        return ["torch_npu", "npu"] + parts[2:]
    return parts


@dataclass
class Bindings:
    """Import bindings of a module: local name -> (imported qualified name, aliased)."""

    names: dict[str, tuple[str, bool]] = field(default_factory=dict)
    torch_alias: str | None = None
    has_torch_npu: bool = False


class _BindingCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.b = Bindings()
        self.depth = 0

    def visit_FunctionDef(self, node) -> None:
        self.depth += 1

    def leave_FunctionDef(self, node) -> None:
        self.depth -= 1

    def visit_Import(self, node: cst.Import) -> bool:
        for a in node.names:
            full = cst.helpers.get_full_name_for_node(a.name) or ""
            if full.split(".")[0] == "torch_npu" and self.depth == 0:
                self.b.has_torch_npu = True
            if a.asname is not None:
                local = cst.helpers.get_full_name_for_node(a.asname.name)
                self.b.names[local] = (full, True)
                if full == "torch":
                    self.b.torch_alias = self.b.torch_alias or local
            else:
                root = full.split(".")[0]
                self.b.names[root] = (root, False)
                if root == "torch":
                    self.b.torch_alias = self.b.torch_alias or "torch"
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None:
            return False
        module = cst.helpers.get_full_name_for_node(node.module) or ""
        if module.split(".")[0] == "torch_npu" and self.depth == 0:
            self.b.has_torch_npu = True
        if isinstance(node.names, cst.ImportStar):
            return False
        for a in node.names:
            name = cst.helpers.get_full_name_for_node(a.name)
            local = cst.helpers.get_full_name_for_node(a.asname.name) if a.asname else name
            self.b.names[local] = (f"{module}.{name}", a.asname is not None)
        return False


def collect_bindings(module: cst.Module) -> Bindings:
    c = _BindingCollector()
    module.visit(c)
    return c.b


class Migrator(cst.CSTTransformer):
    """Applies a RuleSet to one module; `findings` and `needs_npu` are read afterwards."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self, rules: RuleSet, path: str, bindings: Bindings) -> None:
        super().__init__()
        self.rules, self.path, self.b = rules, path, bindings
        self.findings: list[Finding] = []
        self.needs_npu = False
        self._inner: set[int] = set()      # nodes inside a longer chain: the chain decides
        self._called: set[int] = set()     # attribute nodes that are the func of a call
        self._lits: dict[int, dict] = {}   # string nodes in a device/backend position
        self._reported: set[tuple] = set()

    # -- helpers ---------------------------------------------------------------------------
    def _qname(self, node: cst.CSTNode) -> str | None:
        names = self.get_metadata(QualifiedNameProvider, node, set())
        found = sorted(q.name for q in names
                       if q.source is QualifiedNameSource.IMPORT and not q.name.startswith("."))
        return found[0] if found else None

    def _add(self, rule: dict, status: Status, node: cst.CSTNode, message: str,
             fix: str | None = None, code: str | None = None) -> None:
        pos = self.get_metadata(PositionProvider, node).start
        code = code or rule["code"]
        if status is Status.MANUAL:
            key = (code, pos.line, message)
            if key in self._reported:
                return
            self._reported.add(key)
        self.findings.append(Finding(
            code=code, status=status, message=message,
            fix=rule.get("fix", "") if fix is None else fix,
            path=self.path, line=pos.line, col=pos.column + 1))

    def _msg(self, rule: dict, old: str, new: str = "", key: str = "message") -> str:
        return rule[key].format(old=old, new=new, version=self.rules.npu_version)

    def _gate_miss(self, rule: dict, qparts: list[str], k: int) -> bool:
        return (rule.get("gate") == "npu" and len(qparts) > k
                and qparts[k] not in self.rules.npu_names)

    def _report_gate(self, rule: dict, node: cst.CSTNode, qparts: list[str], k: int) -> None:
        old = ".".join(qparts[:k + 1])
        self._add(rule, Status.MANUAL, node, self._msg(rule, old, key="gate_message"),
                  fix=rule.get("gate_fix", ""), code=rule["gate_code"])

    # -- marking pass (pre-order) -----------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, (cst.Attribute, cst.Name)):
            self._inner.add(id(node.value))
        self._inner.add(id(node.attr))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if method is not None:
            self._called.add(id(func))
        q = self._qname(func)
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for rule in self.rules.literal_args:
            callee = rule.get("callee")
            if callee == "*":
                positions = ()
            elif (callee is not None and callee == q) or (
                    rule.get("method") is not None and rule["method"] == method):
                positions = [positional[rule["pos"]]] if rule.get("pos", 99) < len(positional) else []
            else:
                continue
            for a in positions:
                self._mark(a.value, rule)
            for a in node.args:
                if a.keyword is not None and a.keyword.value in rule.get("keywords", ()):
                    self._mark(a.value, rule)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        left = node.left
        for target in node.comparisons:
            if isinstance(target.operator, COMPARE_OPS):
                for lit, other in ((left, target.comparator), (target.comparator, left)):
                    for rule in self.rules.compares:
                        ops = rule["operands"]
                        if not ops or _operand_name(other) in ops:
                            self._mark(lit, rule)
            left = target.comparator

    def _mark(self, node: cst.BaseExpression, rule: dict) -> None:
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            for el in node.elements:
                self._mark(el.value, rule)
        elif isinstance(node, (cst.SimpleString, cst.FormattedString)):
            self._lits.setdefault(id(node), rule)

    # -- strings ----------------------------------------------------------------------------
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        value = original.evaluated_value
        if not isinstance(value, str):
            return updated
        rule = self._lits.get(id(original))
        if rule is not None:
            new = rewrite_literal(rule["literal"], value)
            if new is not None:
                return self._rewrite_string(rule, original, updated, value, new)
        env = self.rules.env_rule(value) if value.isupper() else None
        if env is not None:
            if env.get("new"):
                return self._rewrite_string(env, original, updated, value, env["new"], npu=False)
            self._add(env, Status.MANUAL, original, self._msg(env, value))
            return updated
        for kind, amb in self.rules.ambiguous.items():
            if rewrite_literal(kind, value) is not None:
                self._add(amb, Status.MANUAL, original, self._msg(amb, repr(value)))
        return updated

    def _rewrite_string(self, rule, original, updated, value, new, npu=True):
        head = len(original.prefix) + len(original.quote)
        raw = original.value[head:-len(original.quote)]
        if raw != value:  # escapes inside: leave it to a person
            self._add(rule, Status.MANUAL, original, self._msg(rule, repr(value), repr(new)))
            return updated
        if rule.get("report_only"):
            self._add(rule, Status.MANUAL, original, self._msg(rule, repr(value), repr(new)))
            return updated
        self._add(rule, Status.FIXED, original, self._msg(rule, repr(value), repr(new)))
        self.needs_npu |= npu
        return updated.with_changes(value=original.value[:head] + new + original.value[-len(original.quote):])

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString):
        parts = original.parts
        if not parts or not isinstance(parts[0], cst.FormattedStringText):
            return updated
        text = parts[0].value
        if not FSTRING_DEVICE_RE.match(text):
            return updated
        rule = self._lits.get(id(original))
        shown = cst.Module([]).code_for_node(original)
        if rule is None or rule["literal"] != "device":
            amb = self.rules.ambiguous.get("device")
            if amb is not None:
                self._add(amb, Status.MANUAL, original, self._msg(amb, shown))
            return updated
        new_parts = [updated.parts[0].with_changes(value="npu" + text[4:]), *updated.parts[1:]]
        new_node = updated.with_changes(parts=new_parts)
        if rule.get("report_only"):
            self._add(rule, Status.MANUAL, original, self._msg(rule, shown))
            return updated
        self._add(rule, Status.FIXED, original,
                  self._msg(rule, shown, cst.Module([]).code_for_node(new_node)))
        self.needs_npu = True
        return new_node

    # -- names ------------------------------------------------------------------------------
    def leave_Name(self, original: cst.Name, updated: cst.Name):
        if id(original) in self._inner:
            return updated
        return self._chain(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        if id(original) in self._inner:
            return updated
        out = self._chain(original, updated)
        if out is updated:
            out = self._method(original, updated)
        return out

    def _method(self, original: cst.Attribute, updated: cst.Attribute):
        rule = self.rules.methods.get(original.attr.value)
        if rule is None or (rule["call"] and id(original) not in self._called):
            return updated
        q = self._qname(original) if dotted(original) is not None else None
        if q is not None and q.split(".")[0] in ("torch", "torch_npu"):
            return updated  # torch.cuda itself, not a tensor/module method
        self._add(rule, Status.FIXED, original.attr, self._msg(rule, rule["old"], rule["new"]))
        self.needs_npu = True
        return updated.with_changes(attr=cst.Name(rule["new"]))

    def _chain(self, original, updated):
        q = self._qname(original)
        if q is None:
            return updated
        hit = self.rules.name_rule(q)
        spelled = dotted(original)
        if hit is None or spelled is None:
            return updated
        rule, k = hit
        qparts = q.split(".")
        if len(spelled) > len(qparts):
            return updated
        if rule["kind"] == "report":
            self._add(rule, Status.MANUAL, original, self._msg(rule, q))
            return updated
        if self._gate_miss(rule, qparts, k):
            self._report_gate(rule, original, qparts, k)
            return updated
        p_len = len(qparts) - len(spelled) + 1  # components the root name stands for
        new_full = rule["new"].split(".") + qparts[k:]
        status = Status.MANUAL if rule.get("status") == "manual" else Status.FIXED
        msg = self._msg(rule, q, ".".join(new_full))
        if k <= p_len:
            # the CUDA part is inside the import binding: the import is rewritten; the use
            # changes only when an unaliased binding's own name changes (cuda -> npu)
            local, aliased = self.b.names.get(spelled[0], (None, True))
            new_root = (rule["new"].split(".") + qparts[k:p_len])[-1]
            if aliased or new_root == qparts[p_len - 1]:
                return updated
            self._add(rule, status, original, msg)
            self.needs_npu = True
            return replace_root(updated, new_root)
        if new_full[:p_len] == qparts[:p_len]:
            new_spelled = [spelled[0]] + new_full[p_len:]
        elif new_full[0] == "torch_npu":
            new_spelled = new_full
        elif new_full[:2] == ["torch", "npu"]:
            new_spelled = ([self.b.torch_alias] + new_full[1:] if self.b.torch_alias
                           else ["torch_npu"] + new_full[1:])
        elif new_full[0] == "torch" and self.b.torch_alias:
            new_spelled = [self.b.torch_alias] + new_full[1:]
        else:
            self._add(rule, Status.MANUAL, original, msg + " (no torch binding here: change by hand)")
            return updated
        self._add(rule, status, original, msg)
        self.needs_npu = True
        return build_dotted(new_spelled)

    # -- imports ----------------------------------------------------------------------------
    def leave_Import(self, original: cst.Import, updated: cst.Import):
        names = []
        for alias in updated.names:
            full = cst.helpers.get_full_name_for_node(alias.name) or ""
            new = self._import_target(full, alias, original)
            if new is not None and alias.asname is not None:
                alias = alias.with_changes(name=build_dotted(import_module_path(new)))
            names.append(alias)
        return updated.with_changes(names=names)

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        if updated.relative or updated.module is None or isinstance(updated.names, cst.ImportStar):
            return updated
        module = cst.helpers.get_full_name_for_node(updated.module) or ""
        groups: dict[str, list[cst.ImportAlias]] = {}
        changed = False
        for alias in updated.names:
            name = cst.helpers.get_full_name_for_node(alias.name)
            new = self._import_target(f"{module}.{name}", alias, original)
            if new is None:
                groups.setdefault(module, []).append(alias)
                continue
            changed = True
            new_mod = ".".join(import_module_path(new[:-1]))
            groups.setdefault(new_mod, []).append(alias.with_changes(name=cst.Name(new[-1])))
        if not changed:
            return updated
        stmts = []
        for mod, aliases in groups.items():
            aliases = [*aliases[:-1], aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            stmts.append(updated.with_changes(module=build_dotted(mod.split(".")), names=aliases))
        return stmts[0] if len(stmts) == 1 else cst.FlattenSentinel(stmts)

    def _import_target(self, full: str, alias: cst.ImportAlias, stmt) -> list[str] | None:
        """New qualified name for an imported name (None: keep), reporting as it goes."""
        hit = self.rules.name_rule(full)
        if hit is None:
            return None
        rule, k = hit
        parts = full.split(".")
        if rule["kind"] == "report":
            self._add(rule, Status.MANUAL, alias, self._msg(rule, full))
            return None
        if self._gate_miss(rule, parts, k):
            self._report_gate(rule, alias, parts, k)
            return None
        if isinstance(stmt, cst.Import) and alias.asname is None:
            return None  # `import torch.cuda` binds `torch`: the uses are rewritten instead
        new = rule["new"].split(".") + parts[k:]
        status = Status.MANUAL if rule.get("status") == "manual" else Status.FIXED
        self._add(rule, status, alias, self._msg(rule, full, ".".join(new)))
        self.needs_npu = True
        return new


def _operand_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    return None


def add_torch_npu_import(module: cst.Module) -> tuple[cst.Module, int]:
    """Insert `import torch_npu` after the first top-level torch import (else after the
    leading imports / docstring). Returns the module and the 0-based body index used."""
    body = list(module.body)
    at = None
    lead = 0
    for i, stmt in enumerate(body):
        small = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []
        imports = [s for s in small if isinstance(s, (cst.Import, cst.ImportFrom))]
        docstring = (i == 0 and len(small) == 1 and isinstance(small[0], cst.Expr)
                     and isinstance(small[0].value, (cst.SimpleString, cst.ConcatenatedString)))
        if not imports and not docstring:
            break
        lead = i + 1
        if any(_imports_npu(s) for s in imports):  # torch_npu must come before these
            at = i if at is None else min(at, i)
            break
        if at is None and any(_imports_torch(s) for s in imports):
            at = i + 1
    at = lead if at is None else at
    line = cst.SimpleStatementLine([cst.Import([cst.ImportAlias(cst.Name("torch_npu"))])])
    body.insert(at, line)
    return module.with_changes(body=body), at


def _imports_npu(stmt) -> bool:
    """An import that needs torch_npu loaded first (torch.npu / `from torch import npu`)."""
    if isinstance(stmt, cst.Import):
        return any((cst.helpers.get_full_name_for_node(a.name) or "").startswith("torch.npu")
                   for a in stmt.names)
    if stmt.relative or stmt.module is None:
        return False
    module = cst.helpers.get_full_name_for_node(stmt.module) or ""
    names = [] if isinstance(stmt.names, cst.ImportStar) else [
        cst.helpers.get_full_name_for_node(a.name) for a in stmt.names]
    return module.startswith("torch.npu") or (module == "torch" and "npu" in names)


def _imports_torch(stmt) -> bool:
    if isinstance(stmt, cst.Import):
        return any((cst.helpers.get_full_name_for_node(a.name) or "").split(".")[0] == "torch"
                   for a in stmt.names)
    if stmt.relative or stmt.module is None:
        return False
    return (cst.helpers.get_full_name_for_node(stmt.module) or "").split(".")[0] == "torch"
