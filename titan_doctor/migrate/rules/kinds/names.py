"""The names family: rename and report rules on qualified names (torch.cuda.*,
torch.profiler.*, apex, ...; schemas in name_rules.py) and capability rules
(capability.py), applied to uses and to the import statements that bind them.

Names are resolved through import bindings (walk/scopes.py), never by spelling, so
`import torch as th; th.cuda.synchronize()` and `from torch.cuda import synchronize as
sync` are both torch.cuda.synchronize. A rewrite keeps the user's spelling: an aliased
binding keeps its alias, and only the part of the chain that names CUDA changes. A
mock.patch target spells a qualified name as a string (`patch("torch.cuda.Stream")`): it
is renamed with the code it patches, or the test would patch a name nothing calls.

A call whose result is read as a CUDA compute capability keeps its CUDA name: the
Capabilities piece marks those calls before Names leaves them, and the family's builder
(`_pieces`) hands Names those marks.
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context, Hold
from titan_doctor.migrate.cstutil import build_dotted, dotted, full_name, plain_text, respell, string_value, with_text
from titan_doctor.migrate.rules.kind import Family, PythonFile, fill
from titan_doctor.migrate.rules.kinds.capability import KIND as CAPABILITY
from titan_doctor.migrate.rules.kinds.capability import Capabilities, Capability, CapabilityReads
from titan_doctor.migrate.rules.kinds.name_rules import RENAME, REPORT, Rename, Report
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import GATE_NPU, NPU_MODULE, NPU_PACKAGE

_BUILTINS = frozenset(dir(builtins))
_STRING = re.compile(r"""(?:'([^'\n]*)'|"([^"\n]*)")""")
_PATCHERS = ("unittest.mock.patch", "mock.patch")  # patch("a.b.c") replaces a.b.c by name


class Names:
    """The piece: marks chains and calls on the way down, rewrites or reports uses and
    imports on the way up (see the module docstring)."""

    def __init__(self, ctx: Context, rules: RuleSet, file: PythonFile, reads: CapabilityReads) -> None:
        self.ctx, self.rules, self.scopes = ctx, rules, file.scopes
        self._source = file.positions.source
        self._kernel_check = file.kernel_gate
        self._reads = reads
        self._calls: dict[int, cst.Call] = {}  # id(func) -> its call
        self._star: list[tuple] = []  # (original, rule, finding index, new node)
        self._free: dict[str, cst.Name] = {}  # names only a star import can bind
        self._patch_targets: set[int] = set()  # id(string) naming what mock.patch replaces
        self._kept_names = file.kept_names  # names the tree's package keeps CUDA
        self._held_bound = file.held_bound  # names used where CUDA stays: their imports stay

    # -- marking (pre-order) ----------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        """Inside a chain only the outermost node speaks for it."""
        value = node.value
        if isinstance(value, (cst.Attribute, cst.Name)):
            self.ctx.inner.add(id(value))
            if isinstance(value, cst.Name):
                self._maybe_free(value)
        self.ctx.inner.add(id(node.attr))

    def _maybe_free(self, node: cst.Name) -> None:
        """A name nothing binds here may come from a star import (checked at the end)."""
        if (
            self.scopes.star_modules
            and not self.ctx.in_import
            and node.value not in _BUILTINS
            and not self.scopes.bound(node.value)
        ):
            self._free.setdefault(node.value, node)

    def visit_Call(self, node: cst.Call) -> None:
        self._calls[id(node.func)] = node
        first = node.args[0] if node.args else None
        if (
            first is not None
            and first.keyword is None
            and isinstance(first.value, cst.SimpleString)
            and isinstance(node.func, (cst.Name, cst.Attribute))
            and self.ctx.qname(node.func) in _PATCHERS
        ):
            self._patch_targets.add(id(first.value))

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        """patch("torch.cuda.Stream") -> patch("torch.npu.Stream"), as the code it patches."""
        if id(original) not in self._patch_targets:
            return updated
        value = string_value(original)
        hit = self.rules.name_rule(value) if value else None
        if hit is None or not isinstance(hit[0], Rename) or hit[0].status == "manual":
            return updated
        if value in self._kept_names:  # the package's code still calls the CUDA name
            self.ctx.keep(Hold(self.ctx.where(original)))
            return updated
        new = self._rebound(value.split("."))
        if new is None or plain_text(original) is None:
            return updated
        rule, new_name = hit[0], ".".join(new)
        msg = fill(rule.message, old=value, new=new_name, version=self.rules.npu_version) + " (mock.patch target)"
        if not self._rewrite(rule, Status.FIXED, original, msg):
            return updated
        return with_text(updated, new_name)

    def visit_Import(self, node) -> None:
        self.ctx.in_import += 1

    visit_ImportFrom = visit_Import

    # -- uses -------------------------------------------------------------------------------
    def leave_Name(self, original: cst.Name, updated: cst.Name):
        if id(original) in self.ctx.inner or self.ctx.in_import:
            return updated
        self._maybe_free(original)
        return self._chain(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        if id(original) in self.ctx.inner or self.ctx.in_import:
            return updated
        return self._chain(original, updated)

    def _chain(self, original, updated):
        q = self.ctx.qname(original)
        if q is None:
            return updated
        spelled = dotted(original)
        if len(spelled) > q.count(".") + 1:
            return updated
        if self._capability(q, original):
            return updated
        found = self._rename_for(q, original, report=True)
        if found is None:
            return updated
        rule, k, qparts, new_full, status = found
        if self._kernel_gate(q, original):
            return updated
        p_len = len(qparts) - len(spelled) + 1  # components the root name stands for
        msg = fill(rule.message, old=q, new=".".join(new_full), version=self.rules.npu_version)
        if k <= p_len:
            # the CUDA part is inside the import binding: the import is rewritten; the use
            # changes only when an unaliased binding's own name changes (cuda -> npu)
            aliased = (self.scopes.lookup(spelled[0]) or ("", True))[1]
            new_root = (rule.new.split(".") + qparts[k:p_len])[-1]
            if aliased or new_root == qparts[p_len - 1]:
                return updated
            if not self._rewrite(rule, status, original, msg):
                return updated
            return respell(updated, [new_root, *spelled[1:]])
        rebound = self._rebound(qparts[:p_len])
        if new_full[:p_len] == qparts[:p_len]:
            new_spelled = [spelled[0]] + new_full[p_len:]
        elif rebound and new_full[: len(rebound)] == rebound:
            # the import itself was rewritten (ProfilerActivity now from torch_npu.profiler)
            new_spelled = [spelled[0]] + new_full[len(rebound) :]
        elif new_full[0] == NPU_PACKAGE:
            new_spelled = new_full
        elif tuple(new_full[:2]) == NPU_MODULE:
            alias = self.scopes.torch_alias
            new_spelled = [alias] + new_full[1:] if alias else [NPU_PACKAGE] + new_full[1:]
        elif new_full[0] == "torch" and self.scopes.torch_alias:
            new_spelled = [self.scopes.torch_alias] + new_full[1:]
        else:
            self.ctx.emit(
                rule.code, Status.MANUAL, original, msg + " (no torch binding here: change by hand)", rule.fix
            )
            self.ctx.block(original, q, rule.fix)
            return updated
        if not self._rewrite(rule, status, original, msg):
            return updated
        if len(new_spelled) == len(spelled):  # same shape: rename in place, keep layout
            return respell(updated, new_spelled)
        return build_dotted(new_spelled).with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def _rewrite(self, rule: Rename, status: Status, node: cst.CSTNode, msg: str) -> bool:
        if not self.ctx.emit(rule.code, status, node, msg, rule.fix, rewrite=True):
            return False
        self.ctx.touched.add(id(node))
        return True

    def _capability(self, q: str, node: cst.CSTNode) -> bool:
        """True (after reporting it) when `q` at `node` is a CUDA capability check:
        get_device_capability anywhere, get_device_properties when its .major/.minor is
        read (capability.py marked it). The caller leaves the code as it is."""
        rule = self.rules.capabilities.get(q)
        if rule is None:
            return False
        how = self._reads.calls.get(id(node))
        if rule.attrs and how is None:
            return False  # .name, .total_memory: torch.npu has them
        if not rule.attrs:
            shown = q
        elif how.startswith("."):
            shown = f"{q}(...){how}"
        else:
            shown = f"{q}(...) read as {how}"
        self.ctx.emit(
            rule.code, Status.MANUAL, node, fill(rule.message, old=shown, version=self.rules.npu_version), rule.fix
        )
        self.ctx.block(node, shown, rule.fix)
        return True

    def _kernel_gate(self, q: str, node: cst.CSTNode) -> bool:
        """torch.cuda.is_available() choosing a CUDA-only kernel stays (NPU110)."""
        gate = self.rules.kernel_gate
        return gate is not None and q in gate.gates and self._kernel_check(node, q)

    # -- rules ------------------------------------------------------------------------------
    def _rename_for(self, qname: str, node: cst.CSTNode, report: bool):
        """(rule, k, parts, new name parts, status) when a rename applies to `qname`;
        None otherwise, after reporting a report rule (if `report`) or a missing name."""
        hit = self.rules.name_rule(qname)
        if hit is None:
            return None
        rule, k = hit
        parts = qname.split(".")
        if isinstance(rule, Report):
            if report and self._applies(rule, node):
                msg = fill(rule.message, old=qname, version=self.rules.npu_version)
                self.ctx.emit(rule.code, Status.MANUAL, node, msg, rule.fix)  # every use its own finding
                self.ctx.block(node, qname, rule.fix)
            return None
        miss = self._gate_miss(rule, parts, k)
        if miss:
            old = ".".join(parts[: k + miss])
            self.ctx.emit(
                rule.gate_code,
                Status.MANUAL,
                node,
                fill(rule.gate_message, old=old, version=self.rules.npu_version),
                rule.gate_fix,
                note=True,
            )
            self.ctx.block(node, old, rule.gate_fix)
            return None
        if rule.args and self._args_differ(rule, node):
            msg = fill(rule.gate_message, old=qname, version=self.rules.npu_version)
            self.ctx.emit(rule.gate_code, Status.MANUAL, node, msg, rule.gate_fix, note=True)
            self.ctx.block(node, qname, rule.gate_fix)
            return None
        status = Status.MANUAL if rule.status == "manual" else Status.FIXED
        return rule, k, parts, rule.new.split(".") + parts[k:], status

    def _args_differ(self, rule: Rename, node: cst.CSTNode) -> bool:
        """A call at `node` passing an argument the way a rename's `args` rules out (a
        keyword to a positional-only function; for "named", *args / **kwargs or an
        argument `members` does not name)."""
        call = self._calls.get(id(node))
        if call is None:
            return False
        if rule.args == "positional":
            return any(a.keyword is not None or a.star == "**" for a in call.args)
        positional = sum(a.keyword is None for a in call.args)
        return (
            any(a.star for a in call.args)
            or positional > len(rule.members)
            or any(a.keyword is not None and a.keyword.value not in rule.members for a in call.args)
        )

    def _applies(self, rule: Report, node: cst.CSTNode) -> bool:
        """A conditional report rule fires only for a call whose arguments show it
        (cpp_extension.load with .cu sources or extra_cuda_cflags)."""
        if not (rule.only_if_args or rule.only_if_keywords):
            return True
        call = self._calls.get(id(node))
        if call is None:
            return False
        if any(a.keyword is not None and a.keyword.value in rule.only_if_keywords for a in call.args):
            return True
        patterns = [re.compile(p) for p in rule.only_if_args]
        strings, indirect = [], False
        for a in call.args:
            for n in _walk(a.value):
                if isinstance(n, cst.SimpleString) and isinstance(n.evaluated_value, str):
                    strings.append(n.evaluated_value)
                elif isinstance(n, (cst.Name, cst.Attribute, cst.Call)):
                    indirect = True
        if indirect:  # sources given through a variable: any string in the file counts
            strings += [a or b for a, b in _STRING.findall(self._source)]
        return any(p.search(s) for p in patterns for s in strings)

    def _rebound(self, parts: list[str]) -> list[str] | None:
        """What an imported name stands for after its import is rewritten, if it is."""
        hit = self.rules.name_rule(".".join(parts))
        if hit is None or not isinstance(hit[0], Rename) or self._gate_miss(hit[0], parts, hit[1]):
            return None
        return hit[0].new.split(".") + parts[hit[1] :]

    def _gate_miss(self, rule: Rename, qparts: list[str], k: int) -> int:
        return self.rules.gate_miss(rule, qparts, k)

    # -- imports ----------------------------------------------------------------------------
    def leave_SimpleStatementLine(self, original, updated):
        """An import split by module (`from torch.cuda import a, b` where only `a` has an
        NPU counterpart) goes on separate lines, not `;`-joined."""
        if len(original.body) != 1 or len(updated.body) == 1:
            return updated
        stmts = updated.body
        return cst.FlattenSentinel(
            [
                cst.SimpleStatementLine(
                    body=[stmt.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
                    leading_lines=updated.leading_lines if i == 0 else (),
                    trailing_whitespace=(
                        updated.trailing_whitespace if i == len(stmts) - 1 else cst.TrailingWhitespace()
                    ),
                )
                for i, stmt in enumerate(stmts)
            ]
        )

    def leave_Import(self, original: cst.Import, updated: cst.Import):
        self.ctx.in_import -= 1
        names, changed = [], False
        for orig, alias in zip(original.names, updated.names):
            new = self._import_target(full_name(alias.name), orig, original)
            if new is not None and alias.asname is not None:
                alias = alias.with_changes(name=build_dotted(import_module_path(new)))
                changed = True
            names.append(alias)
        return updated.with_changes(names=names) if changed else updated

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        self.ctx.in_import -= 1
        if updated.relative or updated.module is None:
            return updated
        module = full_name(updated.module)
        if isinstance(updated.names, cst.ImportStar):
            return self._star_import(original, updated, module)
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
        return stmts[0] if len(stmts) == 1 else cst.FlattenSentinel(stmts)

    def _import_target(self, full: str, alias: cst.ImportAlias, stmt) -> list[str] | None:
        """New qualified name for an imported name (None: keep), reporting as it goes."""
        cap = self.rules.capabilities.get(full)
        bound = alias.asname.name if alias.asname is not None else alias.name
        if cap is not None and isinstance(bound, cst.Name) and self._reads_capability(cap, re.escape(bound.value)):
            if cap.attrs:  # its uses keep this binding: say why the other uses stay CUDA
                read = sorted({a for attrs in self._reads.readers.values() for a in attrs if a in cap.attrs})
                self.ctx.emit(
                    cap.code,
                    Status.MANUAL,
                    alias,
                    fill(
                        cap.message,
                        old=f"{full} (imported here; this file reads {'/'.join('.' + a for a in read)} of its result)",
                        version=self.rules.npu_version,
                    ),
                    cap.fix,
                )
            return None  # reported where it is used
        if isinstance(bound, cst.Name) and bound.value in self._held_bound:
            hit = self.rules.name_rule(full)
            if hit is not None and isinstance(hit[0], Rename):
                self.ctx.keep(Hold(self.ctx.where(alias), quiet=True))  # kept code uses it: it stays
                return None
        # a third-party import fails on an NPU host by itself; torch's own names are
        # harmless to import and are reported where they are used
        found = self._rename_for(full, alias, report=not full.startswith("torch."))
        if found is None:
            return None
        rule, _, _, new, status = found
        if isinstance(stmt, cst.Import) and alias.asname is None:
            return None  # `import torch.cuda` binds `torch`: the uses are rewritten instead
        if isinstance(bound, cst.Name) and self._module_stays(full, bound.value, alias):
            return None
        msg = fill(rule.message, old=full, new=".".join(new), version=self.rules.npu_version)
        if not self.ctx.emit(rule.code, status, alias, msg, rule.fix, rewrite=True):
            return None
        return new

    def _module_stays(self, full: str, bound: str, alias: cst.ImportAlias) -> bool:
        """True (after reporting it) when a module binding (`import torch.cuda as tc`,
        `from torch import cuda`) must keep pointing at CUDA because the file reads a CUDA
        capability through it (`tc.get_device_capability()`): renaming the binding would
        send that check to torch.npu, which answers None. (A name torch.npu lacks is
        different: it fails loudly either way and is reported where it is used.)"""
        if full not in self.rules.name_prefixes:
            return False
        used = set(re.findall(rf"(?<![\w.]){re.escape(bound)}\s*\.\s*([A-Za-z_]\w*)", self._source))
        stuck = [
            (q, cap)
            for q, cap in ((f"{full}.{n}", self.rules.capabilities.get(f"{full}.{n}")) for n in sorted(used))
            if cap is not None
            and self._reads_capability(cap, rf"{re.escape(bound)}\s*\.\s*{re.escape(cap.match.rsplit('.', 1)[-1])}")
        ]
        if not stuck:
            return False
        names = ", ".join(q for q, _ in stuck)
        self.ctx.emit(
            stuck[0][1].code,
            Status.MANUAL,
            alias,
            f"{full} bound as {bound} kept: renaming it would send {names} (no NPU form here, left as is) to torch.npu",
            f"move the other {bound}.* uses to torch.npu by hand, or import torch.npu "
            "under its own name next to this one",
        )
        return True

    def _reads_capability(self, cap: Capability, callee: str) -> bool:
        """Will a use of `cap`'s call (spelled by the regex `callee`) be kept as a CUDA
        capability check? Always for get_device_capability; for get_device_properties
        when the file reads .major/.minor off its result."""
        if not cap.attrs:
            return True
        return self._reads.through(self._source, callee, frozenset(cap.attrs))

    def _star_import(self, original: cst.ImportFrom, updated: cst.ImportFrom, module: str):
        """`from torch.cuda import *` -> `from torch.npu import *`; whether every name the
        file takes from it exists in torch.npu is checked at the end of the module."""
        hit = self.rules.name_rule(module)
        if hit is None or not isinstance(hit[0], Rename) or len(module.split(".")) != hit[1]:
            return updated
        rule = hit[0]
        new_module = import_module_path(rule.new.split("."))
        msg = fill(rule.message, old=f"{module}.*", new=f"{'.'.join(new_module)}.*", version=self.rules.npu_version)
        if not self.ctx.emit(rule.code, Status.FIXED, original.module, msg, rule.fix, rewrite=True):
            return updated
        new = updated.with_changes(module=build_dotted(new_module))
        self._star.append((original, rule, len(self.ctx.findings) - 1, new))
        return new

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        """Names a star import supplies must exist on the NPU side, else the star stays."""
        if not self._star:
            return updated
        module_names = self.scopes.stack[0].names
        missing = [(n, node) for n, node in self._free.items() if n not in module_names]
        for orig, rule, index, new in self._star:
            lacking = [(n, node) for n, node in missing if rule.gate == GATE_NPU and n not in self.rules.npu_names]
            if not lacking:
                continue
            for name, node in lacking:
                self.ctx.emit(
                    rule.gate_code,
                    Status.MANUAL,
                    node,
                    fill(rule.gate_message, old=f"{rule.old}.{name}", version=self.rules.npu_version),
                    f"{rule.gate_fix} (it comes from `from {rule.old} import *`, left as is)",
                )
            self.ctx.undo(index)
            updated = _replace_statement(updated, new, orig)
        return updated


def _replace_statement(module: cst.Module, new: cst.ImportFrom, orig: cst.ImportFrom) -> cst.Module:
    body = []
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and any(s is new for s in stmt.body):
            stmt = stmt.with_changes(body=[orig if s is new else s for s in stmt.body])
        body.append(stmt)
    return module.with_changes(body=body)


def _walk(node: cst.CSTNode):
    """Every node under `node` (an argument value), depth first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def import_module_path(parts: list[str]) -> list[str]:
    """torch.npu is registered in sys.modules, its submodules are not: import those from
    torch_npu.npu (the same objects)."""
    if tuple(parts[:2]) == NPU_MODULE and len(parts) > 2:
        return [NPU_PACKAGE, NPU_MODULE[1]] + parts[2:]
    return parts


def _derive(rules: RuleSet) -> None:
    """Every dotted prefix of a name some rule keys on (a rename, report or capability
    rule, or a call whose CUDA default the literals family makes explicit): an import
    binding one of them may reach a rule's name (python/skipping.py, `_module_stays`)."""
    named = [*rules.names, *rules.capabilities, *rules.implicit_callees]
    rules.name_prefixes = frozenset(".".join(k.split(".")[:i]) for k in named for i in range(1, k.count(".") + 2))


def _pieces(ctx: Context, rules: RuleSet, file: PythonFile) -> list:
    """Capabilities marks the calls read as a compute capability (no piece when the file
    reads no capability attribute); Names is handed its marks and leaves those calls."""
    reads = CapabilityReads.scan(file.positions.source, rules)
    marker = Capabilities(ctx, reads, file.positions) if reads.readers else None
    return [marker, Names(ctx, rules, file, reads)]


FAMILY = Family(
    kinds=(RENAME, REPORT, CAPABILITY),
    fields={
        "names": dict,  # rename/report rules by old/match
        "name_globs": list,  # report rules with a glob: (fixed head parts, glob, rule)
        "capabilities": dict,  # capability rules by match
        "name_prefixes": frozenset,  # every dotted prefix of the names above (derived)
    },
    derive=_derive,
    python=_pieces,
)
