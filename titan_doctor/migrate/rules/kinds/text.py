"""Text rules (`kind = "text"`): a regex over every line of scripts and configs (sh,
Slurm, .env, YAML, TOML, JSON, Dockerfiles, notebook shell lines), never over Python
code: `--device cuda`, `backend: nccl`, `#SBATCH --gpus-per-node`, nvidia-smi. One
module: the schema, its checks, the line piece that applies it, examples."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from titan_doctor.findings import Status
from titan_doctor.migrate.context import LineContext
from titan_doctor.migrate.rules.kind import Example, Family, Kind, Rule, fill, regex_errors
from titan_doctor.migrate.rules.ruleset import RuleSet

GROUPS = ("pre", "opt")
FIELDS = ("old", "new")


@dataclass(frozen=True, kw_only=True)
class Text(Rule):
    """Regex `pattern` searched in every line of scripts and configs. Each match is
    replaced by `new`, or only reported when `new` is absent. Named groups: `pre` is text
    the match needs as context and keeps (`--device ` before `cuda`: the match becomes
    pre + new); `opt` is the part the finding points at (its column) and shows. `message`
    may use {old} (the `opt` group, else the whole match) and {new} (the whole
    replacement, pre + new), quotes dropped. `marker` is plain text every match spells
    (the line rewriter's pre-filter). dependency = true: the pattern names a package
    in a dependency list, so setup.py's requirement strings are matched too
    (python/requirements.py)."""

    pattern: str
    marker: str
    new: str | None = None
    dependency: bool = False


def _check(rule: Text) -> list[str]:
    errors = regex_errors([rule.pattern], "pattern")
    if not errors:
        unknown = sorted(set(re.compile(rule.pattern).groupindex) - set(GROUPS))
        if unknown:
            errors.append(
                f"pattern group(s) {', '.join(unknown)} mean nothing here (named groups: {', '.join(GROUPS)})"
            )
    fields = sorted({f for _, f, _, _ in string.Formatter().parse(rule.message) if f} - set(FIELDS))
    if fields:
        errors.append(
            f"message field(s) {{{'}, {'.join(fields)}}} are not filled for text rules (fields: {{old}}, {{new}})"
        )
    return errors


def _index(rules: RuleSet, rule: Text) -> None:
    rules.text.append((re.compile(rule.pattern), rule))


def apply_to_line(line: str, rules: RuleSet, ctx: LineContext) -> str:
    """The line piece: the text rules over one line. A group `opt` in a pattern is what
    the finding points at and shows as {old}; a group `pre` is kept when `new` replaces
    the match."""
    for pattern, rule in rules.text:
        new = rule.new

        def text(m: re.Match, rule=rule, new=new) -> str:
            status = Status.FIXED if new is not None else Status.MANUAL
            pre = m.groupdict().get("pre") or ""
            shown = "opt" if m.groupdict().get("opt") is not None else 0
            replacement = m.group(0) if new is None else pre + new
            message = fill(rule.message, old=_shown(m.group(shown)), new=_shown(replacement) if new is not None else "")
            if not ctx.report(rule.code, status, message, m.start(shown) + 1, rule.fix):
                return m.group(0)
            return replacement

        line = pattern.sub(text, line)
    return line


def dependency_matches(value: str, rules: RuleSet):
    """(rule, the text a finding shows, its offset in `value`) for each dependency rule
    matching one requirement string (`"flash-attn>=2"` in setup.py's install_requires)."""
    for pattern, rule in rules.text:
        if rule.dependency:
            m = pattern.search(value)
            if m:
                group = "opt" if m.groupdict().get("opt") is not None else 0
                yield rule, _shown(m.group(group)), m.start(group)


def _shown(text: str) -> str:
    """Matched text for a message: quotes dropped (a match may end inside a string)."""
    return text.replace('"', "").replace("'", "").strip()


TEXT = Kind(
    "text",
    Text,
    _index,
    markers=lambda r: (r.marker,),
    check=_check,
    valid=(Example("python train.py --device cpu\n", name="run.sh"),),
    invalid=(
        Example("python train.py --device cuda\n", fixed="python train.py --device npu\n", name="run.sh"),
        Example("#SBATCH --gpus-per-node=8\n", name="job.sbatch"),
    ),
)

FAMILY = Family(
    kinds=(TEXT,),
    fields={"text": list},  # (compiled pattern, rule), in load order
    lines=apply_to_line,
)
