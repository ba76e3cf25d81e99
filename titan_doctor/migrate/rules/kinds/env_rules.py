"""Environment variable rules (`kind = "env"`): NCCL_* / CUDA_* names and how their values
convert (rules/migrate/env.toml). The schema, checks and examples; the conversion of a
value is env_values.py, the pieces that apply them env.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from titan_doctor.migrate.rules.kind import Example, Kind, Rule, regex_errors
from titan_doctor.migrate.rules.ruleset import RuleSet

VALUE_KINDS = ("same", "scale", "map", "keys", "manual")


@dataclass(frozen=True, kw_only=True)
class Env(Rule):
    """Environment variable `old` (trailing * = a family). Without `new`: reported. With
    `new`, `value` says whether its value carries over (see env_values.py): same (as is;
    `pattern` limits which values), scale (new = old / factor, exact only, >= min), map
    (`values` table), keys (comma list of key:value, keys in `keys`/`rename_keys`), manual
    (never converted by the tool). old_unit/new_unit and old_source/source document each
    side; `note` is said with every converted value."""

    old: str
    new: str | None = None
    value: str = "same"
    old_unit: str = ""
    new_unit: str = ""
    old_source: str = ""
    pattern: str | None = None
    factor: int | None = None
    min: int | None = None
    values: dict[str, str] = field(default_factory=dict)
    keys: tuple[str, ...] = ()
    rename_keys: dict[str, str] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()
    note: str = ""  # said with every converted value (what else differs)


def _check(rule: Env) -> list[str]:
    errors = []
    if rule.value not in VALUE_KINDS:
        errors.append(f"'value' must be one of {', '.join(VALUE_KINDS)}")
    if rule.new is None and rule.value != "same":
        errors.append("'value' needs 'new' (what the value converts to)")
    needs = {"scale": ("factor",), "map": ("values",), "keys": ("keys",)}.get(rule.value, ())
    errors += [f"value = \"{rule.value}\" needs '{k}'" for k in needs if not getattr(rule, k)]
    if rule.new is not None and rule.value != "same" and not (rule.old_unit and rule.new_unit):
        errors.append("a converted value needs 'old_unit' and 'new_unit' (what each side means)")
    if rule.new is not None and rule.value != "same" and not rule.old_source:
        errors.append("a converted value needs 'old_source' (where the CUDA side's meaning is documented)")
    errors += regex_errors([rule.pattern] if rule.pattern else [], "pattern")
    return errors


def _index(rules: RuleSet, rule: Env) -> None:
    if rule.old.endswith("*"):
        rules.env_families.append((rule.old[:-1], rule))
        rules.env_families.sort(key=lambda pr: -len(pr[0]))
    else:
        rules.env[rule.old] = rule


ENV = Kind(
    "env",
    Env,
    _index,
    markers=lambda r: (r.old.rstrip("*"),),
    check=_check,
    valid=(
        Example('import os\n\nos.environ["OMP_NUM_THREADS"] = "4"\n'),
        Example("export OMP_NUM_THREADS=4\n", name="launch.sh"),
    ),
    invalid=(
        Example(
            'import os\n\nos.environ["NCCL_BUFFSIZE"] = "4194304"\n',
            fixed='import os\n\nos.environ["HCCL_BUFFSIZE"] = "4"\n',
        ),
        Example("export NCCL_BUFFSIZE=4194304\n", fixed="export HCCL_BUFFSIZE=4\n", name="launch.sh"),
        Example("export NCCL_BUFFSIZE=$SIZE\n", name="launch.sh"),
    ),
)
