"""The real crash-log corpus (tests/diagnose/real_logs) and how an explanation of one
log is judged. Shared by the test and by benchmarks/log_corpus.py, which scores any
checkout of the doctor (main vs this branch) through its CLI's JSON."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).resolve().parent / "real_logs"


def cases() -> list[dict[str, Any]]:
    with open(CORPUS / "expected.toml", "rb") as fh:
        return tomllib.load(fh)["log"]


def judge(case: dict[str, Any], rows: list[dict[str, Any]], *, exact_id: bool = True) -> list[str]:
    """Why the explanation `rows` (doctor JSON check rows, root cause first) misses the
    case; empty when it explains the log fully: cause, fix, rank and device.
    exact_id=False judges the root by its text only (for older builds with other ids)."""
    if not rows:
        return ["no finding"]
    root = rows[0]
    text = " ".join(str(root.get(k, "")) for k in ("id", "title", "detail")).lower()
    problems = []
    if exact_id and root.get("id") != "log." + case["root"]:
        problems.append(f"root is {root.get('id')}, expected log.{case['root']}")
    if case["cause_has"].lower() not in text:
        problems.append(f"root cause does not say {case['cause_has']!r}")
    if case["fix_has"] not in (root.get("fix") or ""):
        problems.append(f"fix lacks {case['fix_has']!r}")
    data = root.get("data") or {}
    for key in ("rank", "device"):
        if key in case and data.get(key) != case[key]:
            problems.append(f"{key} {data.get(key)!r}, expected {case[key]}")
    everything = " ".join(" ".join(str(r.get(k, "")) for k in ("id", "title", "detail")) for r in rows)
    problems += [f"never mentions {c}" for c in case.get("also_has", []) if c not in everything]
    problems += [f"wrongly mentions {c}" for c in case.get("never_has", []) if c in everything]
    return problems


def wrong_causes_named(case: dict[str, Any], root: dict[str, Any]) -> list[str]:
    """The case's `wrong_if` phrases that the root finding itself claims: matched as whole words in
    its id, title and detail, leaving out the log lines it quotes as evidence ('> ...' lines) and
    file locations, which repeat the log's words and claim nothing (a quoted 'NCCL version 2.4.8'
    or a path under npu/ is not the tool naming a wrong cause)."""
    claim = " ".join(
        line
        for key in ("id", "title", "detail")
        for line in str(root.get(key, "")).splitlines()
        if not line.lstrip().startswith(">")
    )
    claim = re.sub(r"\S+\.(?:log|py|txt|out|err)(?::\d+)?", " ", claim)  # file:line locations
    return [w for w in case.get("wrong_if", []) if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", claim, re.I)]
