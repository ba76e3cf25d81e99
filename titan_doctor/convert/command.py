"""`titan-doctor convert SRC DST --to dcp|torch|hf|meta`: the click command. Nothing here
imports torch until a conversion starts."""

from __future__ import annotations

import json
import re
import sys
import traceback
from pathlib import Path

import click

from titan_doctor.findings import EXIT_FINDINGS, EXIT_OK
from titan_train.config.precision import PRECISIONS

HELP = """Convert a checkpoint between DCP, torch.save, HuggingFace safetensors and Meta formats.

\b
SRC is anything `titan-doctor diagnose --checkpoint` identifies: a DCP folder
(or the trainer's checkpoint folder: its newest step-N), a torch.save file
(full state dict, FSDP1 SHARDED parts, DeepSpeed ZeRO<=2), HF safetensors
or pytorch_model*.bin (file or folder with index), Meta consolidated.NN.pth
+ params.json. DST may not be SRC or a folder holding it.

\b
  --to torch   DCP -> one torch.save file with every entry (weights,
               optimizer, progress), as torch's format_utils does; from
               other sources, or with --model-only, the model's weights
               under the trainer's names (wrapper prefixes removed)
  --to dcp     torch.save -> DCP, every entry (a bare model state dict goes
               under model.*); from other sources the weights, as model.*
  --to hf      model.safetensors (sharded with an index beyond
               --max-shard-size) + config.json; names mapped and q/k rows
               permuted for HF's rotary layout (GQA-aware)
  --to meta    consolidated.00.pth + params.json

\b
Reads nothing it would have to execute: pickles with weights_only=True (or
inertly), DCP metadata through an allow-list, safetensors headers as JSON.
Writes atomically (a hidden temporary next to DST, renamed when complete) and
holds at most one full copy of the weights in memory (HF output: about two
shards, as safetensors serializes a shard in memory).

\b
Exit codes: 0 converted, 1 conversion failed (missing or unreadable source,
unsafe pickle, config mismatch, DST exists without --force, DST cannot be
written: no space left, a parent that is a file), 2 usage error. Nothing
partial is left behind, and a DST that --force was replacing is kept.
"""


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*", text, re.I)
    if not m:
        raise click.BadParameter(f"{text!r}: expected a size like 5GB, 500MB, 2GiB")
    unit = m.group(2).upper().rstrip("B")
    factor = {
        "": 1,
        "K": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "KI": 2**10,
        "MI": 2**20,
        "GI": 2**30,
        "TI": 2**40,
    }[unit]
    return int(float(m.group(1)) * factor)


@click.command(help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--to", "target", required=True, type=click.Choice(["dcp", "torch", "hf", "meta"]), help="Output format.")
@click.option(
    "--config",
    "config_file",
    metavar="CONFIG",
    help="Trainer TOML (or a shipped config name): its [model] gives the shape (head counts for HF/Meta "
    "output); the source is checked against it.",
)
@click.option("--dtype", type=click.Choice(list(PRECISIONS)), help="Cast floating-point tensors on the way.")
@click.option("--model-only", is_flag=True, help="Only the model's weights (trainer names), even for DCP <-> torch.")
@click.option("--max-shard-size", "max_shard", default="5GB", show_default=True, help="HF output: bytes per shard.")
@click.option("--force", is_flag=True, help="Replace DST if it exists.")
@click.option(
    "--progress/--no-progress", default=None, help="Progress lines on stderr (default: for sources >= 64 MiB)."
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--debug", is_flag=True, help="Show a traceback on failure.")
def convert(src, dst, target, config_file, dtype, model_only, max_shard, force, progress, fmt, debug):
    from titan_doctor.convert.run import convert as run_convert
    from titan_train.checkpoint.formats import CheckpointError
    from titan_train.runtime.write_errors import WriteError

    max_shard_bytes = _size(max_shard)
    if config_file is not None:
        _check_config(config_file)
    if not src.exists():
        _fail(f"{src}: no such file or folder", "check the path (nothing was written)", fmt)
    try:
        result = run_convert(
            src,
            dst,
            target,
            config=config_file,
            dtype=dtype,
            model_only=model_only,
            max_shard_bytes=max_shard_bytes,
            overwrite=force,
            progress=progress,
        )
    except (CheckpointError, WriteError) as e:  # a WriteError (full disk, a parent that is a file) is its own fix
        if debug:
            traceback.print_exc()
        _fail(str(e), getattr(e, "fix", ""), fmt)
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "ok": True,
                    "src": str(result.src),
                    "dst": str(result.dst),
                    "source_format": result.source_format,
                    "to": result.target,
                    "whole": result.whole,
                    "tensors": result.tensors,
                    "bytes": result.bytes,
                    "notes": result.notes,
                },
                indent=2,
            )
        )
    else:
        click.echo(result.line())
        for note in result.notes:
            click.echo(f"  note: {note}")
    sys.exit(EXIT_OK)


def _check_config(spec: str) -> None:
    """A --config that cannot be read is a usage error (exit 2), as in `diagnose --config`."""
    from titan_train.config.job import ConfigError, load
    from titan_train.config.paths import resolve_config

    try:
        load(resolve_config(spec))
    except ConfigError as e:
        raise click.UsageError(f"--config: {e}") from None


def _fail(message: str, fix: str, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps({"ok": False, "error": message, "fix": fix}, indent=2))
    else:
        click.echo(f"titan-doctor convert: error: {message}", err=True)
        if fix:
            click.echo(f"  fix: {fix}", err=True)
    sys.exit(EXIT_FINDINGS)
