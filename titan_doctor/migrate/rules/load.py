"""Migrate rules: load rules/migrate/*.toml (plus user --rules files) into typed rules
(rulekinds.py), check them all before anything runs, and index them the way the
transformer and the text rewriters look them up (RuleSet)."""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from titan_knowledge import KnowledgeError, load_toml, rules_dir
from titan_doctor.migrate.rules.kind import (KINDS, LITERALS, NPU_MODULE, PYTHON_CODE, REWRITERS,
                                            AddImport, Assign, Capability, Compare, Env,
                                            KernelGate, LiteralArg, Method, MixedCondition, Rename,
                                            Report, Rule, Text, File, Ambiguous, _word, parse_rule)

NPU_API_FILE = "npu_api.toml"


# -- the loaded set -----------------------------------------------------------------------
@dataclass(frozen=True)
class Prefilter:
    """The cheap text tests of one rewriter, from the marker words of the rules it applies:
    a file must contain every word of one conjunction to be worth parsing, and a statement
    or line must match `line_re` to be worth visiting."""

    markers: tuple[tuple[str, ...], ...]
    marker_re: re.Pattern
    line_re: re.Pattern

    def may_match(self, data: bytes) -> bool:
        found = {m.decode() for m in self.marker_re.findall(data)}
        return any(all(w in found or ("*" in w and any(fnmatch.fnmatchcase(f, w) for f in found))
                       for w in conj) for conj in self.markers)


@dataclass
class RuleSet:
    """Validated rules, indexed the way the transformer and text rewriters look them up."""

    names: dict[str, Rename | Report] = field(default_factory=dict)   # by old/match
    # report rules with a glob in the last component, as (fixed head parts, glob, rule)
    name_globs: list[tuple[list[str], str, Report]] = field(default_factory=list)
    capabilities: dict[str, Capability] = field(default_factory=dict)  # by match
    literal_args: list[LiteralArg] = field(default_factory=list)
    compares: list[Compare] = field(default_factory=list)
    assigns: list[Assign] = field(default_factory=list)
    methods: dict[str, Method] = field(default_factory=dict)
    ambiguous: dict[str, Ambiguous] = field(default_factory=dict)    # by literal kind
    env: dict[str, Env] = field(default_factory=dict)                # exact names
    env_families: list[tuple[str, Env]] = field(default_factory=list)  # prefix, longest first
    text: list[tuple[re.Pattern, Text]] = field(default_factory=list)
    files: dict[str, File] = field(default_factory=dict)             # suffix -> rule
    add_import: AddImport | None = None
    kernel_gate: KernelGate | None = None
    mixed_condition: MixedCondition | None = None
    npu_names: frozenset = frozenset()
    npu_submodules: dict[str, frozenset] = field(default_factory=dict)
    npu_version: str = ""
    prefilters: dict[str, "Prefilter"] = field(default_factory=dict)  # by rewriter
    name_prefixes: frozenset = frozenset()  # every dotted prefix of a name rule's key
    implicit_callees: frozenset = frozenset()  # calls whose CUDA default is made explicit
    kernel_re: re.Pattern | None = None     # words of CUDA-only kernel libraries in a file
    gate_re: re.Pattern | None = None       # text of a device check (is_cuda, "cuda", is_available)
    value_names: dict[str, re.Pattern] = field(default_factory=dict)   # literal -> producer names
    operand_names: dict[str, list[tuple[re.Pattern, Compare]]] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)               # code -> one line

    def mentions(self, text: bytes) -> bool:
        """True when `text` spells something some rule (either rewriter) matches."""
        return any(p.line_re.search(text) for p in self.prefilters.values())

    def env_rule(self, name: str) -> Env | None:
        """The rule for an environment variable name: exact name first, then the family."""
        rule = self.env.get(name)
        if rule is not None:
            return rule
        for prefix, fam in self.env_families:
            if name.startswith(prefix):
                return fam
        return None

    def name_rule(self, qname: str) -> tuple[Rename | Report, int] | None:
        """Longest rule whose old/match is a component-wise prefix of `qname`."""
        parts = qname.split(".")
        for n in range(len(parts), 0, -1):
            rule = self.names.get(".".join(parts[:n]))
            if rule is not None:
                return rule, n
        for head, last, rule in self.name_globs:   # `*_cuda`, `torch._C._cuda_*`
            n = len(head) + 1
            if len(parts) >= n and parts[:len(head)] == head and fnmatch.fnmatchcase(parts[len(head)], last):
                return rule, n
        return None

    def kernel_rule(self, qname: str) -> Report | None:
        """The kernel-library report rule `qname` falls under, if any."""
        hit = self.name_rule(qname)
        return hit[0] if hit and isinstance(hit[0], Report) and hit[0].kernel else None

    def value_literal(self, name: str) -> str | None:
        """The literal kind a name holds when a producer binds it (`device`, `dist_backend`)."""
        for literal, pattern in self.value_names.items():
            if pattern.match(name):
                return literal
        return None

    def compare_rule(self, operand: str) -> Compare | None:
        """The compare rule for an operand name, over all literal kinds."""
        for entries in self.operand_names.values():
            for pattern, rule in entries:
                if pattern.match(operand):
                    return rule
        return None


def builtin_files() -> list[Path]:
    folder = rules_dir() / "migrate"
    return sorted(p for p in folder.glob("*.toml") if p.name != NPU_API_FILE)


def _selected(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool:
    select, ignore = list(select), list(ignore)
    if select and not any(code.startswith(s) for s in select):
        return False
    return not any(code.startswith(i) for i in ignore)


def _glob_re(globs: Iterable[str]) -> re.Pattern:
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in sorted(set(globs))) or r"(?!)")


@functools.lru_cache(maxsize=1)
def builtin_rules() -> RuleSet:
    """The built-in rules, loaded once per process (diagnose reads the env mapping here)."""
    return load_rules()


def load_rules(extra: Iterable[Path | str] = (), select: Iterable[str] = (),
               ignore: Iterable[str] = ()) -> RuleSet:
    """Built-in rules, then each `--rules FILE` (later entries win on the same name).
    Every problem in every file is collected first and raised together, one line each."""
    api = load_toml(rules_dir() / "migrate" / NPU_API_FILE).get("torch_npu", {})
    # npu_api.toml lists torch.npu's names under the module's own name
    rs = RuleSet(npu_names=frozenset(api.get(NPU_MODULE[1], [])), npu_version=api.get("version", "?"),
                 npu_submodules={k: frozenset(v) for k, v in api.get("submodules", {}).items()})
    rules: list[Rule] = []
    errors: list[str] = []
    for path in [*builtin_files(), *map(Path, extra)]:
        data = load_toml(Path(path))
        unknown = sorted(set(data) - {"rule"})
        if unknown:
            errors.append(f"{path}: unknown top-level key(s) {', '.join(unknown)} (expected [[rule]] tables)")
        entries = data.get("rule", [])
        if not isinstance(entries, list):
            errors.append(f"{path}: expected [[rule]] tables")
            continue
        for i, entry in enumerate(entries):
            rule, problems = parse_rule(entry, f"{path}: rule {i}")
            errors += problems
            if rule is not None and _selected(rule.code, select, ignore):
                rules.append(rule)
    if errors:
        raise KnowledgeError("\n".join(errors))
    for rule in rules:
        kind = KINDS[rule.kind]
        rs.help.setdefault(rule.code, kind.describe(rule))
        kind.index(rs, rule)
    _derive(rs, rules)
    return rs


def _derive(rs: RuleSet, rules: list[Rule]) -> None:
    """The lookups computed over all rules: markers, line regex, producer/consumer names."""
    rs.prefilters = {w: _prefilter([r for r in rules if w in KINDS[r.kind].rewriters])
                     for w in REWRITERS}
    rs.implicit_callees = frozenset(r.callee for r in rs.literal_args if r.implicit)
    named = [*rs.names, *rs.capabilities, *rs.implicit_callees]
    rs.name_prefixes = frozenset(".".join(k.split(".")[:i]) for k in named
                                 for i in range(1, k.count(".") + 2))
    rs.kernel_re = _kernel_prefilter(rs)
    if rs.kernel_gate is not None:
        words = {g.rsplit(".", 1)[-1] for g in rs.kernel_gate.gates}
        device = LITERALS["device"].cuda
        rs.gate_re = re.compile("|".join([*(re.escape(w) for w in sorted(words)), f"[\"']{device}"]).encode())
    targets: dict[str, set[str]] = {}
    for r in rs.assigns:
        targets.setdefault(r.literal, set()).update(r.targets)
    rs.value_names = {lit: _glob_re(globs) for lit, globs in targets.items()}
    # a consumer (comparison) matches the producer names of its literal too: both ends of
    # a device string are rewritten, or neither
    rs.operand_names = {}
    for r in rs.compares:
        rs.operand_names.setdefault(r.literal, []).append(
            (_glob_re([*r.operands, *targets.get(r.literal, ())]), r))


def _kernel_prefilter(rs: RuleSet) -> re.Pattern | None:
    """Text a file must contain for one of its device checks to guard a CUDA-only kernel:
    a kernel library's name anywhere, cpp_extension, or an import line naming a module
    that matches the kernel_gate rule's globs."""
    if rs.kernel_gate is None:
        return None
    words = {r.match.split(".")[0] for r in rs.names.values() if isinstance(r, Report) and r.kernel}
    words.add("cpp_extension")
    fragments = {g.replace("*", "") for g in (*rs.kernel_gate.module_globs, *rs.kernel_gate.extension_globs)} - {""}
    alts = [rb"(?<![\w])" + re.escape(w.encode()) for w in sorted(words)]
    if fragments:
        alts.append(rb"(?:^|\n)[ \t]*(?:from|import)[ \t][^\n]*(?:"
                    + b"|".join(re.escape(f.encode()) for f in sorted(fragments)) + rb")")
    return re.compile(b"|".join(alts))


def _prefilter(rules: list[Rule]) -> Prefilter:
    markers = _minimal({KINDS[r.kind].markers(r) for r in rules})
    alts = {a for r in rules for a in KINDS[r.kind].line(r)}
    line_re = re.compile(rb"(?<![\w])(?:" + "|".join(sorted(alts, key=len, reverse=True)).encode()
                         + rb")" if alts else rb"(?!)")
    return Prefilter(markers, _marker_regex(markers), line_re)


def _minimal(markers: set[tuple[str, ...]]) -> tuple[tuple[str, ...], ...]:
    """Drop conjunctions implied by a weaker one: (torch, cuda) is implied by (cuda,)."""
    def implied(a, b):  # every word of b is in a (a prefix word covers what it starts)
        return all(any(x == w or (w.endswith("_") and x.startswith(w)) for x in a) for w in b)
    markers = {m for m in markers if m}
    keep = [a for a in markers if not any(b != a and implied(a, b) for b in markers)]
    return tuple(sorted(keep))


def _marker_regex(markers: tuple[tuple[str, ...], ...]) -> re.Pattern:
    """One pass over a file finds which marker words occur as whole words (a name or
    string token); a word ending in `_` is a prefix (NCCL_*)."""
    words = sorted({w for conj in markers for w in conj}, key=len, reverse=True)
    return re.compile(rb"(?<![\w])(?:" + "|".join(map(_word, words)).encode() + rb")")


def may_match(rs: RuleSet, data: bytes, rewriters: Iterable[str] = (PYTHON_CODE,)) -> bool:
    """True when a rule of one of `rewriters` could match this file's text; False means
    nothing to do."""
    return any(rs.prefilters[w].may_match(data) for w in rewriters)
