"""Rewrites launch scripts and configs (sh, Slurm, .env, YAML, TOML, JSON, Dockerfile,
pip requirements files) line by line: environment variable names and `text` rules (backend = "nccl", --device cuda,
#SBATCH --gpus-per-node, nvidia-smi).

These files have no syntax tree we could trust across dialects, so only unambiguous tokens
are touched: a known variable name as a whole word, or a rule's explicit pattern. Formats
that have a standard parser (JSON, TOML) are parsed again after the rewrite (`reparse_error`).
"""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import PurePath

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.rules.kinds.env_values import convert_env
from titan_doctor.migrate.rules.kind import fill
from titan_doctor.migrate.rules.load import RuleSet
from titan_doctor.migrate.suppress import codes_on, silences

TEXT_SUFFIXES = {".sh", ".bash", ".zsh", ".env", ".yaml", ".yml", ".toml", ".cfg", ".ini",
                 ".json", ".sbatch", ".slurm"}
TEXT_NAMES = {"Dockerfile", "Containerfile", ".env"}
_VAR = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")
# NAME=value / NAME: value right after a variable name (a literal value: no $, no spaces);
# a quoted key ("NAME": "value" in JSON/YAML) closes its quote first; a comma that
# ends a JSON/YAML item is not part of the value (one inside it, 0,1,2, is)
_VALUE = re.compile(r"""(?P<kq>["']?)[ \t]*(?:=|:(?=[ \t"']|\d))[ \t]*(?P<q>["']?)"""
                    r"""(?P<value>[^\s"'$`#{}]*?)(?P=q)(?=\s|$|[;#}\]]|,(?:\s|$))""")


def is_text_file(path: PurePath) -> bool:
    name = path.name
    return (path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES or name.startswith(".env")
            or name.endswith(".env") or is_requirements_file(path))


def is_requirements_file(path: PurePath) -> bool:
    """pip requirement and constraint lists (requirements.txt, requirements-dev.txt,
    constraints.txt): where a project pins CUDA-only packages (flash-attn, pynvml)."""
    return path.suffix == ".txt" and path.name.startswith(("requirements", "constraints"))


def _finding(rule, status: Status, message: str, path: str, line: int, col: int,
             fix: str | None = None) -> Finding:
    return Finding(code=rule.code, status=status, message=message,
                   fix=rule.fix if fix is None else fix, path=path, line=line, col=col)


@dataclass
class _Sink:
    """Where one line's findings go: `findings`, or `suppressed` when the line's
    `# titan-doctor: ignore[...]` comment names the code (that change is then not made)."""

    findings: list[Finding]
    ignore: frozenset[str] | None
    suppressed: list[Finding] | None

    def add(self, finding: Finding) -> bool:
        """Record `finding`; False when it is suppressed and the text must stay as is."""
        if silences(self.ignore, finding.code):
            if self.suppressed is not None:
                self.suppressed.append(finding)
            return False
        self.findings.append(finding)
        return True


def _rename_env(line: str, rules: RuleSet, path: str, lineno: int, sink: _Sink) -> str:
    """Known environment variable names in one line renamed (or reported), with the
    literal value set with them converted by envvalues.convert_env (NCCL_BUFFSIZE bytes ->
    HCCL_BUFFSIZE MB, NCCL_DEBUG levels -> ASCEND_GLOBAL_LOG_LEVEL numbers)."""
    out, pos = [], 0
    for m in _VAR.finditer(line):
        name = m.group(0)
        if m.start() < pos or rules.env_rule(name) is None:
            continue
        # ${NAME:-default} reads the variable: no value is set here
        before = line[m.start() - 1:m.start()]
        value = None if before == "{" else _VALUE.match(line, m.end())
        if value and value.group("kq") and value.group("kq") != before:
            value = None  # a closing quote with no opening one: not a key
        literal = value.group("value") if value and value.group("value") else None
        change = convert_env(rules, name, literal, value_known=literal is not None)
        fixed = change.status is Status.FIXED and change.new_name is not None
        shown = sink.add(_finding(change.rule, Status.FIXED if fixed else Status.MANUAL,
                                  change.message, path, lineno, m.start() + 1, change.fix))
        if not (fixed and shown):
            continue
        out += [line[pos:m.start()], change.new_name]
        pos = m.end()
        if change.new_value is not None:
            out += [line[pos:value.start("value")], change.new_value]
            pos = value.end("value")
    out.append(line[pos:])
    return "".join(out)


def _apply_text_rules(line: str, rules: RuleSet, path: str, lineno: int, sink: _Sink) -> str:
    """The `text` rules over one line. A group `opt` in a pattern is what the finding
    points at and shows as {old}; a group `pre` is kept when `new` replaces the match."""
    for pattern, rule in rules.text:
        new = rule.new

        def text(m: re.Match, rule=rule, new=new) -> str:
            status = Status.FIXED if new is not None else Status.MANUAL
            pre = m.groupdict().get("pre") or ""
            shown = "opt" if m.groupdict().get("opt") is not None else 0
            replacement = m.group(0) if new is None else pre + new
            message = fill(rule.message, old=_shown(m.group(shown)),
                           new=_shown(replacement) if new is not None else "")
            if not sink.add(_finding(rule, status, message, path, lineno, m.start(shown) + 1)):
                return m.group(0)
            return replacement

        line = pattern.sub(text, line)
    return line


def _shown(text: str) -> str:
    """Matched text for a message: quotes dropped (a match may end inside a string)."""
    return text.replace('"', "").replace("'", "").strip()


def rewrite_line(line: str, rules: RuleSet, path: str, lineno: int, findings: list[Finding],
                 suppressed: list[Finding] | None = None) -> str:
    """One line with env names (and their values) and text patterns rewritten; findings
    appended. What the line's `# titan-doctor: ignore[CODE]` comment names is left as it
    is and goes to `suppressed` (when given) instead."""
    sink = _Sink(findings, codes_on(line), suppressed)
    return _apply_text_rules(_rename_env(line, rules, path, lineno, sink),
                             rules, path, lineno, sink)


def migrate_text(data: bytes, rules: RuleSet, path: str,
                 suppressed: list[Finding] | None = None) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings); bytes are identical when nothing changed. UTF-8 only:
    a UnicodeDecodeError propagates and the engine reports where the file stops decoding.
    Findings silenced by `# titan-doctor: ignore` go to `suppressed` when it is given."""
    text = data.decode("utf-8")
    findings: list[Finding] = []
    out = [rewrite_line(ln, rules, path, i, findings, suppressed)
           for i, ln in enumerate(text.splitlines(keepends=True), 1)]
    new = "".join(out)
    return (data if new == text else new.encode("utf-8")), findings


def reparse_error(path: PurePath, old: bytes, new: bytes) -> str | None:
    """Why `new` no longer parses as its format (JSON, TOML) when `old` did; else None.
    Formats without a standard-library parser (YAML, shell) are not checked."""
    if path.suffix == ".json":
        load, errors = (lambda b: json.loads(b.decode("utf-8-sig"))), (ValueError,)
    elif path.suffix == ".toml":
        load, errors = (lambda b: tomllib.loads(b.decode("utf-8-sig"))), (tomllib.TOMLDecodeError,)
    else:
        return None
    try:
        load(old)
    except (*errors, UnicodeDecodeError):
        return None  # a template or a dialect (JSON with comments): nothing to compare
    try:
        load(new)
    except (*errors, UnicodeDecodeError) as e:
        return str(e)
    return None
