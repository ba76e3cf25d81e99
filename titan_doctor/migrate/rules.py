"""Migrate rules: load rules/migrate/*.toml (plus user files), validate, select by code.

Rules are data so they can be reviewed against their source; the transformer only knows
the rule *kinds*. One `[[rule]]` table per entry:

    kind = "rename"      old/new qualified names (simple renames; longest `old` wins);
                         optional gate = "npu" (next name must be one torch.npu provides,
                         else gate_code/gate_message is reported) or gate = "members" (next
                         name must be in `members`), status = "manual" (rewritten
                         but needs review)
    kind = "report"      match: a qualified-name prefix reported with `fix`, never rewritten
    kind = "literal_arg" literal = "device"|"backend" strings given at callee/method
                         position `pos` or `keywords` are rewritten (report_only: reported)
    kind = "compare"     literal compared (==, !=, in) with an operand whose name matches a
                         glob in `operands` (`x.device.type` is "type", `f()` is "f()")
    kind = "assign"      literal assigned to a variable, attribute or parameter default
                         named in `targets` (device = "cuda", def f(device="cuda"))
    kind = "method"      .old() / .old -> .new on any object (call = true: only when called)
    kind = "ambiguous"   literal of that kind anywhere else: reported, not touched
    kind = "env"         environment variable `old` (trailing * = family) -> `new` or report
    kind = "text"        regex `pattern` in sh/.env/YAML/TOML files -> `new` or report;
                         `marker`: plain text the pattern needs (the pre-filter)
    kind = "file"        files with `suffixes` are reported (e.g. .cu)
    kind = "add_import"  the `import torch_npu` insertion

Every rule has code, message and source. Names are resolved through import bindings by the
transformer, so `old` is always a fully qualified name, never a spelling.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from titan_knowledge import KnowledgeError, load_toml, rules_dir

CODE_RE = re.compile(r"^[A-Z]{2,}\d{3}$")
NPU_API_FILE = "npu_api.toml"
LITERALS = ("device", "backend")

_REQUIRED = {
    "rename": ("old", "new"),
    "report": ("match",),
    "literal_arg": ("literal",),
    "compare": ("literal", "operands"),
    "assign": ("literal", "targets"),
    "method": ("old", "new"),
    "ambiguous": ("literal",),
    "env": ("old",),
    "text": ("pattern", "marker"),
    "file": ("suffixes",),
    "add_import": (),
}
# The literal word each literal kind looks for: also the cheap pre-filter marker.
LITERAL_MARKERS = {"device": "cuda", "backend": "nccl"}


@dataclass
class RuleSet:
    """Validated rules, indexed the way the transformer and text rewriters look them up."""

    names: dict[str, dict] = field(default_factory=dict)        # rename + report, by old/match
    literal_args: list[dict] = field(default_factory=list)
    compares: list[dict] = field(default_factory=list)
    assigns: dict[str, dict] = field(default_factory=dict)     # variable/parameter name -> rule
    methods: dict[str, dict] = field(default_factory=dict)
    ambiguous: dict[str, dict] = field(default_factory=dict)    # by literal kind
    env: dict[str, dict] = field(default_factory=dict)          # exact names
    env_families: list[tuple[str, dict]] = field(default_factory=list)  # prefix, longest first
    text: list[tuple[re.Pattern, dict]] = field(default_factory=list)
    files: dict[str, dict] = field(default_factory=dict)        # suffix -> rule
    add_import: dict | None = None
    npu_names: frozenset = frozenset()
    npu_submodules: dict[str, frozenset] = field(default_factory=dict)
    npu_version: str = ""
    markers: tuple[tuple[str, ...], ...] = ()
    marker_re: re.Pattern | None = None
    line_re: re.Pattern | None = None       # last word of each marker: per-statement check
    name_prefixes: frozenset = frozenset()  # every dotted prefix of a name rule's key
    help: dict[str, str] = field(default_factory=dict)          # code -> one line

    def env_rule(self, name: str) -> dict | None:
        """The rule for an environment variable name: exact name first, then the family."""
        rule = self.env.get(name)
        if rule is not None:
            return rule
        for prefix, fam in self.env_families:
            if name.startswith(prefix):
                return fam
        return None

    def name_rule(self, qname: str) -> tuple[dict, int] | None:
        """Longest rule whose old/match is a component-wise prefix of `qname`."""
        parts = qname.split(".")
        for n in range(len(parts), 0, -1):
            rule = self.names.get(".".join(parts[:n]))
            if rule is not None:
                return rule, n
        return None


def builtin_files() -> list[Path]:
    folder = rules_dir() / "migrate"
    return sorted(p for p in folder.glob("*.toml") if p.name != NPU_API_FILE)


def _selected(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool:
    select, ignore = list(select), list(ignore)
    if select and not any(code.startswith(s) for s in select):
        return False
    return not any(code.startswith(i) for i in ignore)


def _check(rule: dict[str, Any], where: str) -> None:
    kind = rule.get("kind")
    if kind not in _REQUIRED:
        raise KnowledgeError(f"{where}: unknown kind {kind!r} (one of {', '.join(_REQUIRED)})")
    code = rule.get("code", "")
    if not CODE_RE.match(str(code)):
        raise KnowledgeError(f"{where}: code {code!r} must look like NPU101")
    for key in ("message", "source") + _REQUIRED[kind]:
        if key not in rule or rule[key] in ("", None):
            raise KnowledgeError(f"{where} ({code}): missing '{key}'")
    if kind in ("literal_arg", "compare", "assign", "ambiguous") and rule["literal"] not in LITERALS:
        raise KnowledgeError(f"{where} ({code}): literal must be one of {LITERALS}")
    if kind == "literal_arg" and not (rule.get("callee") or rule.get("method")):
        raise KnowledgeError(f"{where} ({code}): literal_arg needs 'callee' or 'method'")
    if rule.get("gate") not in (None, "npu", "members") or (
            rule.get("gate") and not rule.get("gate_code")):
        raise KnowledgeError(f"{where} ({code}): gate must be \"npu\" or \"members\", with gate_code")
    if kind == "rename" and not rule["new"].split(".")[0] in ("torch", "torch_npu"):
        raise KnowledgeError(f"{where} ({code}): 'new' must start with torch. or torch_npu.")
    if kind == "text":
        try:
            rule["_re"] = re.compile(rule["pattern"])
        except re.error as e:
            raise KnowledgeError(f"{where} ({code}): bad pattern: {e}") from e


def _marker(rule: dict) -> tuple[str, ...]:
    """Words that must all occur in a file for the rule to match there (cheap pre-filter).

    A reference to a.b.c spells every component somewhere: the import names the bound
    prefix (`import a.b as x`, `from a.b import c`) and the use spells the rest.
    """
    kind = rule["kind"]
    if kind in ("rename", "report"):
        return tuple((rule.get("old") or rule["match"]).split("."))
    if kind in ("literal_arg", "compare", "assign", "ambiguous"):
        return (LITERAL_MARKERS[rule["literal"]],)
    if kind == "method":
        return (rule["old"],)
    if kind == "env":
        return (rule["old"].rstrip("*"),)
    if kind == "text":
        return (rule["marker"],)
    return ()


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
    alts = [re.escape(w) + ("" if w.endswith("_") else r"(?![\w])") for w in words]
    return re.compile(rb"(?<![\w])(?:" + "|".join(alts).encode() + rb")")


def _line_regex(rs: "RuleSet") -> re.Pattern:
    """What a statement's lines must contain for a rule to match inside it.

    A use of a.b.c.d spells at least `c.d` (the binding names a prefix, the use the rest;
    bindings at or below a rule's name are added per file, see skipping.note_binding), so
    names give `c.d` pairs; literals, methods, env vars and text rules give words.
    """
    alts = set()
    for key in rs.names:
        parts = key.split(".")
        if len(parts) == 1:
            alts.add(re.escape(parts[0]) + r"(?![\w])")
        else:
            alts.add(re.escape(parts[-2]) + r"\s*\.\s*" + re.escape(parts[-1]) + r"(?![\w])")
    words = {LITERAL_MARKERS[r["literal"]] for r in (*rs.literal_args, *rs.compares,
                                                     *rs.assigns.values())}
    words |= {LITERAL_MARKERS[k] for k in rs.ambiguous} | set(rs.methods)
    words |= set(rs.env) | {p for p, _ in rs.env_families}
    words |= {r["marker"] for _, r in rs.text}
    alts |= {re.escape(w) + ("" if w.endswith("_") else r"(?![\w])") for w in words}
    return re.compile(rb"(?<![\w])(?:" + "|".join(sorted(alts, key=len, reverse=True)).encode() + rb")")


def may_match(rs: "RuleSet", data: bytes) -> bool:
    """True when some rule could match this file's text; False means nothing to do."""
    found = {m.decode() for m in rs.marker_re.findall(data)}
    return any(all(w in found for w in conj) for conj in rs.markers)


def load_rules(extra: Iterable[Path | str] = (), select: Iterable[str] = (),
               ignore: Iterable[str] = ()) -> RuleSet:
    """Built-in rules, then each `--rules FILE` (later entries win on the same name)."""
    api = load_toml(rules_dir() / "migrate" / NPU_API_FILE).get("torch_npu", {})
    rs = RuleSet(npu_names=frozenset(api.get("npu", [])), npu_version=api.get("version", "?"),
                 npu_submodules={k: frozenset(v) for k, v in api.get("submodules", {}).items()})
    markers: set[tuple[str, ...]] = set()
    for path in [*builtin_files(), *map(Path, extra)]:
        data = load_toml(Path(path))
        entries = data.get("rule", [])
        if not isinstance(entries, list):
            raise KnowledgeError(f"{path}: expected [[rule]] tables")
        for i, rule in enumerate(entries):
            _check(rule, f"{path}: rule {i}")
            if not _selected(rule["code"], select, ignore):
                continue
            _index(rs, rule)
            markers.add(_marker(rule))
    rs.markers = _minimal(markers)
    rs.marker_re = _marker_regex(rs.markers)
    rs.line_re = _line_regex(rs)
    rs.name_prefixes = frozenset(".".join(k.split(".")[:i]) for k in rs.names
                                 for i in range(1, k.count(".") + 2))
    return rs


def describe(rule: dict) -> str:
    """One line for --list-rules and SARIF rule help."""
    kind = rule["kind"]
    if kind == "rename":
        return f"{rule['old']} -> {rule['new']}"
    literal = rule.get("literal")
    old = rule.get("match") or rule.get("old") or repr(LITERAL_MARKERS.get(literal, ""))
    new = rule.get("new") or repr({"device": "npu", "backend": "hccl"}.get(literal, ""))
    return rule["message"].format(old=old, new=new, version="").strip()


def _index(rs: RuleSet, rule: dict) -> None:
    kind = rule["kind"]
    rs.help.setdefault(rule["code"], describe(rule))
    if rule.get("gate_code"):
        rs.help.setdefault(rule["gate_code"], rule["gate_message"].format(
            old=rule["old"] + ".<name>", version=rs.npu_version))
    if kind in ("rename", "report"):
        rs.names[rule.get("old") or rule["match"]] = rule
    elif kind == "literal_arg":
        rs.literal_args.append(rule)
    elif kind == "compare":
        rs.compares.append(rule)
    elif kind == "assign":
        for name in rule["targets"]:
            rs.assigns[name] = rule
    elif kind == "method":
        rs.methods[rule["old"]] = rule
    elif kind == "ambiguous":
        rs.ambiguous[rule["literal"]] = rule
    elif kind == "env":
        old = rule["old"]
        if old.endswith("*"):
            rs.env_families.append((old[:-1], rule))
            rs.env_families.sort(key=lambda pr: -len(pr[0]))
        else:
            rs.env[old] = rule
    elif kind == "text":
        rs.text.append((rule["_re"], rule))
    elif kind == "file":
        for s in rule["suffixes"]:
            rs.files[s] = rule
    elif kind == "add_import":
        rs.add_import = rule
