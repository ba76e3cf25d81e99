"""The libcst transformer: rewrites one parsed module by the rules, collecting findings.

Names are resolved through import bindings (scopes.py), never by spelling, so
`import torch as th; th.cuda.synchronize()` and `from torch.cuda import synchronize as sync`
are both seen as torch.cuda.synchronize. A rewrite keeps the user's spelling: an aliased
binding keeps its alias, and only the part of the chain that names CUDA changes.
Literals are rewritten only where the call, comparison or variable says what they are.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.rules import RuleSet
from titan_doctor.migrate.scopes import Scopes, full_name
from titan_doctor.migrate.skipping import Span, StatementMap

_STATEMENTS = (cst.BaseSmallStatement, cst.BaseCompoundStatement)

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


def respell(node: cst.BaseExpression, parts: list[str]) -> cst.BaseExpression:
    """The chain with each name set to `parts` (same length), whitespace and comments kept."""
    if isinstance(node, cst.Attribute):
        attr = node.attr if node.attr.value == parts[-1] else node.attr.with_changes(value=parts[-1])
        return node.with_changes(value=respell(node.value, parts[:-1]), attr=attr)
    return node if node.value == parts[0] else node.with_changes(value=parts[0])


def import_module_path(parts: list[str]) -> list[str]:
    """torch.npu is registered in sys.modules, its submodules are not: import those from
    torch_npu.npu (the same objects)."""
    if parts[:2] == ["torch", "npu"] and len(parts) > 2:
        return ["torch_npu", "npu"] + parts[2:]
    return parts


class Migrator(cst.CSTTransformer):
    """Applies a RuleSet to one module; `findings` and `needs_npu` are read afterwards.

    One pass, no libcst metadata (see scopes.py for why): bindings come from `Scopes`,
    lines from counting Newline tokens as the walk passes them, columns from finding the
    node's text on that line of the source.
    """

    def __init__(self, rules: RuleSet, path: str, source: str,
                 statements: StatementMap | None = None) -> None:
        super().__init__()
        self._map = statements
        self._skipped: dict[int, tuple[Span, bool]] = {}
        self.rules, self.path = rules, path
        self.scopes = Scopes()
        self.findings: list[Finding] = []
        self.needs_npu = False
        self.changed = False  # set by every rewrite: an untouched module skips codegen
        self._source_lines = source.splitlines()
        self._line = 1
        self._lines: dict[int, int] = {}   # id(node) -> line where it starts
        self._cols: dict[int, int] = {}    # line -> where the last column search ended
        self._in_import = 0
        self._inner: set[int] = set()      # nodes inside a longer chain: the chain decides
        self._called: set[int] = set()     # attribute nodes that are the func of a call
        self._lits: dict[int, dict] = {}   # string nodes in a device/backend position
        self._reported: set[tuple] = set()
        self._report_uses: dict[str, list[int]] = {}  # report rule -> [finding index, more]

    # -- positions --------------------------------------------------------------------------
    def visit_Newline(self, node: cst.Newline) -> None:
        self._line += 1

    def visit_SimpleWhitespace(self, node: cst.SimpleWhitespace) -> None:
        self._line += node.value.count("\n")  # backslash continuations

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self._line += node.value.count("\n")

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Name, cst.Attribute, cst.SimpleString, cst.FormattedString,
                             cst.ImportAlias)):
            self._lines[id(node)] = self._line
            if isinstance(node, cst.SimpleString):
                self._line += node.value.count("\n")  # triple-quoted strings
        elif self._map is not None and isinstance(node, _STATEMENTS):
            span = self._map.take()
            if span is not None:
                small = isinstance(node, cst.BaseSmallStatement)
                if small:
                    self._line = span.start
                if self._map.skippable(node, span):
                    super().on_visit(node)  # binding hooks still run (defs, assignments)
                    self._map.step_over(span)
                    self._skipped[id(node)] = (span, small)
                    return False
        return super().on_visit(node)

    def on_visit_attribute(self, node, attribute) -> None:
        """No per-field hooks are used: skip libcst's lookup for them (a third of a walk)."""

    def on_leave_attribute(self, original_node, attribute) -> None:
        pass

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        skipped = self._skipped.pop(id(original), None)
        result = super().on_leave(original, updated)
        if skipped is not None:
            span, small = skipped
            self._line = span.end if small else span.end + 1
        return result

    def _position(self, node: cst.CSTNode) -> tuple[int, int]:
        line = self._lines.get(id(node), self._line)
        text = _anchor(node)
        src = self._source_lines[line - 1] if 0 < line <= len(self._source_lines) else ""
        start = self._cols.get(line, 0)
        col = src.find(text, start) if text else -1
        if col < 0 and text:
            col = src.find(text)
        if col >= 0:
            self._cols[line] = col + 1
            col += text.startswith(".")
        return line, max(col, 0) + 1

    # -- scopes -----------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self._bind_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._bind_import(node)

    def _bind_import(self, node) -> None:
        for local, binding in self.scopes.bind_import(node):
            if self._map is not None:
                self._map.note_binding(local, binding[0])
        self._in_import += 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.bind(node.name.value)
        self._inner.add(id(node.name))
        self.visit_Lambda(node)

    def visit_Lambda(self, node: cst.Lambda | cst.FunctionDef) -> None:
        self.scopes.push("function")
        self.scopes.bind_params(node.params)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.bind(node.name.value)
        self._inner.add(id(node.name))
        self.scopes.push("class")

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:  # f(cuda=1): a keyword, not a reference
            self._inner.add(id(node.keyword))

    def visit_AsName(self, node: cst.AsName) -> None:
        self._inner.add(id(node.name))

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
            self._mark_assigned(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.scopes.bind_target(node.target)
        if node.value is not None:
            self._mark_assigned(node.target, node.value)

    def visit_Param(self, node: cst.Param) -> None:
        self._inner.add(id(node.name))
        if node.default is not None:
            self._mark_assigned(node.name, node.default)

    def _mark_assigned(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`device = "cuda"`, `self.backend = "nccl"`, `def f(device="cuda")`."""
        rule = self.rules.assigns.get(_operand_name(target) or "")
        if rule is not None:
            self._mark(value, rule)

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
        self._inner.update(id(n.name) for n in node.names)

    # -- helpers ----------------------------------------------------------------------------
    def _qname(self, node: cst.CSTNode) -> str | None:
        """The qualified name a Name-rooted chain stands for, through its import binding."""
        spelled = dotted(node)
        if spelled is None:
            return None
        binding = self.scopes.lookup(spelled[0])
        if binding is None:
            return None
        return ".".join([binding[0], *spelled[1:]])

    def _add(self, rule: dict, status: Status, node: cst.CSTNode, message: str,
             fix: str | None = None, code: str | None = None) -> None:
        line, col = self._position(node)
        code = code or rule["code"]
        if status is Status.MANUAL:
            key = (code, line, message)
            if key in self._reported:
                return
            self._reported.add(key)
        self.findings.append(Finding(
            code=code, status=status, message=message,
            fix=rule.get("fix", "") if fix is None else fix,
            path=self.path, line=line, col=col))

    def _report_once(self, rule: dict, node: cst.CSTNode, qname: str) -> None:
        """A report rule speaks once per file (at its first use), counting the rest:
        a Triton kernel file is one job for a person, not four hundred."""
        key = rule.get("match") or rule.get("old")
        if key in self._report_uses:
            self._report_uses[key][1] += 1
            return
        self._add(rule, Status.MANUAL, node, self._msg(rule, qname))
        self._report_uses[key] = [len(self.findings) - 1, 0]

    def finish(self) -> list[Finding]:
        """The findings, with "(+N more uses)" on report rules that fired repeatedly."""
        out = list(self.findings)
        for index, more in self._report_uses.values():
            if more:
                f = out[index]
                out[index] = dataclasses.replace(f, message=f"{f.message} (+{more} more in this file)")
        return out

    def _rename_for(self, qname: str, node: cst.CSTNode, report: bool):
        """(rule, k, parts, new name parts, status) when a rename applies to `qname`;
        None otherwise, after reporting a report rule (if `report`) or a missing name."""
        hit = self.rules.name_rule(qname)
        if hit is None:
            return None
        rule, k = hit
        parts = qname.split(".")
        if rule["kind"] == "report":
            if report:
                self._report_once(rule, node, qname)
            return None
        miss = self._gate_miss(rule, parts, k)
        if miss:
            self._report_gate(rule, node, parts, k, miss)
            return None
        status = Status.MANUAL if rule.get("status") == "manual" else Status.FIXED
        return rule, k, parts, rule["new"].split(".") + parts[k:], status

    def _rebound(self, parts: list[str]) -> list[str] | None:
        """What an imported name stands for after its import is rewritten, if it is."""
        hit = self.rules.name_rule(".".join(parts))
        if hit is None or hit[0]["kind"] != "rename" or self._gate_miss(hit[0], parts, hit[1]):
            return None
        return hit[0]["new"].split(".") + parts[hit[1]:]

    def _msg(self, rule: dict, old: str, new: str = "", key: str = "message") -> str:
        return rule[key].format(old=old, new=new, version=self.rules.npu_version)

    def _gate_miss(self, rule: dict, qparts: list[str], k: int) -> int:
        """How many names past the rule's `old` torch_npu lacks a counterpart for
        (0: provided). torch.cuda.memory.x is checked against torch.npu.memory too."""
        if rule.get("gate") is None or len(qparts) <= k:
            return 0
        if rule["gate"] == "members":
            return 0 if qparts[k] in rule["members"] else 1
        if qparts[k] not in self.rules.npu_names:
            return 1
        sub = self.rules.npu_submodules.get(qparts[k])
        if sub is not None and len(qparts) > k + 1 and qparts[k + 1] not in sub:
            return 2
        return 0

    def _report_gate(self, rule: dict, node: cst.CSTNode, qparts: list[str], k: int,
                     depth: int) -> None:
        old = ".".join(qparts[:k + depth])
        self._add(rule, Status.MANUAL, node, self._msg(rule, old, key="gate_message"),
                  fix=rule.get("gate_fix", ""), code=rule["gate_code"])

    # -- marking pass (pre-order) -----------------------------------------------------------
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
                        name = _operand_name(other) or ""
                        if any(fnmatch.fnmatchcase(name, pat) for pat in rule["operands"]):
                            self._mark(lit, rule)
            left = target.comparator

    def _mark(self, node: cst.BaseExpression, rule: dict) -> None:
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            for el in node.elements:
                self._mark(el.value, rule)
        elif isinstance(node, cst.IfExp):  # "cuda" if torch.cuda.is_available() else "cpu"
            self._mark(node.body, rule)
            self._mark(node.orelse, rule)
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
        self.changed = True
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
        self.needs_npu = self.changed = True
        return new_node

    # -- names ------------------------------------------------------------------------------
    def leave_Name(self, original: cst.Name, updated: cst.Name):
        if id(original) in self._inner or self._in_import:
            return updated
        return self._chain(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        if id(original) in self._inner or self._in_import:
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
        self.changed = True
        return updated.with_changes(attr=cst.Name(rule["new"]))

    def _chain(self, original, updated):
        q = self._qname(original)
        if q is None:
            return updated
        spelled = dotted(original)
        if spelled is None or len(spelled) > q.count(".") + 1:
            return updated
        found = self._rename_for(q, original, report=True)
        if found is None:
            return updated
        rule, k, qparts, new_full, status = found
        p_len = len(qparts) - len(spelled) + 1  # components the root name stands for
        msg = self._msg(rule, q, ".".join(new_full))
        if k <= p_len:
            # the CUDA part is inside the import binding: the import is rewritten; the use
            # changes only when an unaliased binding's own name changes (cuda -> npu)
            aliased = (self.scopes.lookup(spelled[0]) or ("", True))[1]
            new_root = (rule["new"].split(".") + qparts[k:p_len])[-1]
            if aliased or new_root == qparts[p_len - 1]:
                return updated
            self._add(rule, status, original, msg)
            self.needs_npu = True
            self.changed = True
            return respell(updated, [new_root, *spelled[1:]])
        rebound = self._rebound(qparts[:p_len])
        if new_full[:p_len] == qparts[:p_len]:
            new_spelled = [spelled[0]] + new_full[p_len:]
        elif rebound and new_full[:len(rebound)] == rebound:
            # the import itself was rewritten (ProfilerActivity now from torch_npu.profiler)
            new_spelled = [spelled[0]] + new_full[len(rebound):]
        elif new_full[0] == "torch_npu":
            new_spelled = new_full
        elif new_full[:2] == ["torch", "npu"]:
            new_spelled = ([self.scopes.torch_alias] + new_full[1:] if self.scopes.torch_alias
                           else ["torch_npu"] + new_full[1:])
        elif new_full[0] == "torch" and self.scopes.torch_alias:
            new_spelled = [self.scopes.torch_alias] + new_full[1:]
        else:
            self._add(rule, Status.MANUAL, original, msg + " (no torch binding here: change by hand)")
            return updated
        self._add(rule, status, original, msg)
        self.needs_npu = True
        self.changed = True
        if len(new_spelled) == len(spelled):  # same shape: rename in place, keep layout
            return respell(updated, new_spelled)
        return build_dotted(new_spelled).with_changes(lpar=updated.lpar, rpar=updated.rpar)

    # -- imports ----------------------------------------------------------------------------
    def leave_SimpleStatementLine(self, original, updated):
        """An import split by module (`from torch.cuda import a, b` where only `a` has an
        NPU counterpart) goes on separate lines, not `;`-joined."""
        if len(original.body) != 1 or len(updated.body) == 1:
            return updated
        stmts = updated.body
        return cst.FlattenSentinel([
            cst.SimpleStatementLine(
                body=[stmt.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
                leading_lines=updated.leading_lines if i == 0 else (),
                trailing_whitespace=(updated.trailing_whitespace if i == len(stmts) - 1
                                     else cst.TrailingWhitespace()))
            for i, stmt in enumerate(stmts)])

    def leave_Import(self, original: cst.Import, updated: cst.Import):
        self._in_import -= 1
        names, changed = [], False
        for orig, alias in zip(original.names, updated.names):
            new = self._import_target(full_name(alias.name), orig, original)
            if new is not None and alias.asname is not None:
                alias = alias.with_changes(name=build_dotted(import_module_path(new)))
                changed = True
            names.append(alias)
        self.changed |= changed
        return updated.with_changes(names=names) if changed else updated

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        self._in_import -= 1
        if updated.relative or updated.module is None or isinstance(updated.names, cst.ImportStar):
            return updated
        module = full_name(updated.module)
        groups: dict[str, list[cst.ImportAlias]] = {}
        changed = False
        for orig, alias in zip(original.names, updated.names):
            name = full_name(alias.name)
            new = self._import_target(f"{module}.{name}", orig, original)
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
            if updated.lpar is None:  # a trailing comma is only legal inside parentheses
                aliases = [*aliases[:-1], aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            stmts.append(updated.with_changes(module=build_dotted(mod.split(".")), names=aliases))
        self.changed = True
        return stmts[0] if len(stmts) == 1 else cst.FlattenSentinel(stmts)

    def _import_target(self, full: str, alias: cst.ImportAlias, stmt) -> list[str] | None:
        """New qualified name for an imported name (None: keep), reporting as it goes."""
        # a third-party import fails on an NPU host by itself; torch's own names are
        # harmless to import and are reported where they are used
        found = self._rename_for(full, alias, report=not full.startswith("torch."))
        if found is None:
            return None
        rule, _, _, new, status = found
        if isinstance(stmt, cst.Import) and alias.asname is None:
            return None  # `import torch.cuda` binds `torch`: the uses are rewritten instead
        self._add(rule, status, alias, self._msg(rule, full, ".".join(new)))
        self.needs_npu = True
        return new


def _anchor(node: cst.CSTNode) -> str:
    """Text to look for on the node's line to find its column."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        parts = dotted(node)
        return ".".join(parts) if parts else ("." + node.attr.value if isinstance(node, cst.Attribute) else "")
    if isinstance(node, cst.SimpleString):
        return node.value.split("\n")[0]
    if isinstance(node, cst.FormattedString):
        return node.start
    if isinstance(node, cst.ImportAlias):
        return full_name(node.name)
    return ""


def _operand_name(node: cst.BaseExpression) -> str | None:
    """`x.device.type` -> "type", `device` -> "device", `dist.get_backend()` -> "get_backend()"."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Call):
        inner = _operand_name(node.func)
        return inner + "()" if inner else None
    return None
