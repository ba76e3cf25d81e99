"""Rewrites launch scripts and configs (sh, Slurm, .env, YAML, TOML, JSON, Dockerfile,
pip requirements files) line by line, by the line pieces of the rule kinds (in registry
order: env names and values, then text rules: backend = "nccl", --device cuda,
#SBATCH --gpus-per-node, nvidia-smi).

These files have no syntax tree we could trust across dialects, so only unambiguous tokens
are touched: a known variable name as a whole word, or a rule's explicit pattern. Formats
that have a standard parser (JSON, TOML) are parsed again after the rewrite
(formats.reparse_error, asked by the engine).

Comments are never rewritten nor reported: in every format but JSON a `#` at the start of
a line or after a blank, outside quotes, starts one (`# export NCCL_DEBUG=INFO` is a note,
not a setting). `#SBATCH` lines are Slurm directives, not comments (`##SBATCH` is one).
"""

from __future__ import annotations

from titan_doctor.findings import Finding
from titan_doctor.migrate.context import LineContext
from titan_doctor.migrate.rules.registry import LINE_PIECES
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import visible_devices_set
from titan_doctor.migrate.suppress import codes_on
from titan_doctor.migrate.text.formats import CI_REASON, is_ci_config

SLURM_DIRECTIVE = "#SBATCH"


def rewrite_line(
    line: str,
    rules: RuleSet,
    path: str,
    lineno: int,
    findings: list[Finding],
    suppressed: list[Finding] | None = None,
    visible: frozenset[str] = frozenset(),
) -> str:
    """One line with env names (and their values) and text patterns rewritten; findings
    appended. What the line's `# titan-doctor: ignore[CODE]` comment names is left as it
    is and goes to `suppressed` (when given) instead. `visible`: see LineContext."""
    ctx = LineContext(
        path,
        lineno,
        findings,
        codes_on(line),
        suppressed,
        CI_REASON if is_ci_config(path) else "",
        visible,
        rules.report_only,
    )
    cut = None if path.endswith(".json") else comment_start(line)
    code, comment = (line, "") if cut is None else (line[:cut], line[cut:])
    if not code.strip():
        return line
    for piece in LINE_PIECES:
        code = piece(code, rules, ctx)
    return code + comment


def comment_start(line: str) -> int | None:
    """Where the `#` comment of a script or config line starts, or None (see the module
    docstring). Quotes are followed, so `"a # b"` holds no comment."""
    stripped = line.lstrip()
    if stripped.startswith(SLURM_DIRECTIVE):
        return None
    quote = None
    for i, ch in enumerate(line):
        if quote is not None:
            if ch == quote and (quote == "'" or line[i - 1] != "\\"):
                quote = None
        elif ch in "'\"" and (i == 0 or line[i - 1] != "\\"):
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return None


def migrate_text(
    data: bytes, rules: RuleSet, path: str, suppressed: list[Finding] | None = None
) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings); bytes are identical when nothing changed. UTF-8 only:
    a UnicodeDecodeError propagates and the engine reports where the file stops decoding.
    Findings silenced by `# titan-doctor: ignore` go to `suppressed` when it is given."""
    text = data.decode("utf-8")
    findings: list[Finding] = []
    visible = visible_devices_set(text)
    out = [
        rewrite_line(ln, rules, path, i, findings, suppressed, visible)
        for i, ln in enumerate(text.splitlines(keepends=True), 1)
    ]
    new = "".join(out)
    return (data if new == text else new.encode("utf-8")), findings
