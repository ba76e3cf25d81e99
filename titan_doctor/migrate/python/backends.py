"""Code that already runs on more than CUDA, where migrate leaves CUDA as it is (NPU114).

Rewriting "cuda" to "npu" is right in code written for CUDA alone. In code that already
chooses between devices it is harm: `("cuda", "xpu", "npu")` became `("npu", "xpu",
"npu")`, the CUDA branch of `if is_npu_available(): ... elif torch.cuda.is_available():`
became a second NPU branch, `is_cuda_available()` answered for the NPU. So before the walk
the file is scanned once with the stdlib parser for the places that name another
accelerator (a device or backend string such as "xpu" or "hccl", `torch.xpu`,
`torch_npu`, `torch.accelerator`, an `is_<device>_available` helper, an enum member such
as DistributedType.MULTI_XPU) or answer for CUDA by name, and every rewrite there is
left undone:

    dispatch      an if/elif/else chain whose tests name another accelerator: all of it
    expression    a boolean or conditional expression, a comparison, a tuple/list/set
                  naming one next to "cuda"; a dict whose keys name devices (also when
                  keys are added later: `m["hpu"] = ...`)
    function      a function that names npu itself (it answers for Ascend already), or
                  one whose name says it answers for CUDA (`is_cuda_available`,
                  `get_max_cuda_memory`, `def cuda(self)`): the whole body
    default       `getattr(torch, device_type, torch.cuda)`: torch.cuda is the fallback
                  of a device-generic lookup
    profiler      a file that profiles another device through torch.profiler
                  (`ProfilerActivity.XPU`): its torch.profiler calls are shared by all
    value names   a device or backend name (`device`, `backend`) that also takes another
                  accelerator's value in this file, or npu's anywhere in the tree
                  (`backend == "hccl"` in the module that starts the process group):
                  its "cuda"/"nccl" values, the ifs that compare them and the checks
                  that choose them (`device = "cuda" if torch.cuda.is_available() else
                  "cpu"`) stay, so a default and its consumers keep agreeing across modules
    markers       a test under a marker that asks for CUDA itself (`@require_torch_gpu`
                  held as named for CUDA, here or in another module; `@RunIf(min_cuda_gpus=1)`)
                  and the helpers of the file only such tests use
    try/except    `try: import torch_npu ... except ImportError: torch.cuda`, and the
                  older-torch spelling in `except (AttributeError, TypeError)` of a
                  device-generic call
    branches      on CUDA's member of a device enum (`DistributedType.MULTI_GPU`), or on a
                  flag named for CUDA in a module that names other accelerators
    visible       CUDA_VISIBLE_DEVICES set beside another accelerator's variable

Where the place already handles npu, nothing is said (the rewrites are counted as kept);
where it does not, one finding at the place says what is missing (an npu branch, "npu"
in the list).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from titan_doctor.migrate.context import Hold
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import (
    CUDA,
    CUDA_VISIBLE_DEVICES,
    GENERIC_CALLS,
    GENERIC_MODULE,
    LITERALS,
    NPU,
    OTHER_BACKENDS,
    OTHER_DEVICES,
    OTHER_PLATFORMS,
    VISIBLE_DEVICES_ENV,
    visible_devices_set,
)
from titan_doctor.migrate.walk.astnames import flat_imports, qualified

GENERIC = ".".join(GENERIC_MODULE)  # stands for "answers for npu too" among the devices named
_DEVICES = frozenset(OTHER_DEVICES)
_WORDS = "|".join(sorted({*OTHER_DEVICES, *OTHER_PLATFORMS, *OTHER_BACKENDS, GENERIC_MODULE[1]}, key=len, reverse=True))
_NAMED = re.compile(r"(?i)(?<![a-z0-9])(?:" + _WORDS + r"|get_device_module)(?![a-z0-9])")
_DEVICE_WORDS = "|".join(sorted(OTHER_DEVICES, key=len, reverse=True))
# the text of a place that names another accelerator: a device or backend string, torch.<dev>,
# torch_<dev>, torch.accelerator, an enum member (.MULTI_XPU), an is_<dev>_available helper
_MENTIONS = (
    re.compile((r"[\"'](?:" + _WORDS + r")(?::\d+)?[\"']").encode()),
    re.compile(
        (r"\btorch\s*\.\s*(?:backends\s*\.\s*)?(?:" + _DEVICE_WORDS + r"|accelerator|get_device_module)\b").encode()
    ),
    re.compile((r"\btorch_(?:" + _DEVICE_WORDS + r")\b").encode()),
    re.compile((r"\.(?:MULTI_)?(?:" + _DEVICE_WORDS.upper() + r")\b").encode()),
)
_HELPER = re.compile((r"(?i)(?:" + _DEVICE_WORDS + r")\w*$").encode())
_AVAILABLE = b"_available"
_CUDA_DEF = re.compile(  # a def or call of a function named for CUDA, getattr(torch, ...)
    rb"\bdef\s+cuda\s*\("
    rb"|\b(?:is|has|check|require|requires|supports|can)_\w*(?i:cuda|nccl|nvml|nvidia|rocm|hip|gpu)\w*\s*\("
    rb"|\b\w*(?i:cuda|nccl|nvml|rocm)_(?:\w+_)?(?:available|version|supported|capability)\s*\("
    rb"|\bgetattr\s*\(\s*torch\s*,"
)
# asked only when a cheap `in` finds their words (these scans run on every file of a tree)
_MARKED = re.compile(rb"(?m)^\s*@[\w.]+\([^)\n]*\b(?:\w+_)?cuda(?:_\w+)?\s*=")  # @RunIf(min_cuda_gpus=1)
_MEMBER = re.compile(rb"\.MULTI_(?:GPU|CUDA)\b|\b[A-Z][A-Za-z]*[a-z][A-Za-z]*\.(?:GPU|CUDA)\b")
_DEVICE_VALUE = re.compile(r"^([a-z]+)(?::\d+)?$")
# a test pinning CUDA's answer: `f("cuda") == "nccl"`, `@patch("torch.cuda.is_available")`
_PINNED = re.compile(rb"\(\s*[\"'](?:cuda|nccl)[\"'][^\n]*\)\s*==\s*[\"']|patch\(\s*[\"']torch\.cuda\.")
_VISIBLE_ENV = re.compile(rb"\b(?:" + "|".join(VISIBLE_DEVICES_ENV).encode() + rb")\b")
_FALSY = (None, False, 0, "")
# a function whose name says it answers for CUDA: a question about CUDA (is_cuda_available,
# check_cuda_p2p_ib_support, require_cuda), what CUDA has (cuda_version, nccl_available),
# or the .cuda() method itself; `get_`/`setup_` names do things and are migrated
_QUESTIONS = frozenset({"is", "has", "check", "require", "requires", "supports", "can"})
_ANSWERS = frozenset({"available", "version", "supported", "capability"})
_CUDA_WORDS = frozenset({CUDA, LITERALS["backend"].cuda, "nvml", "nvidia", "rocm", "hip"})
_GPU = "gpu"
# torch.cuda calls that answer "no" on a machine without CUDA instead of failing
_SAFE = frozenset({"is_available", "device_count", "is_initialized"})
_PROFILER_ACTIVITY = ("torch.profiler.ProfilerActivity", "torch.autograd.ProfilerActivity")
_PROFILER_MODULES = ("torch.profiler", "torch.autograd.profiler")
_BACKEND_MAP = "default_device_backend_map"  # torch.distributed's device -> backend table
_DEVICE_WORD = "device"
CODE = "NPU114"


def may_hold(data: bytes) -> bool:
    """Cheap text check: does the file name another accelerator, define a function named
    for CUDA, or look a device module up with getattr?"""
    if any(p.search(data) for p in _MENTIONS) or _CUDA_DEF.search(data) or _BACKEND_MAP.encode() in data:
        return True
    if (b"VISIBLE_" in data or b"ZE_AFFINITY" in data) and _VISIBLE_ENV.search(data):
        return True
    if (b"patch(" in data or b"==" in data) and _PINNED.search(data):
        return True
    if (b"cuda_" in data or b"_cuda" in data) and b"@" in data and _MARKED.search(data):
        return True
    if (b".GPU" in data or b".CUDA" in data or b".MULTI_" in data) and _MEMBER.search(data):
        return True
    at = data.find(_AVAILABLE)
    while at >= 0:  # is_xpu_available, pt_npu_available: the name before "_available"
        start = at
        while start > 0 and (data[start - 1 : start].isalnum() or data[start - 1 : start] == b"_"):
            start -= 1
        if _HELPER.search(data[start:at]):
            return True
        at = data.find(_AVAILABLE, at + 1)
    return False


@dataclass
class Holds:
    """What the scan found: places (spans) whose rewrites stay, and value names whose
    CUDA values stay wherever they are bound or compared."""

    regions: list[tuple[tuple[int, int], tuple[int, int], Hold]] = field(default_factory=list)
    names: dict[str, Hold] = field(default_factory=dict)
    # names used inside those places: an import binding one of them stays as it is, or
    # the kept code would call what the rewritten import now binds (torch_npu's
    # ProfilerActivity has no .CUDA)
    bound: frozenset[str] = frozenset()
    # functions of this file that answer for CUDA by name (is_cuda_available, a
    # require_torch_gpu marker that tests torch.cuda beside device-generic ones): a test
    # they mark is CUDA's, in this module or, through the tree's facts, in another
    cuda_defs: frozenset[str] = frozenset()

    def at(self, line: int, col: int, code: str) -> Hold | None:
        """The innermost place holding (line, col) for a rewrite under `code`, or None."""
        best, size = None, None
        for start, end, hold in self.regions:
            if start <= (line, col) < end and (hold.codes is None or code in hold.codes):
                extent = (end[0] - start[0], end[1] - start[1])
                if size is None or extent < size:
                    best, size = hold, extent
        return best

    def __bool__(self) -> bool:
        return bool(self.regions or self.names)


def device_module(stem: str, siblings: list[str]) -> tuple[str, ...]:
    """The devices of the sibling modules when `stem` is CUDA's module of a per-device set
    (cuda.py beside mps.py, cuda_accelerator.py beside npu_accelerator.py), else ()."""
    if CUDA not in stem.lower().split("_"):
        return ()
    found = set()
    for other in siblings:
        for word in other.lower().split("_"):
            if word in _DEVICES:
                found.add(word)
    return tuple(sorted(found))


def module_hold(siblings: tuple[str, ...]) -> Hold:
    """The whole-file Hold of CUDA's module in a per-device set."""
    if NPU in siblings:
        return Hold((1, 1), quiet=True)
    return Hold(
        (1, 1),
        CODE,
        f"this module is CUDA's one of a set of per-device modules (next to {', '.join(siblings)}): left as it is",
        f"write its {NPU} counterpart beside it (as the {', '.join(siblings)} ones are) instead of turning "
        "this one into it",
        quiet=True,  # the one finding says it all: what is inside is CUDA's own
    )


def value_mentions(tree: ast.Module, compared_only: bool = False) -> dict[str, set[str]]:
    """name -> the other accelerators' values it takes or is compared with in this file
    (`backend == "hccl"`, `device = "xpu"`); `compared_only`: comparisons alone (what the
    tree's facts carry: a module that dispatches on the value)."""
    found: dict[str, set[str]] = {}

    def note(target: ast.AST, value: ast.AST) -> None:
        name = _operand(target)
        if name is None:
            return
        accs = {a for v in _constants(value) if (a := _device_of_value(v))}
        if accs:
            found.setdefault(name, set()).update(accs)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for side in sides:
                for other in sides:
                    if other is not side:
                        note(side, other)
        elif compared_only:
            continue
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                note(t, node.value)
        elif isinstance(node, ast.keyword) and node.arg:
            note(ast.Name(node.arg), node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            dest = next(
                (k.value.value for k in node.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)), None
            )
            dest = dest or next((f for f in flags if f.startswith("--")), flags[0] if flags else "").lstrip("-")
            for k in node.keywords:  # add_argument("--device", choices=["cuda", "mps"])
                if k.arg in ("default", "choices") and dest:
                    note(ast.Name(dest.replace("-", "_")), k.value)
    return found


def scan(
    rules: RuleSet,
    tree: ast.Module,
    lines: list[bytes],
    tree_names: dict[str, frozenset[str]] | None = None,
    device_names: Iterable[str] = (),
    guarded: Iterable[ast.stmt] = (),
    markers: Iterable[str] = (),
) -> Holds:
    """The places of this file where CUDA stays (see the module docstring). `tree_names`:
    value names that take npu's value somewhere in the tree (python/facts.py); `guarded`:
    statements a kept CUDA check protects (python/gates.py), which stay CUDA with it;
    `markers`: functions of the tree's other modules that answer for CUDA by name (a
    test they decorate stays CUDA's)."""
    scan = _Scan(rules, tree, lines, tree_names or {}, frozenset(device_names), frozenset(markers))
    holds = scan.holds
    for stmt in guarded:
        holds.regions.append((scan._start(stmt), scan._end(stmt), Hold(scan._start(stmt), guarded=True)))
    if holds.regions:
        holds.bound = frozenset(
            n.id
            for n in scan.nodes
            if isinstance(n, ast.Name)
            and holds.at(*scan._start(n), "") is not None
            and holds.at(*scan._start(n), "").codes is None
        )
    return holds


class _Scan:
    def __init__(self, rules, tree, lines, tree_names, device_names, markers=frozenset()) -> None:
        self.rules, self.lines = rules, lines
        self.imports = flat_imports(tree)
        self.holds = Holds()
        self._parents: dict[int, ast.AST] = {}
        self._flags: dict[str, set[str]] = {}
        self._acc: dict[int, frozenset[str]] = {}
        self._root = tree
        nodes = self.nodes = self._index(tree)
        flags = [n for n in nodes if isinstance(n, ast.Assign) and len(n.targets) == 1]
        for node in flags:  # is_mccl_backend = group_backend == "mccl": a flag that names musa
            if isinstance(node.targets[0], ast.Name) and isinstance(
                node.value, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Call)
            ):
                accs = self.mentions(node.value)
                if accs:
                    self._flags.setdefault(node.targets[0].id, set()).update(accs)
        if self._flags:  # the flags' uses name those devices too
            self._acc = {}
            self._index(tree, nodes)
        covered: list[tuple[tuple[int, int], tuple[int, int]]] = []
        for node in nodes:
            if isinstance(node, ast.If) and not self._is_elif(node):
                self._chain(node, covered)
        for node in nodes:
            body = getattr(node, "body", None)
            if isinstance(body, list):
                for block in (body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    self._sequence(block, covered)
        cuda_defs: set[str] = set()
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if self._function(node):
                    cuda_defs.add(node.name)
            elif isinstance(node, ast.Call):
                self._getattr_default(node)
        self.holds.cuda_defs = frozenset(
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in cuda_defs
        )
        self._marked(nodes, markers | cuda_defs)
        self._cuda_pinned(nodes)
        self._try_fallbacks(nodes)
        self._enum_members(nodes, covered)
        self._cuda_flags(nodes, covered)
        self._visible_devices(nodes)
        for node in nodes:
            if isinstance(node, (ast.BoolOp, ast.IfExp, ast.Compare, ast.Tuple, ast.List, ast.Set, ast.Dict)):
                if (isinstance(node, ast.Dict) or id(node) in self._acc) and not any(
                    s <= self._start(node) and self._end(node) <= e for s, e in covered
                ):
                    self._expression(node, covered)
        self._profiler(nodes)
        self._value_names(tree, nodes, tree_names, device_names)

    def _index(self, tree: ast.Module, order: list[ast.AST] | None = None) -> list[ast.AST]:
        """One pass: every node's parent, and the accelerators every node names, children
        before parents (so `mentions` of any node is a lookup)."""
        if order is None:
            order, stack = [], [tree]
            while stack:
                node = stack.pop()
                order.append(node)
                for child in ast.iter_child_nodes(node):
                    self._parents[id(child)] = node
                    stack.append(child)
        given: dict[int, set[str]] = {}
        for node in reversed(order):
            found = given.pop(id(node), None)
            own = self._own(node)
            if own:
                found = (found or set()) | own
            if found:
                self._acc[id(node)] = frozenset(found)
                parent = self._parents.get(id(node))
                if parent is not None:
                    given.setdefault(id(parent), set()).update(found)
        order.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
        return order

    def _own(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.alias):  # import torch_npu
            head = node.name.split(".")[0]
            return {head[6:]} if head.startswith("torch_") and head[6:] in _DEVICES else set()
        if isinstance(node, ast.Constant):
            acc = _device_of_value(node.value) if isinstance(node.value, str) else None
            return {acc} if acc else set()
        if isinstance(node, ast.Call) and _generic_lookup(node, self.imports):
            return {GENERIC}
        if isinstance(node, ast.Attribute) and node.attr == _BACKEND_MAP:
            return {GENERIC}  # dist.Backend.default_device_backend_map[device_type]
        if isinstance(node, (ast.Attribute, ast.Name)):
            found = set()
            if not isinstance(self._parents.get(id(node)), ast.Attribute):  # the outermost chain speaks
                acc = self._device_of_chain(node)
                if acc:
                    found.add(acc)
            if isinstance(node, ast.Name) and node.id in self._flags:
                found |= self._flags[node.id]
            return found
        return set()

    # -- positions (1-based columns in characters, as the walk counts them) -------------------
    def _col(self, line: int, offset: int) -> int:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else b""
        return len(text[:offset].decode("utf-8", "replace")) + 1 if not text.isascii() else offset + 1

    def _start(self, node: ast.AST) -> tuple[int, int]:
        return node.lineno, self._col(node.lineno, node.col_offset)

    def _end(self, node: ast.AST) -> tuple[int, int]:
        line = node.end_lineno or node.lineno
        return line, self._col(line, node.end_col_offset if node.end_col_offset is not None else 1 << 20)

    def _add(self, node: ast.AST, hold: Hold, end: ast.AST | None = None) -> None:
        self.holds.regions.append((self._start(node), self._end(end or node), hold))

    def _hold(self, node: ast.AST, accs: set[str], what: str, message: str = "") -> Hold:
        """Silent where npu is already handled; else one finding at `node` naming what is missing."""
        if NPU in accs or GENERIC in accs:
            return Hold(self._start(node), quiet=True)
        named = ", ".join(sorted({CUDA, *accs}))
        return Hold(
            self._start(node),
            CODE,
            message or f"{what} chooses between {named} but has no {NPU} case: its CUDA code is left as it is",
            f"add the {NPU} case next to the {CUDA} one (a device string, torch.{NPU}.* calls, an hccl backend); "
            "the code already runs on more than CUDA, so nothing in it is replaced",
        )

    # -- what names an accelerator ------------------------------------------------------------
    def mentions(self, expr: ast.AST) -> frozenset[str]:
        return self._acc.get(id(expr), frozenset())

    def _device_of_chain(self, node: ast.AST) -> str | None:
        parts = _spelled(node)
        root = parts[0] if parts else ""
        text = self.imports.get(root, root) + "." + ".".join(parts[1:])
        if not _NAMED.search(text):
            return None  # fast path: most chains spell no device at all
        q = qualified(node, self.imports)
        if q is not None:
            qp = q.lstrip(".").split(".")
            if tuple(qp[:2]) == GENERIC_MODULE or q in GENERIC_CALLS:
                return GENERIC
            if qp[0] == "torch" and len(qp) > 1 and qp[1] in _DEVICES:
                return qp[1]
            if qp[:2] == ["torch", "backends"] and len(qp) > 2 and qp[2] in _DEVICES:
                return qp[2]
            if qp[0].startswith("torch_") and qp[0][6:] in _DEVICES:
                return qp[0][6:]
            parts = qp
        for part in parts or ():
            acc = _device_of_identifier(part)
            if acc:
                return acc
        return None

    # -- the places ---------------------------------------------------------------------------
    @staticmethod
    def _tests(node: ast.If) -> list[ast.AST]:
        tests = [node.test]
        while len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            tests.append(node.test)
        return tests

    def _is_elif(self, node: ast.If) -> bool:
        parent = self._parents.get(id(node))
        return isinstance(parent, ast.If) and len(parent.orelse) == 1 and parent.orelse[0] is node

    def _chain(self, node: ast.If, covered: list) -> None:
        accs: set[str] = set()
        for test in self._tests(node):
            accs |= self.mentions(test)
        if not accs:
            return
        hold = self._hold(node.test, accs, "this if/elif chain")
        self._add(node, hold)
        covered.append((self._start(node), self._end(node)))
        # the flags its tests read, set from a CUDA check (use_cuda = torch.cuda.is_available()
        # beside use_mps = ...), stay with it: else use_cuda would be true on an NPU and the
        # kept CUDA branch would run there
        scope = self._scope_of(node)
        flags = {n.id for t in self._tests(node) for n in ast.walk(t) if isinstance(n, ast.Name)}
        for stmt in ast.walk(scope):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id in flags
                and self._cuda_check(stmt.value)
            ):
                self._add(stmt, hold)

    def _sequence(self, block: list, covered: list) -> None:
        """Ifs side by side, one per device (`if is_xpu_available(): ...` then `if
        is_cuda_available(): ...`), and an if guarded by a function that answers for CUDA
        by name (`if is_cuda_available():`): the CUDA one is that device's case."""
        heads = [s for s in block if isinstance(s, ast.If)]
        if not heads:
            return
        devices: set[str] = set()
        for head in heads:
            for test in self._tests(head):
                devices |= self.mentions(test)
        for head in heads:
            if any(s <= self._start(head) and self._end(head) <= e for s, e in covered):
                continue
            named = any(self._cuda_named_call(t) for t in self._tests(head))
            if not (named or (devices and any(self._cuda_check(t) for t in self._tests(head)))):
                continue
            scope = self._scope_of(head)
            own = self.mentions(scope) if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else set()
            message = ""
            if not devices:
                shown = ast.unparse(head.test)
                message = f"`if {shown[:60]}` asks a check named for CUDA: its CUDA code is left as it is"
            self._add(
                head, self._hold(head.test, devices | (own & {NPU, GENERIC}), "this if (one per device)", message)
            )
            covered.append((self._start(head), self._end(head)))

    def _cuda_named_call(self, test: ast.AST) -> bool:
        """`is_cuda_available()`: a call to a function whose name says it answers for CUDA."""
        for node in ast.walk(test):
            if isinstance(node, ast.Call):
                name = _spelled(node.func)
                q = qualified(node.func, self.imports) or ""
                if name and not q.startswith("torch.") and name[0] != "torch" and _answers_for_cuda(name[-1]):
                    return True  # torch's own (torch.distributed.is_nccl_available) have renames
        return False

    def _cuda_check(self, test: ast.AST) -> bool:
        """A CUDA device check: torch.cuda.is_available() / device_count(), `.is_cuda`,
        `x == "cuda"`, or a call named for CUDA."""
        for node in ast.walk(test):
            if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
                return True
            if isinstance(node, ast.Call):
                q = qualified(node.func, self.imports) or ""
                if q.startswith("torch.cuda.") or self._cuda_named_call(node):
                    return True
            if isinstance(node, ast.Constant) and node.value == CUDA:
                return True
        return False

    def _expression(self, node: ast.AST, covered: list) -> None:
        if isinstance(node, ast.Dict):
            accs = self._dict_devices(node)
            what = "this mapping"
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            values = [_device_of_value(v) for v in _constants(node, shallow=True)]
            if CUDA not in [v for v in _constants(node, shallow=True)]:
                return
            accs = {v for v in values if v}
            what = "this list"
        else:
            accs = self.mentions(node)
            what = "this condition" if not isinstance(node, ast.IfExp) else "this expression"
        if not accs:
            return
        self._add(node, self._hold(node, accs, what))
        covered.append((self._start(node), self._end(node)))

    def _dict_devices(self, node: ast.Dict) -> set[str]:
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if CUDA not in keys:
            return set()
        accs = {a for k in keys if (a := _device_of_value(k))}
        target = self._parents.get(id(node))
        name = None
        if isinstance(target, (ast.Assign, ast.AnnAssign)):
            t = target.targets[0] if isinstance(target, ast.Assign) else target.target
            name = _operand(t)
        if name is not None:  # keys added later: m["hpu"] = ...
            scope = self._scope_of(node)
            for sub in ast.walk(scope):
                if isinstance(sub, ast.Assign):
                    for t in sub.targets:
                        if isinstance(t, ast.Subscript) and _operand(t.value) == name:
                            key = t.slice
                            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                                acc = _device_of_value(key.value)
                                if acc:
                                    accs.add(acc)
        return accs

    def _scope_of(self, node: ast.AST) -> ast.AST:
        while True:
            parent = self._parents.get(id(node))
            if parent is None or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                return parent or node
            node = parent

    def _function(self, node: ast.FunctionDef) -> bool:
        """Hold a function that answers for CUDA by name (True) or already handles npu."""
        words = [w for w in node.name.lower().split("_") if w]
        asks = bool(words) and (words[0] in _QUESTIONS or words[-1] in _ANSWERS)
        if node.name == CUDA or _answers_for_cuda(node.name):
            self._add(node, self._named_for_cuda(node))  # it answers for CUDA by name
            return node.name != CUDA
        doc = ast.get_docstring(node) or ""
        if asks and _GPU in words and re.search(r"\b(?:CUDA|NVIDIA)\b", doc):
            self._add(node, self._named_for_cuda(node))  # require_single_gpu: "requires CUDA"
            return True
        own = [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if self.mentions(self._root) and (
            (bool(_CUDA_WORDS & set(words)) and _getter(words))  # get_cuda_rng_tracker, num_cuda_devices
            or (asks and bool({_GPU, _GPU + "s"} & set(words)) and any(self._cuda_check(s) for s in own))
        ):
            # in a module that names other accelerators, a function named for CUDA is CUDA's
            # sibling of theirs: require_torch_gpu (torch.cuda.is_available()) next to
            # require_non_cpu (torch_device != "cpu") marks the tests that need CUDA itself
            self._add(node, Hold(self._start(node), quiet=True))
            return True
        accs: set[str] = set()
        for stmt in own:
            accs |= self.mentions(stmt)
        if NPU in accs or GENERIC in accs:
            # it already answers for npu: what it does on CUDA stays; a call that fails
            # without CUDA (not a question such as is_available) is said where it is
            self._add(
                node,
                Hold(
                    self._start(node),
                    CODE,
                    f"{node.name}() already handles {NPU}: its CUDA calls are left as they are",
                    f"check that the {CUDA} calls here only run on CUDA (or make them device-generic, "
                    "torch.accelerator.*)",
                ),
            )
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _SAFE:
                    self._add(sub, Hold(self._start(sub)))
        return False

    def _marked(self, nodes: list[ast.AST], markers: frozenset[str]) -> None:
        """A test (def or class) under a marker that asks for CUDA itself stays CUDA's: the
        marker keeps it off an NPU, so its body is CUDA's too (`@require_torch_gpu` held
        above or in another module, `@RunIf(min_cuda_gpus=1)`, `@skipif(not
        is_cuda_available())`)."""
        markers = markers - {CUDA}
        marked = []
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.decorator_list:
                if any(self._cuda_marker(d, markers) for d in node.decorator_list):
                    self._add(node.decorator_list[0], Hold(self._start(node), quiet=True), end=node)
                    marked.append(node)
        if not marked:
            return
        # the helpers of this file only those tests use (called, or handed to a spawn) are
        # theirs too: _run_tp(rank, ...) started from a CUDA-marked test
        defs = [n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        uses = [
            (n, n.id if isinstance(n, ast.Name) else n.attr)
            for n in nodes
            if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
            or (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self")
        ]
        inside = {id(n) for m in marked for n in ast.walk(m)}
        while True:  # a helper of a helper (initialize_model_parallel -> initialize_distributed)
            used_in = {name for n, name in uses if id(n) in inside}
            used_out = {name for n, name in uses if id(n) not in inside}
            more = [d for d in defs if id(d) not in inside and d.name in used_in and d.name not in used_out]
            if not more:
                return
            for d in more:
                self._add(d, Hold(self._start(d), quiet=True))
                inside |= {id(n) for n in ast.walk(d)}

    def _cuda_marker(self, decorator: ast.AST, markers: frozenset[str]) -> bool:
        callee = decorator.func if isinstance(decorator, ast.Call) else decorator
        spelled = _spelled(callee)
        if spelled and spelled[-1] in markers:
            return True
        for sub in ast.walk(decorator):
            if isinstance(sub, ast.Name) and sub.id in markers:
                return True
            if isinstance(sub, ast.Call):
                for k in sub.keywords:  # RunIf(min_cuda_gpus=1), RunIf(bf16_cuda=True)
                    on = not (isinstance(k.value, ast.Constant) and k.value.value in _FALSY)
                    if k.arg and CUDA in k.arg.lower().split("_") and on:
                        return True
                if self._cuda_named_call(sub):
                    return True
        return False

    def _cuda_pinned(self, nodes: list[ast.AST]) -> None:
        """Where a test pins CUDA's answer of device-generic code, the CUDA case stays:
        `get_distributed_backend("cuda") == "nccl"` (the "cuda" asked for is no device
        position, so only the answer would move, and the test would fail everywhere), and
        a test under `@patch("torch.cuda.is_available", return_value=True)`, which makes
        the code under test take its CUDA branch."""
        backend = LITERALS["backend"].cuda
        for node in nodes:
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                asked = any(
                    isinstance(c, ast.Call)
                    and any(isinstance(a, ast.Constant) and a.value in (CUDA, backend) for a in c.args)
                    for side in sides
                    for c in ast.walk(side)
                )
                if asked and any(isinstance(s, ast.Constant) and _cuda_value_or_backend(s.value) for s in sides):
                    self._add(node, Hold(self._start(node), quiet=True))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _patches_cuda(d) for d in node.decorator_list
            ):  # the patch target stays with the test
                first = node.decorator_list[0]
                self._add(first, Hold(self._start(first), quiet=True), end=node)

    def _try_fallbacks(self, nodes: list[ast.AST]) -> None:
        """try/except that picks a backend: the try uses another accelerator (`import
        torch_npu`, torch.xpu) and the except falls back to CUDA, so the except is CUDA's
        case; or the try asks a newer torch API (torch.amp.GradScaler(device=...)) and an
        `except (AttributeError, TypeError)` spells the older torch's CUDA one, which runs
        only on a torch older than any torch_npu pairs with. The except stays as it is."""
        for node in nodes:
            if not isinstance(node, ast.Try) or not node.handlers:
                continue
            tried: set[str] = set()
            for stmt in node.body:
                tried |= self.mentions(stmt)
            calls = {q for stmt in node.body for q in self._torch_calls(stmt)}
            for handler in node.handlers:
                cuda = any(self._names_cuda(s) for s in handler.body)
                if tried and cuda:
                    self._add(handler, self._hold(handler, tried, "this try/except"))
                elif calls and _api_errors(handler):
                    again = {q for stmt in handler.body for q in self._torch_calls(stmt)} & calls
                    if cuda or again:  # torch.cuda.amp.GradScaler(), or is_autocast_enabled() bare
                        self._add(handler, Hold(self._start(handler), quiet=True))

    def _torch_calls(self, stmt: ast.AST) -> set[str]:
        """The torch.* functions (not torch.cuda's) a statement calls."""
        found = set()
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Call):
                q = qualified(sub.func, self.imports) or ""
                if q.startswith("torch.") and not q.startswith("torch." + CUDA):
                    found.add(q)
        return found

    def _names_cuda(self, stmt: ast.AST) -> bool:
        """torch.cuda or a name in it, or a CUDA device check (`device_module = torch.cuda`)."""
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Attribute):
                q = qualified(sub, self.imports) or ""
                if q == "torch." + CUDA or q.startswith("torch." + CUDA + "."):
                    return True
        return self._cuda_check(stmt)

    def _enum_members(self, nodes: list[ast.AST], covered: list) -> None:
        """`if state.distributed_type == DistributedType.MULTI_GPU:`: a branch on CUDA's
        member of a device enum (MULTI_GPU beside MULTI_NPU / MULTI_XPU) never runs on an
        NPU, which has its own member; its CUDA code stays, and the NPU member's branch
        is what is missing."""
        file_accs = self.mentions(self._root) & {NPU, GENERIC}
        for node in nodes:
            if not isinstance(node, ast.If) or any(s <= self._start(node) and self._end(node) <= e for s, e in covered):
                continue
            member = next((m for m in ast.walk(node.test) if _cuda_member(m)), None)
            if member is None or not isinstance(node.test, (ast.Compare, ast.BoolOp)):
                continue
            shown = ".".join(_spelled(member))
            hold = self._hold(
                node.test,
                set(file_accs),
                "",
                f"this branch is {shown}'s, CUDA's member of a device enum: its CUDA code is left as it is",
            )
            self._add(node, hold, end=node.body[-1])

    def _cuda_flags(self, nodes: list[ast.AST], covered: list) -> None:
        """`if self._use_cuda:` in a module that names other accelerators: a flag named for
        CUDA picks CUDA's case there (its siblings' flags or branches pick theirs), so the
        branch stays, and so does the flag's own CUDA check (`self._use_cuda =
        torch.cuda.is_available()`), or it would be true on an NPU and run the kept code."""
        if not self.mentions(self._root):
            return
        file_accs = self.mentions(self._root) & {NPU, GENERIC}
        flags: set[str] = set()
        for node in nodes:
            if not isinstance(node, ast.If) or any(s <= self._start(node) and self._end(node) <= e for s, e in covered):
                continue
            named = [f for f in _flag_names(node.test) if f != "is_" + CUDA and CUDA in f.lower().split("_")]
            if not named:
                continue
            flags.update(named)
            hold = self._hold(
                node.test,
                set(file_accs),
                "",
                f"`if {ast.unparse(node.test)[:60]}` reads a flag named for CUDA: its CUDA code is left as it is",
            )
            self._add(node, hold, end=node.body[-1])
            covered.append((self._start(node), self._end(node.body[-1])))
        for node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(_operand(t) in flags for t in targets) and self._cuda_check(node.value):
                    self._add(node, Hold(self._start(node), quiet=True))

    def _visible_devices(self, nodes: list[ast.AST]) -> None:
        """CUDA_VISIBLE_DEVICES set beside another accelerator's variable (ZE_AFFINITY_MASK):
        the file picks devices on each, so CUDA's setting stays and Ascend's is missing."""
        text = b"\n".join(self.lines)
        if not ((b"VISIBLE_" in text or b"ZE_AFFINITY" in text) and _VISIBLE_ENV.search(text)):
            return
        accs = visible_devices_set(text.decode("utf-8", "replace"))
        for node in nodes:
            if isinstance(node, ast.Constant) and node.value == CUDA_VISIBLE_DEVICES:
                if NPU in accs:
                    hold = Hold(self._start(node), quiet=True)
                else:
                    hold = Hold(
                        self._start(node),
                        CODE,
                        f"{CUDA_VISIBLE_DEVICES} is set beside {_visible_names(accs)}: each accelerator's "
                        "visible devices are chosen here, so CUDA's is left as it is",
                        f"set {_ASCEND_VISIBLE} beside it for the NPU (logical ids, npu-smi info lists them)",
                    )
                self._add(node, hold)

    def _named_for_cuda(self, node: ast.FunctionDef) -> Hold:
        """A function that answers for CUDA by name stays. In a module that already names
        other devices that is all (its siblings answer for them); elsewhere it is said once,
        since code calling it expects an answer about CUDA even on an NPU."""
        if self.mentions(self._root):
            return Hold(self._start(node), quiet=True)
        return Hold(
            self._start(node),
            CODE,
            f"{node.name}() answers for CUDA by name: left as it is",
            f"where its callers should ask about the device in use, give them an {NPU} counterpart "
            f"(torch.{NPU}.is_available(), torch.accelerator.*) instead of changing what this one answers",
        )

    def _getattr_default(self, node: ast.Call) -> None:
        """getattr(torch, device_type, torch.cuda): a device-generic lookup's fallback."""
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and qualified(node.args[0], self.imports) == "torch"
        ):
            self._add(node.args[2], Hold(self._start(node.args[2]), quiet=True))

    def _profiler(self, nodes: list[ast.AST]) -> None:
        """torch.profiler used for other devices too (an activity of another device chosen
        in a device dispatch found above): its calls stay, file-wide."""
        accs: set[str] = set()
        first = None
        for node in nodes:
            if isinstance(node, ast.Attribute):
                q = qualified(node.value, self.imports)
                if q in _PROFILER_ACTIVITY and self.holds.at(*self._start(node), ""):
                    acc = _device_of_identifier(node.attr) or (CUDA if node.attr == CUDA.upper() else None)
                    if acc:
                        accs.add(acc)
                        first = first or node
        if not accs:
            return
        codes = frozenset(
            r.code
            for r in self.rules.names.values()
            if getattr(r, "old", "").startswith(_PROFILER_MODULES) and hasattr(r, "new")
        )
        message = ""
        if not accs - {CUDA}:  # the CUDA activity picked per device (if is_cuda_available(): ...)
            message = "this file's profiler (torch.profiler) picks its activities per device: it is left as it is"
        hold = self._hold(first, accs - {CUDA}, "this file's profiler (torch.profiler)", message)
        self.holds.regions.append(((1, 1), (1 << 30, 1), Hold(hold.anchor, hold.code, hold.message, hold.fix, codes)))

    def _value_names(self, tree: ast.Module, nodes, tree_names: dict[str, frozenset[str]], device_names) -> None:
        """Device/backend value names that already take another accelerator's value."""
        here = value_mentions(tree)
        names = {n: set(a) for n, a in here.items() if self.rules.value_literal(n) or n in device_names}
        for n, accs in tree_names.items():
            names.setdefault(n, set()).update(accs)
        if not names:
            return
        firsts: dict[str, ast.AST] = {}
        for node in nodes:
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
                n = _operand(node)
            elif isinstance(node, ast.keyword):
                n = node.arg
            elif isinstance(node, ast.arg):
                n = node.arg
            else:
                continue
            if n in names and (n not in firsts or self._start(node) < self._start(firsts[n])):
                firsts[n] = node
        for n, accs in names.items():
            anchor = firsts.get(n)
            if anchor is None:
                continue
            if n in here:
                hold = self._hold(anchor, accs, f"'{n}'")
            else:  # only the tree's other modules give it npu's value: nothing missing here
                hold = Hold(self._start(anchor), quiet=True)
            self.holds.names[n] = hold
        # every comparison of a held name stays (`group_backend == dist.Backend.NCCL`), and
        # an if that makes one keeps its body for that device too
        for node in nodes:
            if isinstance(node, ast.Compare):
                held = next(
                    (_operand(s) for s in (node.left, *node.comparators) if _operand(s) in self.holds.names), None
                )
                if held is not None:
                    self._add(node, self.holds.names[held])
            elif isinstance(node, ast.If):
                for sub in ast.walk(node.test):
                    if isinstance(sub, ast.Compare):
                        held = next(
                            (_operand(s) for s in (sub.left, *sub.comparators) if _operand(s) in self.holds.names), None
                        )
                        if held is not None:
                            self._add(node, self.holds.names[held])
                            break
                else:  # no held name compared: `if torch.cuda.is_available(): device = "cuda"`
                    held = next((n for n in _cuda_bound(node.body + node.orelse) if n in self.holds.names), None)
                    if held is not None and self._cuda_check(node.test):
                        self._add(node, self.holds.names[held])
                if not self._is_elif(node):
                    self._chain_choice(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.IfExp):
                # device = "cuda" if torch.cuda.is_available() else "cpu": the value stays, so
                # does the check that chooses it, or it would pick "cuda" on an NPU
                held = next((n for n in _cuda_bound([node]) if n in self.holds.names), None)
                if held is not None:
                    self._add(node.value, self.holds.names[held])
                    self._own_choice(node.value, self.mentions(node.value), [node.value], self.holds.names[held])

    def _chain_choice(self, node: ast.If) -> None:
        """`if is_xpu_available(): device = "xpu" else: device = "cuda"`: see _own_choice."""
        accs: set[str] = set()
        values, hold = [], None
        for test in self._tests(node):
            accs |= self.mentions(test)
        branch: ast.AST | None = node
        while isinstance(branch, ast.If):  # its own branches, each elif's too
            for stmt in [*branch.body, *branch.orelse]:
                names = [n for n in _cuda_bound([stmt]) if n in self.holds.names]
                if names:
                    values.append(stmt.value)
                    hold = hold or self.holds.names[names[0]]
            rest = branch.orelse
            branch = rest[0] if len(rest) == 1 and isinstance(rest[0], ast.If) else None
        if hold is not None:
            self._own_choice(node.test, frozenset(accs), values, hold, "this if/elif chain")

    def _own_choice(
        self, place: ast.AST, own: frozenset[str], values: list, hold: Hold, what: str = "this expression"
    ) -> None:
        """A choice of a held name's value between accelerators, npu not among them:
        `device = "xpu" if is_xpu_available() else "cuda"`. The name's own hold says once
        what the name lacks (nothing, where the tree gives it npu's value elsewhere); each
        such choice says it too, at its own place (the anchor its place's hold has), through
        a hold on its CUDA values for the value rules alone (rules/kinds/literals.py)."""
        if not own or own & {NPU, GENERIC}:
            return
        said = self._hold(place, set(own), what)
        codes = frozenset(r.code for r in self.rules.assigns)
        for value in values:
            for node in ast.walk(value):
                if isinstance(node, (ast.Constant, ast.JoinedStr)) and _cuda_value(node):
                    self._add(node, Hold(said.anchor, said.code, said.message, said.fix, codes))


_ASCEND_VISIBLE = next(k for k, v in VISIBLE_DEVICES_ENV.items() if v == NPU)
_CUDA_MEMBERS = frozenset({_GPU.upper(), CUDA.upper(), "MULTI_" + _GPU.upper(), "MULTI_" + CUDA.upper()})


_GETS = frozenset({"get", "num", "count", "current", "list", "visible", "all"})
_GOT = frozenset({"count", "devices", "memory", "properties", "state", "states", "tracker", "info", "name"})


def _getter(words: list[str]) -> bool:
    """get_cuda_rng_tracker, num_cuda_devices, cuda_device_count: a name that asks what
    CUDA has (a `to_cuda` / `cuda_helper` does something and is migrated)."""
    return words[0] in _GETS or words[-1] in _GOT


def _visible_names(accs: frozenset[str]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in VISIBLE_DEVICES_ENV.items() if v in accs)


def _cuda_member(node: ast.AST) -> bool:
    """DistributedType.MULTI_GPU, DeviceType.CUDA: CUDA's member of an enum (a CamelCase
    owner), not a module constant."""
    if not isinstance(node, ast.Attribute) or node.attr not in _CUDA_MEMBERS:
        return False
    owner = _spelled(node.value)
    return bool(owner) and owner[-1][:1].isupper() and not owner[-1].isupper()


def _flag_names(test: ast.AST) -> list[str]:
    """The flags an if tests directly: `use_cuda`, `not self._on_cuda`, `a and args.cuda`
    (not names inside calls or comparisons)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _flag_names(test.operand)
    if isinstance(test, ast.BoolOp):
        return [n for v in test.values for n in _flag_names(v)]
    if isinstance(test, ast.Name):
        return [test.id]
    if isinstance(test, ast.Attribute):
        return [test.attr]
    return []


def _api_errors(handler: ast.ExceptHandler) -> bool:
    """`except AttributeError` / `except (AttributeError, TypeError)`: what an API a torch
    lacks raises."""
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {k.id for k in kinds if isinstance(k, ast.Name)}
    return bool(names) and len(names) == len(kinds) and names <= {"AttributeError", "TypeError"}


def _answers_for_cuda(name: str) -> bool:
    """is_cuda_available, check_cuda_p2p_ib_support, cuda_version, nccl_available: a
    question whose answer is about CUDA (see _QUESTIONS)."""
    words = [w for w in name.lower().split("_") if w]
    asks = bool(words) and (words[0] in _QUESTIONS or words[-1] in _ANSWERS)
    return asks and bool(_CUDA_WORDS & set(words))


def _spelled(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def _device_of_identifier(name: str) -> str | None:
    """`is_xpu_available`, `pt_npu_available`, `MULTI_XPU`, `RNGType.NPU` name a device;
    `not_in_torch_npu` or `mps_fallback` do not (no "available", not an enum member)."""
    words = [w for w in name.lower().split("_") if w]
    if not words:
        return None
    if name.isupper() or "available" in words or name in _DEVICES:
        for w in words:
            if w in _DEVICES:
                return w
    return None


def _device_of_value(value: str) -> str | None:
    """ "xpu", "npu:0", "hccl" name a device other than CUDA ("hip" a platform)."""
    if value in OTHER_BACKENDS:
        return OTHER_BACKENDS[value]
    if value in OTHER_PLATFORMS:
        return value
    m = _DEVICE_VALUE.match(value)
    return m.group(1) if m and m.group(1) in _DEVICES else None


def _constants(node: ast.AST, shallow: bool = False) -> list[str]:
    if shallow:
        return [e.value for e in getattr(node, "elts", []) if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _generic_lookup(node: ast.Call, imports: dict[str, str]) -> bool:
    """`getattr(torch, device_type)`, `getattr(torch, device.type)`: torch's module for a
    device named at run time, which answers for npu as for any other (a constant name, or
    another name, `getattr(torch, args.model_dtype)`, does not)."""
    return (
        isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and not isinstance(node.args[1], ast.Constant)
        and qualified(node.args[0], imports) == "torch"
        and _DEVICE_WORD in ast.unparse(node.args[1]).lower()
    )


def _cuda_value_or_backend(value: object) -> bool:
    """ "nccl", "cuda:0", "cuda:nccl,cpu:gloo": an answer that names CUDA or NCCL."""
    if not isinstance(value, str):
        return False
    words = set(re.split(r"[^a-z0-9]+", value.lower()))
    return bool(words & {CUDA, LITERALS["backend"].cuda})


def _patches_cuda(decorator: ast.AST) -> bool:
    """`@patch("torch.cuda.is_available", return_value=True)` (mock.patch too): a test that
    tells the code under it CUDA is there. (A patch of what the code calls, `@patch(
    "torch.cuda.Stream")`, stubs it and moves with the rewritten code.)"""
    if not isinstance(decorator, ast.Call) or not decorator.args:
        return False
    name = _spelled(decorator.func)
    first = decorator.args[0]
    return (
        bool(name)
        and name[-1] == "patch"
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and first.value.startswith("torch." + CUDA + ".")
        and first.value.rsplit(".", 1)[-1] in _SAFE
    )


def _cuda_bound(stmts: list[ast.stmt]) -> list[str]:
    """The names these statements (not their nested blocks) bind to a CUDA device value:
    `device = "cuda"`, `self.device = f"cuda:{rank}"`, `device = "cuda" if ok else "cpu"`."""
    names = []
    for stmt in stmts:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and _cuda_value(stmt.value):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names += [n for t in targets if (n := _operand(t)) is not None]
    return names


def _cuda_value(node: ast.AST) -> bool:
    """A CUDA device string, or a conditional expression choosing one."""
    if isinstance(node, ast.IfExp):
        return _cuda_value(node.body) or _cuda_value(node.orelse)
    if isinstance(node, ast.JoinedStr):
        return bool(node.values) and _cuda_value(node.values[0])
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == CUDA or node.value.startswith(CUDA + ":")
    return False


def _operand(node: ast.AST) -> str | None:
    """The name a value goes by (as cstutil.operand_name): `x.device` -> "device",
    `cfg["backend"]` -> "backend", `backend` -> "backend"."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None
