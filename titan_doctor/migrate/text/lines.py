"""Rewrites launch scripts and configs (sh, Slurm, .env, YAML, TOML, JSON, Dockerfile,
pip requirements files) line by line, by the line pieces of the rule kinds (in registry
order: env names and values, then text rules: backend = "nccl", --device cuda,
#SBATCH --gpus-per-node, nvidia-smi).

These files have no syntax tree we could trust across dialects, so only unambiguous tokens
are touched: a known variable name as a whole word, or a rule's explicit pattern. Formats
that have a standard parser (JSON, TOML) are parsed again after the rewrite
(formats.reparse_error, asked by the engine).
"""

from __future__ import annotations

from titan_doctor.findings import Finding
from titan_doctor.migrate.context import LineContext
from titan_doctor.migrate.rules.registry import LINE_PIECES
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.suppress import codes_on


def rewrite_line(
    line: str, rules: RuleSet, path: str, lineno: int, findings: list[Finding], suppressed: list[Finding] | None = None
) -> str:
    """One line with env names (and their values) and text patterns rewritten; findings
    appended. What the line's `# titan-doctor: ignore[CODE]` comment names is left as it
    is and goes to `suppressed` (when given) instead."""
    ctx = LineContext(path, lineno, findings, codes_on(line), suppressed)
    for piece in LINE_PIECES:
        line = piece(line, rules, ctx)
    return line


def migrate_text(
    data: bytes, rules: RuleSet, path: str, suppressed: list[Finding] | None = None
) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings); bytes are identical when nothing changed. UTF-8 only:
    a UnicodeDecodeError propagates and the engine reports where the file stops decoding.
    Findings silenced by `# titan-doctor: ignore` go to `suppressed` when it is given."""
    text = data.decode("utf-8")
    findings: list[Finding] = []
    out = [
        rewrite_line(ln, rules, path, i, findings, suppressed) for i, ln in enumerate(text.splitlines(keepends=True), 1)
    ]
    new = "".join(out)
    return (data if new == text else new.encode("utf-8")), findings
