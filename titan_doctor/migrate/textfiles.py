"""Rewrites launch scripts and configs (sh, .env, YAML, TOML, Dockerfile) line by line:
environment variable names and `text` rules (backend = "nccl", nvidia-smi).

These files have no syntax tree we could trust across dialects, so only unambiguous tokens
are touched: a known variable name as a whole word, or a rule's explicit pattern.
"""
from __future__ import annotations

import re
from pathlib import PurePath

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.rules import RuleSet

TEXT_SUFFIXES = {".sh", ".bash", ".zsh", ".env", ".yaml", ".yml", ".toml", ".cfg", ".ini"}
TEXT_NAMES = {"Dockerfile", "Containerfile", ".env"}
_VAR = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")


def is_text_file(path: PurePath) -> bool:
    name = path.name
    return (path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES or name.startswith(".env")
            or name.endswith(".env"))


def _finding(rule: dict, status: Status, message: str, path: str, line: int, col: int) -> Finding:
    return Finding(code=rule["code"], status=status, message=message,
                   fix=rule.get("fix", ""), path=path, line=line, col=col)


def rewrite_line(line: str, rules: RuleSet, path: str, lineno: int,
                 findings: list[Finding]) -> str:
    """One line with env names and text patterns rewritten; findings appended."""
    def env(m: re.Match) -> str:
        name = m.group(0)
        rule = rules.env_rule(name)
        if rule is None:
            return name
        new = rule.get("new")
        msg = rule["message"].format(old=name, new=new or "")
        findings.append(_finding(rule, Status.FIXED if new else Status.MANUAL, msg,
                                 path, lineno, m.start() + 1))
        return new or name

    line = _VAR.sub(env, line)
    for pattern, rule in rules.text:
        new = rule.get("new")

        def text(m: re.Match, rule=rule, new=new) -> str:
            status = Status.FIXED if new is not None else Status.MANUAL
            findings.append(_finding(rule, status, rule["message"], path, lineno, m.start() + 1))
            if new is None:
                return m.group(0)
            pre = m.groupdict().get("pre") or ""
            return pre + new

        line = pattern.sub(text, line)
    return line


def migrate_text(data: bytes, rules: RuleSet, path: str) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings); bytes are identical when nothing changed. UTF-8 only:
    a UnicodeDecodeError propagates and the engine reports the file as skipped."""
    text = data.decode("utf-8")
    findings: list[Finding] = []
    out = [rewrite_line(ln, rules, path, i, findings)
           for i, ln in enumerate(text.splitlines(keepends=True), 1)]
    new = "".join(out)
    return (data if new == text else new.encode("utf-8")), findings
