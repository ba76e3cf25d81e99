"""`titan-doctor diagnose`: the click command. Parses options, builds the Context, runs
the checks, prints (text or JSON) and picks the exit code. Nothing here imports torch."""

from __future__ import annotations

import sys
from pathlib import Path

import click

import titan_knowledge as knowledge
from titan_doctor.findings import EXIT_USAGE, exit_code, render_checks, summary_line, to_checks_json, use_unicode

HELP = """Check an Ascend (or CUDA/CPU) host for a titan-npu training run, and explain crash logs.

\b
Default checks (fast, ~1-2 s; torch is probed in a subprocess):
  versions.*   Python, torch, torch_npu (import errors explained), the
               torch/torch_npu/CANN/Python matrix, FSDP2
  ascend.*     CANN version and install, set_env.sh sourced, NPU driver
  devices.*    npu-smi, /dev/davinci*, ASCEND_RT_VISIBLE_DEVICES vs --nproc
  dist.*       MASTER_ADDR/PORT, RANK/WORLD_SIZE, HCCL_* ranges, NCCL/CUDA
               leftovers, hccn_tool link health, /dev/shm
Slow / on request:
  --comm       live collective test on --nproc local ranks (hccl/nccl/gloo):
               init, all_reduce correctness, bus bandwidth table
  --log PATH   explain crash logs: files or folders (all ranks, torchrun
               error.json files too); root cause first, with its rank,
               device and fix; error codes decoded (507033, EI0006, ...)
  --checkpoint PATH
               what a checkpoint is (DCP folder or step-N, torch.save full /
               FSDP1 parts, HF safetensors or pytorch_model*.bin, Meta
               consolidated.NN.pth, DeepSpeed) from metadata only. Runs
               only this check.

\b
--config X (a trainer TOML or a shipped config name; --set lines apply) has
one meaning per mode:
  with --checkpoint PATH   the model to compare the checkpoint against:
               missing, unexpected and mis-shaped keys, each naming the
               [model] field that disagrees
                 titan-doctor diagnose --checkpoint ckpt/ --config my.toml
  without --checkpoint     the memory plan: will config X fit, per rank, on
               --world-size ranks of --device (or --device-memory)?
               Breakdown, verdict, and ranked remedies as --set lines;
               --exact also runs the trainer's own step under
               FakeTensorMode. Runs only this check:
                 titan-doctor diagnose --config llama_70b --world-size 64 --device 910B2

\b
Exit codes: 0 all good (warnings allowed), 1 problems found (warnings too
with --strict), 2 usage error.
"""


@click.command(help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--list-checks", is_flag=True, help="List check ids and exit.")
@click.option(
    "--check",
    "check_ids",
    multiple=True,
    metavar="ID",
    help="Run only this check (id or family, e.g. versions); repeatable.",
)
@click.option("--python", "python", metavar="PATH", help="Interpreter to probe (default: this one).")
@click.option(
    "--ascend-root",
    "ascend_roots",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Ascend install root(s) instead of /usr/local/Ascend and ~/Ascend; repeatable.",
)
@click.option("--nproc", type=click.IntRange(1, 4096), help="Ranks per node you plan to run.")
@click.option("--nnodes", type=click.IntRange(1, 100000), default=1, show_default=True, help="Nodes you plan to run.")
@click.option("--comm", is_flag=True, help="Also run the live collective test (--nproc ranks, default 2).")
@click.option(
    "--backend",
    type=click.Choice(["auto", "hccl", "nccl", "gloo"]),
    default="auto",
    show_default=True,
    help="Backend for --comm.",
)
@click.option(
    "--comm-timeout",
    type=click.FloatRange(1, 3600),
    default=60.0,
    show_default=True,
    help="Seconds before a rank of --comm counts as hung.",
)
@click.option(
    "--log",
    "log_files",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Crash log, or a folder of logs / torchrun error.json files, to explain (repeatable); "
    "runs only the explainer.",
)
@click.option(
    "--checkpoint",
    "checkpoint_path",
    type=click.Path(path_type=Path),
    help="Checkpoint file or folder to identify and check; runs only the checkpoint check.",
)
@click.option(
    "--config",
    "config_spec",
    metavar="CONFIG",
    help="Trainer TOML (or a shipped config name). With --checkpoint: the model to check the "
    "checkpoint against. Without: plan its memory (needs --world-size and --device); runs only "
    "that check.",
)
@click.option("--world-size", type=click.IntRange(1, 1_000_000), help="Ranks the job runs on (memory plan).")
@click.option(
    "--device",
    "device_name",
    metavar="NAME",
    help="Card from rules/devices.toml, e.g. 910B2, 910B4, H100 (memory plan).",
)
@click.option(
    "--device-memory", metavar="SIZE", help="Memory per card instead of --device's, e.g. 64GiB (memory plan)."
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override a --config value as `titan-train run --set` does (repeatable).",
)
@click.option(
    "--exact", is_flag=True, help="Memory plan: also run the trainer's build + step under FakeTensorMode (slower)."
)
@click.option(
    "--import-torch/--no-import-torch",
    default=True,
    show_default=True,
    help="Import torch in the probe, which sees a torch that fails to import. "
    "--no-import-torch reads its version files only: faster, blind to import failures.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-v", "--verbose", is_flag=True, help="Show details of passing checks too.")
@click.option("--strict", is_flag=True, help="Warnings also make the exit code 1.")
@click.option("--debug", is_flag=True, help="Let a crashing check raise (traceback).")
def diagnose(
    list_checks,
    check_ids,
    python,
    ascend_roots,
    nproc,
    nnodes,
    comm,
    backend,
    comm_timeout,
    log_files,
    checkpoint_path,
    config_spec,
    world_size,
    device_name,
    device_memory,
    overrides,
    exact,
    import_torch,
    fmt,
    verbose,
    strict,
    debug,
):
    from titan_doctor.diagnose import registry
    from titan_doctor.diagnose.context import Context
    from titan_doctor.diagnose.runner import run_checks

    if list_checks:
        for c in registry.CHECKS:
            tag = (
                " (slow: --comm)"
                if c.slow
                else (
                    " (--log PATH)"
                    if c.logs
                    else (
                        " (--checkpoint PATH [--config CONFIG])"
                        if c.checkpoint
                        else (" (--config CONFIG, no --checkpoint)" if c.memory else "")
                    )
                )
            )
            click.echo(f"{c.id:<20} {c.title}{tag}")
        return
    bad = registry.unknown(list(check_ids))
    if bad:
        raise click.UsageError(f"unknown check id(s): {', '.join(bad)} (see --list-checks)")
    ckpt = checkpoint_path is not None
    checks = registry.select(
        list(check_ids), comm=comm, logs=bool(log_files), memory=bool(config_spec) and not ckpt, ckpt=ckpt
    )
    if any(c.logs for c in checks) and not log_files:
        raise click.UsageError("the log check needs --log PATH")
    if any(c.checkpoint for c in checks) and not ckpt:
        raise click.UsageError("the checkpoint check needs --checkpoint PATH")
    if ckpt:
        plan_only = [
            name
            for name, given in (
                ("--world-size", world_size),
                ("--device", device_name),
                ("--device-memory", device_memory),
                ("--exact", exact),
            )
            if given
        ]
        if plan_only:
            raise click.UsageError(
                f"{', '.join(plan_only)} belong to the memory plan (--config without "
                "--checkpoint); with --checkpoint, --config is the model to compare against"
            )
    elif any(c.memory for c in checks):
        findings = _memory_plan(
            config_spec,
            world_size or (nproc or 0) * nnodes,
            device_name,
            device_memory,
            overrides,
            backend,
            exact,
            python,
            debug,
        )
        _report(findings, fmt, verbose, strict)
    job_config = _checkpoint_config(config_spec, overrides, debug) if ckpt and config_spec else None
    ctx = Context(
        ascend_roots=list(ascend_roots) or None,
        nproc=nproc,
        nnodes=nnodes,
        backend=backend,
        comm_timeout=comm_timeout,
        logs=list(log_files),
        import_torch=import_torch,
        checkpoint=checkpoint_path,
        config=job_config,
        config_name=config_spec or "",
    )
    if python:
        ctx.python = python
    try:
        findings = run_checks(checks, ctx, debug=debug)
    except knowledge.KnowledgeError as e:
        click.echo(f"titan-doctor: {e}", err=True)
        sys.exit(EXIT_USAGE)
    _report(findings, fmt, verbose, strict)


def _report(findings, fmt: str, verbose: bool, strict: bool) -> None:
    if fmt == "json":
        click.echo(to_checks_json(findings, summary=summary_line(findings)))
    else:
        click.echo(render_checks(findings, unicode=use_unicode(), verbose=verbose))
        click.echo("\n" + summary_line(findings))
    sys.exit(exit_code(findings, strict=strict))


def _memory_plan(config_spec, world_size, device_name, device_memory, overrides, backend, exact, python, debug):
    """--config: the memory plan (memory_plan.py); a bad input is a usage error (exit 2)."""
    import sys as _sys

    from titan_doctor.diagnose.memory_plan import MemoryRequest, PlanError, check_memory

    if not config_spec:
        raise click.UsageError("the memory check needs --config CONFIG --world-size N --device NAME")
    if world_size < 1:
        raise click.UsageError("--config needs --world-size N (or --nproc / --nnodes)")
    req = MemoryRequest(
        config=config_spec,
        world_size=world_size,
        overrides=list(overrides),
        device=device_name,
        device_memory=device_memory,
        backend=backend,
        exact=exact,
        python=python or _sys.executable,
    )
    try:
        return check_memory(req)
    except (PlanError, knowledge.KnowledgeError) as e:
        if debug:
            raise
        click.echo(f"titan-doctor: error: {e}", err=True)
        sys.exit(EXIT_USAGE)


def _checkpoint_config(config_spec: str, overrides, debug: bool):
    """--config with --checkpoint: the trainer config to compare against; a bad one is a
    usage error (exit 2), as it is for the memory plan."""
    from titan_train.config.job import ConfigError, load
    from titan_train.config.paths import resolve_config

    try:
        return load(resolve_config(config_spec), list(overrides))
    except ConfigError as e:
        if debug:
            raise
        click.echo(f"titan-doctor: error: {e}", err=True)
        sys.exit(EXIT_USAGE)
