"""One finding type for migrate and diagnose, and the one place that renders them.

Checks and rules only build `Finding`s; printing, JSON/SARIF and exit codes are decided
here so both subcommands look and behave alike.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """What a finding says. Diagnose uses ok/info/warn/fail; migrate uses fixed/manual."""

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"
    FIXED = "fixed"
    MANUAL = "manual"
    SKIP = "skip"


# Statuses that mean "something is left for a person to do".
PROBLEMS = {Status.FAIL, Status.MANUAL}
WARNINGS = {Status.WARN}

# Exit codes shared by both subcommands (documented in their --help).
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2

_MARKS_UNICODE = {
    Status.OK: "✓",
    Status.INFO: "•",
    Status.WARN: "!",
    Status.FAIL: "✗",
    Status.FIXED: "✓",
    Status.MANUAL: "!",
    Status.SKIP: "-",
}
_MARKS_ASCII = {
    Status.OK: "[ok]",
    Status.INFO: "[i]",
    Status.WARN: "[!]",
    Status.FAIL: "[x]",
    Status.FIXED: "[ok]",
    Status.MANUAL: "[!]",
    Status.SKIP: "[-]",
}


@dataclass(frozen=True)
class Finding:
    """A single result: a check's verdict or a codemod's change/report.

    code:    stable id ("NPU101" for a rule, "versions.torch_npu" for a check)
    status:  see Status
    message: one line saying what is wrong (or what was done)
    detail:  optional longer explanation (why)
    fix:     the exact command / setting / code that fixes it ("" when nothing to do)
    path, line, col: where, for findings tied to a file (1-based line and column)
    data:    machine-readable extras (versions found, figures parsed, ...)
    """

    code: str
    status: Status
    message: str
    detail: str = ""
    fix: str = ""
    path: str | None = None
    line: int | None = None
    col: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def location(self) -> str:
        if self.path is None:
            return ""
        parts = [self.path]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def exit_code(findings: Iterable[Finding], *, strict: bool = False) -> int:
    """0 when nothing is left to do, 1 when problems remain (warnings too with strict)."""
    bad = PROBLEMS | (WARNINGS if strict else set())
    return EXIT_FINDINGS if any(f.status in bad for f in findings) else EXIT_OK


def use_unicode(stream=None) -> bool:
    """Status marks as ✓/!/✗ on a terminal that can encode them, ASCII otherwise."""
    stream = stream or sys.stdout
    if not getattr(stream, "isatty", lambda: False)():
        return False
    try:
        "✓✗•".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def mark(status: Status, unicode: bool) -> str:
    return (_MARKS_UNICODE if unicode else _MARKS_ASCII)[status]


def render_lines(findings: Sequence[Finding]) -> str:
    """Editor-clickable lines: `path:line:col CODE [status] message`."""
    out = []
    for f in findings:
        loc = f.location or "-"
        out.append(f"{loc} {f.code} [{f.status.value}] {f.message}")
    return "\n".join(out)


def count_table(findings: Sequence[Finding]) -> str:
    """Findings per code and status as a table (the closing summary of a run)."""
    from tabulate import tabulate  # only the summaries need it

    statuses = [s for s in Status if any(f.status is s for f in findings)]
    counts: dict[str, dict[Status, int]] = {}
    for f in findings:
        counts.setdefault(f.code, {}).setdefault(f.status, 0)
        counts[f.code][f.status] += 1
    rows = [
        [code] + [counts[code].get(s, 0) for s in statuses] + [sum(counts[code].values())] for code in sorted(counts)
    ]
    return tabulate(rows, headers=["code"] + [s.value for s in statuses] + ["total"])


def render_checks(findings: Sequence[Finding], *, unicode: bool, verbose: bool = False) -> str:
    """Doctor style: one line per check with a mark, indented detail and fix."""
    out = []
    for f in findings:
        out.append(f"{mark(f.status, unicode)} {f.message}")
        if f.detail and (verbose or f.status not in (Status.OK, Status.SKIP)):
            out.extend("    " + ln for ln in f.detail.splitlines())
        if f.fix and f.status not in (Status.OK,):
            fix_lines = f.fix.splitlines()
            out.append("    fix: " + fix_lines[0])
            out.extend("         " + ln for ln in fix_lines[1:])
    return "\n".join(out)


def to_json(findings: Sequence[Finding], key: str = "findings", **extra: Any) -> str:
    payload = {key: [f.to_dict() for f in findings], **extra}
    return json.dumps(payload, indent=2, sort_keys=False, default=str)


_SARIF_LEVEL = {
    Status.FAIL: "error",
    Status.MANUAL: "warning",
    Status.WARN: "warning",
    Status.FIXED: "note",
    Status.INFO: "note",
    Status.OK: "none",
    Status.SKIP: "none",
}


def to_sarif(findings: Sequence[Finding], *, tool: str, version: str, rule_help: dict[str, str] | None = None) -> str:
    """SARIF 2.1.0, for code-scanning UIs."""
    rule_help = rule_help or {}
    codes = sorted({f.code for f in findings})
    rules = [{"id": c, "shortDescription": {"text": rule_help.get(c, c)}} for c in codes]
    results = []
    for f in findings:
        r: dict[str, Any] = {
            "ruleId": f.code,
            "level": _SARIF_LEVEL[f.status],
            "message": {"text": f.message + (f" Fix: {f.fix}" if f.fix else "")},
            "properties": {"status": f.status.value},
        }
        if f.path:
            region: dict[str, int] = {}
            if f.line is not None:
                region["startLine"] = f.line
            if f.col is not None:
                region["startColumn"] = f.col
            phys: dict[str, Any] = {"artifactLocation": {"uri": f.path}}
            if region:
                phys["region"] = region
            r["locations"] = [{"physicalLocation": phys}]
        results.append(r)
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": tool, "version": version, "rules": rules}},
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2)


def summary_line(findings: Sequence[Finding]) -> str:
    """One closing line for doctor output: '12 checks: 9 ok, 2 warnings, 1 problem'."""
    counts = {s: 0 for s in Status}
    for f in findings:
        counts[f.status] += 1
    problems = sum(counts[s] for s in PROBLEMS)
    parts = [f"{counts[Status.OK]} ok"]
    if counts[Status.INFO]:
        parts.append(f"{counts[Status.INFO]} info")
    parts.append(f"{counts[Status.WARN]} warning{'s' if counts[Status.WARN] != 1 else ''}")
    parts.append(f"{problems} problem{'s' if problems != 1 else ''}")
    if counts[Status.SKIP]:
        parts.append(f"{counts[Status.SKIP]} skipped")
    return f"{len(findings)} check{'s' if len(findings) != 1 else ''}: " + ", ".join(parts)


def to_checks_json(findings: Sequence[Finding], **extra: Any) -> str:
    """Doctor JSON: `{checks: [{id, status, title, detail, fix, data}]}` (+ location when set)."""
    rows = []
    for f in findings:
        row: dict[str, Any] = {
            "id": f.code,
            "status": f.status.value,
            "title": f.message,
            "detail": f.detail,
            "fix": f.fix,
            "data": f.data,
        }
        if f.path is not None:
            row["location"] = f.location
        rows.append(row)
    return json.dumps({"checks": rows, **extra}, indent=2, default=str)
