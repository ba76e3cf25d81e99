"""Device and backend strings ("cuda", "cuda:1", "nccl"), rewritten only where the code
says what they are; reported anywhere else (NPU108 / NPU205).

A string is a device (or backend) when it is given to a call that takes one (literal_arg
rules), compared with a value named like one (compare rules), or bound to such a name
(assign rules). One set of names serves both ends of a value's life, so a producer and
its consumers always change together:

    producers  device = "cuda"; self.device = ...; def f(device="cuda"); f(device="cuda");
               {"device": "cuda"}; cfg["device"] = ...; cfg.get("device", "cuda");
               parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"]);
               device: str = field(default="cuda"); backend: Literal["nccl", "gloo"] = ...
    consumers  args.device == "cuda"; cfg["device"] in ("cuda", "mps");
               args.device.startswith("cuda"); x.device.type != "cuda"

Strings built at run time count by their literal head: "cuda:" + str(rank),
"cuda:%d" % rank, "cuda:{}".format(rank), f"cuda:{rank}".

This is the literals family: the four kinds' schemas are literal_rules.py; here are their
piece, the producer / consumer names derived over all their rules, and the Family.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context, Hold
from titan_doctor.migrate.cstutil import operand_name, plain_text, string_value, with_text
from titan_doctor.migrate.rules.kind import Family, PythonFile, fill, glob_re
from titan_doctor.migrate.rules.kinds.literal_rules import (
    AMBIGUOUS,
    ASSIGN,
    COMPARE,
    LITERAL_ARG,
    Assign,
    Compare,
    LiteralArg,
)
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import LITERALS

COMPARE_OPS = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)


@dataclass(frozen=True)
class _Held:
    """A producer/consumer rule for a value name whose CUDA values stay (python/backends.py)."""

    rule: object
    hold: Hold

    @property
    def literal(self) -> str:
        return self.rule.literal


_FIELD_FACTORIES = ("field", "Field")


class Literals:
    """The piece: marks the strings in a device/backend position on the way down,
    rewrites (or reports) them on the way up."""

    def __init__(self, ctx: Context, rules: RuleSet, file: PythonFile) -> None:
        self.ctx, self.rules = ctx, rules
        self._device_names = file.device_names  # dev = "cuda" ... model.to(dev): python/flows.py
        self._kernel_check = file.kernel_gate
        self._lits: dict[int, tuple[object, bool]] = {}  # id(string) -> (rule, composed head)
        self._assign = {}
        for r in rules.assigns:
            self._assign.setdefault(r.literal, r)
        self._any_call = [r for r in rules.literal_args if r.callee == "*"]
        self._by_callee = [r for r in rules.literal_args if r.callee != "*"]
        self._implicit: dict[int, object] = {}  # id(call) -> rule whose CUDA default is made explicit
        self._device_compare = next((r for r in rules.compares if r.literal == "device"), None)
        self._held_names = file.held_names  # device/backend names whose CUDA values stay
        self._scopes = file.scopes  # --target portable spells its expressions with torch's name

    # -- marking (pre-order): which strings are in a device/backend position ----------------
    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        q = self.ctx.qname(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for rule in self._by_callee:
            if not (_callee_matches(rule.callee, q) or (rule.method is not None and rule.method == method)):
                continue
            given = False
            if rule.pos is not None and rule.pos < len(positional):
                self._mark(positional[rule.pos].value, rule)
                given = True
            for a in node.args:
                if rule.any_arg or (a.keyword is not None and a.keyword.value in rule.keywords):
                    self._mark(a.value, rule)
                    given = given or a.keyword is not None
            if (
                rule.implicit
                and not given
                and not any(a.star for a in node.args)
                and _nameable(rule.positional_names, node.args, positional)
            ):
                self._implicit[id(node)] = rule
        for a in node.args:
            if a.keyword is None:
                continue
            word = a.keyword.value
            for rule in self._any_call:
                if word in rule.keywords:
                    self._mark(a.value, rule)
            produced = self._producer(word)
            if produced is not None:
                self._mark(a.value, produced)
        if method == "parametrize" or (q or "").endswith("mark.parametrize"):
            self._parametrize(node, positional)
        elif method is not None:
            self._method_call(node, func, method, positional)
        elif isinstance(func, cst.Name) and func.value == "getattr" and len(positional) == 3:
            self._keyed_default(positional[1].value, positional[2].value)

    def _method_call(self, node: cst.Call, func: cst.Attribute, method: str, positional) -> None:
        if method == "add_argument":
            self._cli_option(node, positional)
        elif method in ("get", "setdefault", "pop") and len(positional) == 2:
            self._keyed_default(positional[0].value, positional[1].value)
        elif method == "startswith" and positional:
            rule = self._consumer(func.value)
            if rule is not None:
                self._mark(positional[0].value, rule)

    def _cli_option(self, node: cst.Call, positional) -> None:
        """argparse: `--device` / `--dist-backend` (or dest=) names the value its default
        and choices hold."""
        dest = next(
            (string_value(a.value) for a in node.args if a.keyword is not None and a.keyword.value == "dest"), None
        )
        if dest is None:
            flags = [v for v in (string_value(a.value) for a in positional) if v]
            longs = [f for f in flags if f.startswith("--")]
            flag = (longs or flags or [""])[0]
            dest = flag.lstrip("-").replace("-", "_")
        rule = self._producer(dest)
        if rule is None:
            return
        for a in node.args:
            if a.keyword is not None and a.keyword.value in ("default", "choices", "const"):
                self._mark(a.value, rule)

    def _parametrize(self, node: cst.Call, positional) -> None:
        """@pytest.mark.parametrize("device", ["cuda", "cpu"]) binds `device` to each value."""
        args = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        names = args.get("argnames", positional[0].value if positional else None)
        values = args.get("argvalues", positional[1].value if len(positional) > 1 else None)
        text = string_value(names) if names is not None else None
        if text is None or not isinstance(values, (cst.List, cst.Tuple)):
            return
        names = [n.strip() for n in text.split(",")]
        for i, name in enumerate(names):
            rule = self._producer(name)
            if rule is None:
                continue
            for el in values.elements:
                value = el.value
                if isinstance(value, cst.Call) and (operand_name(value.func) or "") == "param":
                    items = [a.value for a in value.args if a.keyword is None]  # pytest.param(...)
                elif len(names) == 1:
                    items = [value]
                elif isinstance(value, (cst.Tuple, cst.List)):
                    items = [e.value for e in value.elements]
                else:
                    continue
                if i < len(items):
                    self._mark(items[i], rule)

    def _keyed_default(self, key: cst.BaseExpression, default: cst.BaseExpression) -> None:
        """cfg.get("device", "cuda"), getattr(args, "device", "cuda")."""
        rule = self._producer(string_value(key) or "")
        if rule is not None:
            self._mark(default, rule)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        left = node.left
        for target in node.comparisons:
            if isinstance(target.operator, COMPARE_OPS):
                for lit, other in ((left, target.comparator), (target.comparator, left)):
                    rule = self._consumer(other)
                    if rule is not None:
                        self._mark(lit, rule)
            left = target.comparator

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._assigned(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._literal_choices(node.target, node.annotation)
        if node.value is not None:
            self._assigned(node.target, node.value)

    def visit_Param(self, node: cst.Param) -> None:
        self._literal_choices(node.name, node.annotation)
        if node.default is not None:
            self._assigned(node.name, node.default)

    def _literal_choices(self, target: cst.BaseExpression, annotation: cst.Annotation | None) -> None:
        """`backend: Literal["nccl", "gloo"] = "nccl"`: the Literal lists the values the name
        may take (config layers such as Megatron's turn it into argparse choices), so it
        changes with the default, or "hccl" would be refused where "nccl" was accepted."""
        rule = self._producer(operand_name(target) or "") if annotation is not None else None
        if rule is None:
            return
        for node in _subscripts(annotation.annotation):
            if (operand_name(node.value) or "").rsplit(".", 1)[-1] == "Literal":
                for el in node.slice:
                    if isinstance(el.slice, cst.Index):
                        self._mark(el.slice.value, rule)

    def visit_Dict(self, node: cst.Dict) -> None:
        for el in node.elements:
            if isinstance(el, cst.DictElement):
                rule = self._producer(string_value(el.key) or "")
                if rule is not None:
                    self._mark(el.value, rule)

    def _assigned(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`device = "cuda"`, `self.backend = "nccl"`, `cfg["device"] = "cuda"`,
        `def f(device="cuda")`, `device: str = field(default="cuda")`."""
        rule = self._producer(operand_name(target) or "")
        if rule is None:
            return
        if isinstance(value, cst.Call) and (operand_name(value.func) or "").rstrip("()") in _FIELD_FACTORIES:
            for a in value.args:
                if a.keyword is not None and a.keyword.value == "default":
                    self._mark(a.value, rule)
            return
        self._mark(value, rule)

    def _producer(self, name: str) -> Assign | None:
        literal = self.rules.value_literal(name) if name else None
        if literal is None and name in self._device_names:
            literal = "device"  # dev = "cuda" ... model.to(dev): see python/flows.py
        rule = self._assign.get(literal) if literal else None
        return self._held(name, rule)

    def _consumer(self, operand: cst.BaseExpression) -> Compare | None:
        name = operand_name(operand) or ""
        rule = self.rules.compare_rule(name)
        if rule is None and isinstance(operand, cst.Name) and name in self._device_names:
            rule = self._device_compare
        return self._held(name, rule)

    def _held(self, name: str, rule):
        """The rule, or a _Held one when `name`'s CUDA values stay in this file."""
        hold = self._held_names.get(name) if rule is not None and self._held_names else None
        return rule if hold is None else _Held(rule, hold)

    def _keep(self, held: _Held, node: cst.CSTNode) -> None:
        """A held name's CUDA value stays, said by the name's hold, or by the value's own
        where python/backends.py gave it one (a hold for these codes alone: `device = "xpu"
        if is_xpu() else "cuda"` lacks npu although the name takes npu's value elsewhere)."""
        own = self.ctx.held(node, held.rule.code)
        self.ctx.keep(own if own is not None and own.codes is not None and own.message else held.hold)

    def _mark(self, node: cst.BaseExpression, rule, composed: bool = False) -> None:
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            for el in node.elements:
                self._mark(el.value, rule)
        elif isinstance(node, cst.IfExp):  # "cuda" if torch.cuda.is_available() else "cpu"
            self._mark(node.body, rule)
            self._mark(node.orelse, rule)
        elif isinstance(node, (cst.SimpleString, cst.FormattedString)):
            self._lits.setdefault(id(node), (rule, composed))
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Modulo)):
            self._mark(node.left, rule, composed=True)  # "cuda:" + str(i), "cuda:%d" % i
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
            self._mark(node.func.value, rule, composed=True)  # "cuda:{}".format(i)

    # -- rewriting --------------------------------------------------------------------------
    def leave_Call(self, original: cst.Call, updated: cst.Call):
        """Make a CUDA default explicit: torch.amp.GradScaler() -> GradScaler(device="npu")."""
        rule = self._implicit.pop(id(original), None)
        if rule is None:
            return updated
        literal = LITERALS[rule.literal]
        value: cst.BaseExpression = cst.SimpleString(f'"{literal.npu}"')
        new = repr(literal.npu)
        if self.rules.portable_exprs:
            portable = self._portable(rule.literal)
            if portable is None:
                self._not_portable(rule, original.func, f"(default {literal.cuda!r})", "no torch binding here")
                return updated
            new, value = portable
        msg = fill(rule.message, old=f"(default {literal.cuda!r})", new=new, version=self.rules.npu_version)
        if not self.ctx.emit(rule.code, Status.FIXED, original.func, msg, rule.fix, rewrite=True):
            return updated
        args = _by_name(list(updated.args), rule.positional_names)
        if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(
            cst.Arg(
                keyword=cst.Name(rule.keywords[0]),
                value=value,
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                ),
            )
        )
        return updated.with_changes(args=args)

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        value = string_value(original)
        if value is None:
            return updated
        entry = self._lits.get(id(original))
        if entry is not None and isinstance(entry[0], _Held):
            if LITERALS[entry[0].literal].rewrite(value) or LITERALS[entry[0].literal].rewrite_head(value):
                self._keep(entry[0], original)
            return updated
        if entry is not None:
            rule, composed = entry
            literal = LITERALS[rule.literal]
            new = literal.rewrite_head(value) if composed else literal.rewrite(value)
            if new is not None:
                return self._rewrite(rule, original, updated, value, new)
        for kind, amb in self.rules.ambiguous.items():
            literal = LITERALS[kind]
            if literal.rewrite(value) is not None or literal.rewrite_head(value) is not None:
                self.ctx.emit(
                    amb.code,
                    Status.MANUAL,
                    original,
                    fill(amb.message, old=repr(value), version=self.rules.npu_version),
                    amb.fix,
                    note=True,
                )
        return updated

    def _rewrite(self, rule, original: cst.SimpleString, updated: cst.SimpleString, value: str, new: str):
        msg = fill(rule.message, old=repr(value), new=repr(new), version=self.rules.npu_version)
        if self._kernel_gate(rule, original, repr(value)):
            return updated
        if plain_text(original) is None or getattr(rule, "report_only", False):  # escapes inside: a person
            self.ctx.emit(rule.code, Status.MANUAL, original, msg, rule.fix)
            return updated
        if self.rules.portable_exprs and isinstance(rule, LiteralArg):
            return self._rewrite_portable(rule, original, updated, value)
        if not self.ctx.emit(rule.code, Status.FIXED, original, msg, rule.fix, rewrite=True):
            return updated
        return with_text(updated, new)

    # -- --target portable: a bare "cuda" / "nccl" given to a call becomes an expression ---
    def _portable(self, kind: str) -> tuple[str, cst.BaseExpression] | None:
        """(text, node) of the device-type (or backend) expression (rules/portable.py),
        spelled with this file's name for torch; None when nothing here binds torch."""
        torch = self._scopes.torch_alias
        if torch is None:
            return None
        text = self.rules.portable_text(kind, torch)
        return text, cst.parse_expression(text)

    def _rewrite_portable(self, rule, original: cst.SimpleString, updated: cst.SimpleString, value: str):
        literal = LITERALS[rule.literal]
        if value != literal.cuda:
            why = (
                f"--target portable rewrites a bare {literal.cuda!r} only (an index or a list is the code's own choice)"
            )
            self._not_portable(rule, original, repr(value), why)
            return updated
        portable = self._portable(rule.literal)
        if portable is None:
            self._not_portable(rule, original, repr(value), "no torch binding here")
            return updated
        text, node = portable
        msg = fill(rule.message, old=repr(value), new=text, version=self.rules.npu_version)
        if not self.ctx.emit(rule.code, Status.FIXED, original, msg, rule.fix, rewrite=True):
            return updated
        return node.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def _not_portable(self, rule, node: cst.CSTNode, shown: str, why: str) -> None:
        """A device / backend the portable target leaves as it is: reported, with why."""
        self.ctx.emit(
            rule.code, Status.MANUAL, node, f"{rule.literal} {shown}: not rewritten, {why}", rule.fix, note=True
        )

    def _kernel_gate(self, rule, node: cst.CSTNode, shown: str) -> bool:
        """A device comparison that selects a CUDA-only kernel stays (NPU110)."""
        return isinstance(rule, Compare) and rule.literal == "device" and self._kernel_check(node, shown)

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString):
        parts = original.parts
        if not parts or not isinstance(parts[0], cst.FormattedStringText):
            return updated
        device = LITERALS["device"]
        text = parts[0].value
        head = device.rewrite_head(text)
        if head is None:
            return updated
        entry = self._lits.get(id(original))
        shown = cst.Module([]).code_for_node(original)
        if entry is not None and isinstance(entry[0], _Held):
            self._keep(entry[0], original)
            return updated
        if entry is None or entry[0].literal != "device":
            amb = self.rules.ambiguous.get("device")
            if amb is not None:
                self.ctx.emit(
                    amb.code,
                    Status.MANUAL,
                    original,
                    fill(amb.message, old=shown, version=self.rules.npu_version),
                    amb.fix,
                    note=True,
                )
            return updated
        rule = entry[0]
        if self._kernel_gate(rule, original, shown):
            return updated
        if self.rules.portable_exprs:
            self._not_portable(rule, original, shown, "--target portable rewrites a bare 'cuda' only")
            return updated
        new_node = updated.with_changes(parts=[updated.parts[0].with_changes(value=head), *updated.parts[1:]])
        msg = fill(rule.message, old=shown, new=cst.Module([]).code_for_node(new_node), version=self.rules.npu_version)
        if getattr(rule, "report_only", False):
            self.ctx.emit(rule.code, Status.MANUAL, original, msg, rule.fix)
            return updated
        if not self.ctx.emit(rule.code, Status.FIXED, original, msg, rule.fix, rewrite=True):
            return updated
        return new_node


def _nameable(names: tuple[str, ...], args, positional) -> bool:
    """Can every argument be passed by one of `names` (always, without names)?"""
    if not names:
        return True
    return len(positional) <= len(names) and all(a.keyword is None or a.keyword.value in names for a in args)


def _by_name(args: list[cst.Arg], names: tuple[str, ...]) -> list[cst.Arg]:
    """Positional arguments passed by their parameter names instead (`names`, in order)."""
    if not names:
        return args
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    out, i = [], 0
    for a in args:
        if a.keyword is None and not a.star:
            a = a.with_changes(keyword=cst.Name(names[i]), equal=equal)
            i += 1
        out.append(a)
    return out


def _subscripts(node: cst.BaseExpression) -> list[cst.Subscript]:
    """Every subscript in an annotation: Optional[Literal["cuda", "cpu"]] holds two."""
    if not isinstance(node, cst.Subscript):
        return []
    found = [node]
    for el in node.slice:
        if isinstance(el.slice, cst.Index):
            found += _subscripts(el.slice.value)
    return found


def _callee_matches(callee: str | None, qname: str | None) -> bool:
    """`torch.device` matches itself; `torch.cuda.*` matches every name under torch.cuda."""
    if callee is None or qname is None:
        return False
    if callee.endswith(".*"):
        return qname.startswith(callee[:-1])
    return callee == qname


def _derive(rules: RuleSet) -> None:
    """The producer and consumer names, over all rules: which calls get an explicit NPU
    default, which names hold which literal (assign targets), and which operands are
    compared with it. A consumer matches the producer names of its literal too: both ends
    of a device string are rewritten, or neither."""
    rules.implicit_callees = frozenset(r.callee for r in rules.literal_args if r.implicit)
    targets: dict[str, set[str]] = {}
    for r in rules.assigns:
        targets.setdefault(r.literal, set()).update(r.targets)
    rules.value_names = {lit: glob_re(globs) for lit, globs in targets.items()}
    rules.operand_names = {}
    for r in rules.compares:
        rules.operand_names.setdefault(r.literal, []).append((glob_re([*r.operands, *targets.get(r.literal, ())]), r))


def _pieces(ctx: Context, rules: RuleSet, file: PythonFile) -> list:
    return [Literals(ctx, rules, file)]


FAMILY = Family(
    kinds=(LITERAL_ARG, COMPARE, ASSIGN, AMBIGUOUS),
    fields={
        "literal_args": list,
        "compares": list,
        "assigns": list,
        "ambiguous": dict,  # by literal kind
        "implicit_callees": frozenset,  # calls whose CUDA default is made explicit (derived)
        "value_names": dict,  # literal -> its producer names, as one regex (derived)
        "operand_names": dict,  # literal -> [(consumer names regex, compare rule)] (derived)
    },
    derive=_derive,
    python=_pieces,
)
