"""Notes for a program that refused its own command line (argparse and the parsers built on it:
HfArgumentParser, ms-swift, Megatron / MindSpeed): which options it did not take, and what that
usually means on a port to Ascend, where recipes mix the flags of MindSpeed, Megatron and the
framework that wraps them. Parsers of the `cli.*` signatures in rules/log_signatures.toml."""

from __future__ import annotations

import ast
import re
from typing import Any

# MindSpeed's own switches (MindSpeed's arguments.py): its fused Ascend kernels and MC2; plain
# Megatron-LM defines none of them (it does define --use-flash-attn)
_MINDSPEED = re.compile(r"--use[-_](?:fused[-_]|mc2|ascend[-_]|npu[-_])|--npu[-_]")


def _options(text: str) -> list[str]:
    """The options of argparse's space-separated list or of a Python list repr."""
    text = text.strip().rstrip(".")
    if text.startswith("["):
        try:
            items = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            items = re.findall(r"'([^']*)'", text)
        return [str(x) for x in items]
    return text.split()


def unknown_args(groups: dict[str, str], line: str) -> dict[str, Any]:
    """The options not taken, flags first (their values follow them on argparse's line)."""
    raw = groups.get("args") or groups.get("args2") or groups.get("args3") or ""
    opts = _options(raw)
    flags = [o for o in opts if o.startswith("-")] or opts
    shown = ", ".join(flags[:8]) + (f" and {len(flags) - 8} more" if len(flags) > 8 else "")
    mindspeed = [f for f in flags if _MINDSPEED.match(f)]
    return {
        "options": shown or "some options",
        "mindspeed_note": (
            f" {', '.join(mindspeed[:4])} {'are MindSpeed switches' if len(mindspeed) > 1 else 'is a MindSpeed switch'} "
            "(Ascend fused kernels, MC2), which plain Megatron and the frameworks that wrap it do not define."
            if mindspeed
            else ""
        ),
        "mindspeed_fix": (
            "; MindSpeed's switches take effect only where MindSpeed itself patches Megatron (import "
            "mindspeed.megatron_adaptor before Megatron parses its arguments, or a framework release whose NPU "
            "integration passes them on)"
            if mindspeed
            else ""
        ),
    }
