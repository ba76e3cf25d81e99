"""Rewrites launch scripts and configs (sh, .env, YAML, TOML, Dockerfile) line by line:
environment variable names and `text` rules (backend = "nccl", nvidia-smi).

These files have no syntax tree we could trust across dialects, so only unambiguous tokens
are touched: a known variable name as a whole word, or a rule's explicit pattern.
"""
from __future__ import annotations

import re
from pathlib import PurePath

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.envvalues import convert_env
from titan_doctor.migrate.rules import RuleSet

TEXT_SUFFIXES = {".sh", ".bash", ".zsh", ".env", ".yaml", ".yml", ".toml", ".cfg", ".ini"}
TEXT_NAMES = {"Dockerfile", "Containerfile", ".env"}
_VAR = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")
# NAME=value / NAME: value right after a variable name (a literal value: no $, no spaces)
_VALUE = re.compile(r"""[ \t]*(?:=|:(?=[ \t]))[ \t]*(?P<q>["']?)(?P<value>[^\s"'$`#{}]*)(?P=q)(?=\s|$|;|,|#)""")


def is_text_file(path: PurePath) -> bool:
    name = path.name
    return (path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES or name.startswith(".env")
            or name.endswith(".env"))


def _finding(rule, status: Status, message: str, path: str, line: int, col: int,
             fix: str | None = None) -> Finding:
    return Finding(code=rule.code, status=status, message=message,
                   fix=rule.fix if fix is None else fix, path=path, line=line, col=col)


def rewrite_line(line: str, rules: RuleSet, path: str, lineno: int,
                 findings: list[Finding]) -> str:
    """One line with env names (and the literal values set with them, converted by
    envvalues.convert_env) and text patterns rewritten; findings appended."""
    line = _rename_vars(line, rules, path, lineno, findings)
    for pattern, rule in rules.text:
        new = rule.new

        def text(m: re.Match, rule=rule, new=new) -> str:
            status = Status.FIXED if new is not None else Status.MANUAL
            findings.append(_finding(rule, status, rule.message, path, lineno, m.start() + 1))
            if new is None:
                return m.group(0)
            pre = m.groupdict().get("pre") or ""
            return pre + new

        line = pattern.sub(text, line)
    return line


def _rename_vars(line: str, rules: RuleSet, path: str, lineno: int,
                 findings: list[Finding]) -> str:
    out, pos = [], 0
    for m in _VAR.finditer(line):
        name = m.group(0)
        if m.start() < pos or rules.env_rule(name) is None:
            continue
        # ${NAME:-default} reads the variable: no value is set here
        value = None if line[m.start() - 1:m.start()] == "{" else _VALUE.match(line, m.end())
        literal = value.group("value") if value and value.group("value") else None
        change = convert_env(rules, name, literal, value_known=literal is not None)
        fixed = change.status is Status.FIXED and change.new_name is not None
        findings.append(_finding(change.rule, Status.FIXED if fixed else Status.MANUAL,
                                 change.message, path, lineno, m.start() + 1, change.fix))
        if not fixed:
            continue
        out += [line[pos:m.start()], change.new_name]
        pos = m.end()
        if change.new_value is not None:
            out += [line[pos:value.start("value")], change.new_value]
            pos = value.end("value")
    out.append(line[pos:])
    return "".join(out)


def migrate_text(data: bytes, rules: RuleSet, path: str) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings); bytes are identical when nothing changed. UTF-8 only:
    a UnicodeDecodeError propagates and the engine reports the file as skipped."""
    text = data.decode("utf-8")
    findings: list[Finding] = []
    out = [rewrite_line(ln, rules, path, i, findings)
           for i, ln in enumerate(text.splitlines(keepends=True), 1)]
    new = "".join(out)
    return (data if new == text else new.encode("utf-8")), findings
