"""Run selected checks: the torch probe starts first, checks that need it run last,
results come back in display order. A check that raises becomes a finding, never a
traceback (unless --debug); broken knowledge files are a tool error (exit 2) instead."""

from __future__ import annotations

from titan_doctor.diagnose.context import Context
from titan_doctor.diagnose.registry import Check
from titan_doctor.findings import Finding, Status
from titan_knowledge import KnowledgeError


def run_checks(checks: list[Check], ctx: Context, *, debug: bool = False) -> list[Finding]:
    if any(c.needs_probe for c in checks):
        ctx.start_probe()
    order = sorted(range(len(checks)), key=lambda i: (checks[i].needs_probe, checks[i].slow))
    results: dict[int, list[Finding]] = {}
    for i in order:
        results[i] = _one(checks[i], ctx, debug)
    return [f for i in range(len(checks)) for f in results[i]]


def _one(check: Check, ctx: Context, debug: bool) -> list[Finding]:
    try:
        if check.needs_probe and "probe_error" in ctx.probe:
            return [
                Finding(
                    check.id,
                    Status.FAIL,
                    f"{check.title}: probe failed: {ctx.probe['probe_error'][-300:]}",
                    fix=f"Run {ctx.python} -c 'import torch' to see the error",
                )
            ]
        return check.run(ctx)
    except KnowledgeError:
        raise  # our data is broken, not the host: the command reports it and exits 2
    except Exception as e:  # noqa: BLE001 - one broken check must not hide the others
        if debug:
            raise
        return [
            Finding(
                check.id,
                Status.FAIL,
                f"check crashed: {type(e).__name__}: {e}",
                fix="Re-run with --debug and report it",
            )
        ]
