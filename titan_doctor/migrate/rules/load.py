"""Loading migrate rules: rules/migrate/*.toml (plus user --rules files) parsed into typed
rules by their kinds (rules/registry.py), every problem of every file checked before
anything runs, then indexed into a RuleSet."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from titan_doctor.migrate.rules import portable, prefilter
from titan_doctor.migrate.rules.kind import CODE_RE, REWRITERS, Rule
from titan_doctor.migrate.rules.registry import FAMILIES, FAMILY_OF, FIELDS, KINDS
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import NPU_MODULE, TARGETS
from titan_knowledge import KnowledgeError, load_toml, rules_dir, typed_entry

NPU_API_FILE = "npu_api.toml"
NOT_RULES = (NPU_API_FILE, portable.FILE)  # tables read by their own code, not [[rule]] files


def builtin_files() -> list[Path]:
    folder = rules_dir() / "migrate"
    return sorted(p for p in folder.glob("*.toml") if p.name not in NOT_RULES)


@functools.lru_cache(maxsize=1)
def builtin_rules() -> RuleSet:
    """The built-in rules, loaded once per process (diagnose reads the env mapping here)."""
    return load_rules()


def parse_rule(entry: object, where: str) -> tuple[Rule | None, list[str]]:
    """One [[rule]] table as its typed rule, or the one-line errors that stop it."""
    if not isinstance(entry, dict):
        return None, [f"{where}: expected a table"]
    kind = entry.get("kind")
    code = entry.get("code")
    label = f"{where} ({code})" if isinstance(code, str) and code else where
    if kind not in KINDS:
        return None, [f"{label}: unknown kind {kind!r} (one of {', '.join(KINDS)})"]
    rule, errors = typed_entry(entry, KINDS[kind].schema, label)
    if isinstance(code, str) and not CODE_RE.match(code):
        errors.append(f"{label}: code {code!r} must look like NPU101")
    if rule is None:
        return None, errors
    errors += [f"{label}: {e}" for e in KINDS[kind].check(rule)]
    return (rule if not errors else None), errors


def load_rules(
    extra: Iterable[Path | str] = (),
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    target: str = TARGETS[0],
) -> RuleSet:
    """Built-in rules, then each `--rules FILE` (later entries win on the same name).
    Every problem in every file is collected first and raised together, one line each.
    target = "portable": the rules laid over by rules/migrate/portable.toml (portable.py)."""
    api = load_toml(rules_dir() / "migrate" / NPU_API_FILE).get("torch_npu", {})
    # npu_api.toml lists torch.npu's names under the module's own name
    rs = RuleSet(
        FIELDS,
        npu_names=frozenset(api.get(NPU_MODULE[1], [])),
        npu_version=api.get("version", "?"),
        npu_submodules={k: frozenset(v) for k, v in api.get("submodules", {}).items()},
    )
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
    if target == portable.TARGET:
        table = portable.table()
        rules = [r for r in portable.overlay(rules, table) if _selected(r.code, select, ignore)]
        portable.finish(rs, rules, table)
    for rule in rules:
        kind = KINDS[rule.kind]
        rs.help.setdefault(rule.code, kind.describe(rule))
        kind.index(rs, rule)
    for family in FAMILIES:
        if family.derive is not None:
            family.derive(rs)
    rs.prefilters = {w: _prefilter([r for r in rules if w in FAMILY_OF[r.kind].rewriters]) for w in REWRITERS}
    return rs


def _prefilter(rules: list[Rule]) -> prefilter.Prefilter:
    return prefilter.build(
        [KINDS[r.kind].markers(r) for r in rules], [a for r in rules for a in KINDS[r.kind].spelled(r)]
    )


def _selected(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool:
    select, ignore = list(select), list(ignore)
    if select and not any(code.startswith(s) for s in select):
        return False
    return not any(code.startswith(i) for i in ignore)
