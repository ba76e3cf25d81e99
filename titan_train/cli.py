"""`titan-train`: the reference LLaMA trainer (FSDP2 + tensor + pipeline parallel) on npu / cuda / cpu."""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import click

from titan_train import __version__
from titan_train.config import job as config_mod
from titan_train.config.paths import resolve_config
from titan_train.runtime import error_file, write_errors
from titan_train.runtime.device import disable_backend_autoload
from titan_train.runtime.finite_guard import EXIT_NON_FINITE, NonFinite
from titan_train.runtime.signals import EXIT_SIGINT, EXIT_SIGTERM, Stopped, Terminated, raise_on_sigterm

EXIT_USAGE = 2


class _UserError(Exception):
    """A setup mistake found by the CLI itself (not by config/device/data)."""


def _fail(message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    click.echo(f"titan-train: error: {message}", err=True)
    error_file.note(f"titan-train: error: {message}")  # under torchrun: its summary shows this line
    sys.exit(EXIT_USAGE)


FSDP2_SINCE = (2, 6)  # the first torch that exports torch.distributed.fsdp.fully_shard


def _no_fsdp2(version: str) -> _UserError:
    return _UserError(
        f"torch {version} has no FSDP2 (torch.distributed.fsdp.fully_shard); "
        "install torch >= 2.6 with its matching torch_npu"
    )


def _release(version: str) -> tuple[int, ...]:
    """(2, 13) of '2.13.0+cpu' or '2.6.0a0+git1234': the leading numeric release."""
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _require_fsdp2(importing: bool) -> None:
    """A rank imports FSDP2 to be sure (it needs it next anyway). The launcher reads the
    installed version instead: importing torch.distributed.fsdp costs it seconds of CPU
    before any rank can start, on every launch."""
    if not importing:
        try:
            installed = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            installed = ""  # a torch built in place: import it to find out
        release = _release(installed)
        if len(release) == 2:
            if release < FSDP2_SINCE:
                raise _no_fsdp2(installed)
            return
    import torch

    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        raise _no_fsdp2(torch.__version__) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="titan-train")
def main():
    """Train LLaMA the PyTorch FSDP way on Ascend NPU (hccl), NVIDIA (nccl) or CPU (gloo).

    \b
    Exit codes: 0 done, 1 a rank failed while training, 2 bad config or setup (including a
    job whose memory estimate is clearly over what a rank has: --ignore-memory, a checkpoint
    folder owned by another run, a checkpoint of another model shape, ranks or nodes started
    with different configs, data or --nproc / --nnodes, no space left on the disk a checkpoint
    or export goes to: the partial save is removed and the previous checkpoint kept), 3 the loss or
    gradient norm went NaN / inf (nothing saved after that step),
    124 a step hung (stack dumps in <run folder>/hang), 143 / 130 stopped by
    SIGTERM / SIGINT after saving a checkpoint (run the same command to resume).
    """


@main.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--config",
    "config_spec",
    default="llama_debug",
    show_default=True,
    help="Trainer TOML file, or the name of a shipped config (llama_debug, llama_7b, llama_13b, llama_70b, "
    "llama_70b_long). A torchtitan v0.2 llama3 TOML (train_configs/*.toml) is converted; what it "
    "cannot use is listed at start.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Override a config value, e.g. --set training.steps=20 (repeatable; values are TOML).",
)
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Ranks to start on this node (torchrun's --nproc-per-node).",
)
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes in the job.")
@click.option(
    "--node-rank",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="This node's rank (with --master-addr).",
)
@click.option("--master-addr", default="", help="Address of node 0 (static multi-node rendezvous).")
@click.option("--master-port", type=click.IntRange(0, 65535), default=0, help="Port on node 0 (default 29500).")
@click.option(
    "--rdzv-endpoint",
    default="",
    help="HOST:PORT of torch's c10d rendezvous (torchrun's), which agrees on the node ranks; the node "
    "count is fixed by --nnodes (no elastic min:max).",
)
@click.option("--rdzv-id", default="titan-train", show_default=True, help="Rendezvous id shared by all nodes.")
@click.option(
    "--rdzv-timeout",
    type=click.FloatRange(min=1),
    default=600,
    show_default=True,
    metavar="SECONDS",
    help="Multi-node: how long each node waits for the others before it gives up with one line (nodes "
    "started with another --nproc / --nnodes are refused at once).",
)
@click.option(
    "--stop-after",
    type=click.IntRange(min=0),
    default=0,
    help="Stop after this many steps in this run and save a checkpoint there (even with "
    "checkpoint.save_interval = 0); the next run resumes from it.",
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="After a rank fails, stop every rank of this node and start them all again, resuming from the "
    "newest complete checkpoint, up to N times (torchrun's --max-restarts). Never restarted: a refusal "
    "(exit 2), a NaN / inf stop (3), SIGTERM / Ctrl-C (143 / 130). One node only.",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start a new run in a checkpoint folder that holds checkpoints: move every step-N into "
    "<folder>/previous-<time>/ (nothing is deleted) instead of resuming or refusing.",
)
@click.option(
    "--ignore-memory",
    is_flag=True,
    help="Start even when the memory estimate says the job does not fit (see `titan-doctor diagnose --config`).",
)
@click.option(
    "--print-config", is_flag=True, help="Print the resolved config (defaults and overrides applied) as JSON and exit."
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.argument("torchtitan_args", nargs=-1, type=click.UNPROCESSED, metavar="[--SECTION.KEY=VALUE]...")
def run(
    config_spec,
    overrides,
    nproc,
    nnodes,
    node_rank,
    master_addr,
    master_port,
    rdzv_endpoint,
    rdzv_id,
    rdzv_timeout,
    stop_after,
    max_restarts,
    fresh,
    ignore_memory,
    print_config,
    debug,
    torchtitan_args,
):
    """Train with the given config. Starts the ranks itself, and also runs unchanged as the
    script of a `torchrun` you start yourself:

    \b
      titan-train run --config configs/llama_debug.toml --nproc 2
      torchrun --nproc-per-node 8 -m titan_train.cli run --config llama_7b

    `training.batch_size` is the GLOBAL batch (sequences per optimizer step); each
    data-parallel rank reads batch_size / (dp x grad_accum_steps) sequences per micro-step.
    Checkpoints go to checkpoint.folder (default outputs/<config>/checkpoints/step-N) and a
    run resumes from the newest complete one. Metrics: outputs/<config>/metrics.jsonl.

    A run owns its checkpoint folder (run.lock: host, pid, start): a second run on the same
    folder is refused. A resumed run compares the checkpoint's recorded config with its own:
    a model-shape change is refused, optimizer/schedule changes take the config's values,
    data-layout changes are announced. NaN / inf stops the run (exit 3), saving nothing after.

    torchtitan's spellings work too: `--training.steps=3` (or `--training.steps 3`) is
    `--set training.steps=3`, `--job.config_file PATH` is `--config PATH`; with a torchtitan
    TOML, `--set` and these flags take torchtitan's own keys (training.local_batch_size ...).
    """
    disable_backend_autoload()
    from titan_train.runtime import launch

    if launch.under_torchrun():
        raise_on_sigterm()  # a rank: SIGTERM in start-up exits 143 with one line (signals.Terminated)

    config_spec, overrides = _torchtitan_spellings(config_spec, overrides, torchtitan_args, debug)

    path = resolve_config(config_spec)
    # the launcher notes Ctrl-C / SIGTERM during start-up (never raised mid-import); ranks keep Python's
    # default for Ctrl-C and raise Terminated for SIGTERM
    early = contextlib.nullcontext() if launch.under_torchrun() else launch.StopSignals()
    try:
        with early:
            world = int(os.environ["WORLD_SIZE"]) if launch.under_torchrun() else nproc * nnodes
            cfg = _load_config(path, list(overrides), world, announce=launch.announces() and not print_config)
            if print_config:
                click.echo(json.dumps(config_mod.to_dict(cfg), indent=2))
                return
            _require_fsdp2(importing=launch.under_torchrun())
            if not launch.under_torchrun():
                opts = launch.LaunchOptions(
                    nproc=nproc,
                    nnodes=nnodes,
                    node_rank=node_rank,
                    rdzv_id=rdzv_id,
                    rdzv_timeout_s=rdzv_timeout,
                    rdzv_endpoint=rdzv_endpoint,
                    master_addr=master_addr,
                    master_port=master_port,
                )
                _preflight(cfg, opts, ignore_memory, path)
                _check_restarts(max_restarts, opts, stop_after)
                early.check()
                if opts.world_size > 1 or max_restarts:  # a restart needs the launcher, even for one rank
                    with _owning_folder(cfg, opts, fresh, stop_after):
                        sys.exit(
                            launch.spawn(
                                opts,
                                _worker_argv(path, overrides, stop_after, debug),
                                config_mod.run_dir(cfg),
                                stop_signals=early,
                                max_restarts=max_restarts,
                                resumes_from=lambda: _resume_point(cfg),
                            )
                        )
                launch.single_process_env()
        if isinstance(early, launch.StopSignals):
            early.check()  # one process: the loop's own handlers take over from here
        from titan_train.train import train

        train(cfg, stop_after, fresh)
    except KeyboardInterrupt:  # Ctrl-C before the loop could stop gracefully; first, so that no
        if debug:  # except clause below imports torch after a half-done import of it
            traceback.print_exc()
        click.echo("titan-train: interrupted (Ctrl-C); nothing was saved after the last checkpoint", err=True)
        error_file.note("titan-train: interrupted (Ctrl-C); nothing was saved after the last checkpoint")
        sys.exit(EXIT_SIGINT)
    except Terminated as e:  # SIGTERM before (or after) the loop's graceful stop: nothing half-saved
        if os.environ.get("RANK", "0") == "0" or os.environ.get("TITAN_TRAIN_LAUNCHED"):  # each rank log says why
            click.echo(f"titan-train: {e}", err=True)
        error_file.note(f"titan-train: {e}")
        sys.exit(e.exit_code)
    except launch.Interrupted as e:
        click.echo(f"titan-train: {e}", err=True)
        sys.exit(e.exit_code)
    except _user_errors() as e:
        _fail(_user_message(e), debug)
    except NonFinite as e:  # diverged: every rank stopped at the same check; nothing saved after it
        if os.environ.get("RANK", "0") == "0" or os.environ.get("TITAN_TRAIN_LAUNCHED"):  # each rank log says why
            click.echo(f"titan-train: error: {e}", err=True)
        error_file.note(f"titan-train: error: {e}")
        sys.exit(EXIT_NON_FINITE)
    except Stopped as e:  # preempted: the checkpoint is saved; say so once, no traceback
        if os.environ.get("RANK", "0") == "0":
            click.echo(f"titan-train: {e}", err=True)
        error_file.note(f"titan-train: {e}")  # torchrun reports exit 143 as a failure: this says it was a stop
        sys.exit(e.exit_code)
    except (OSError, RuntimeError) as e:  # last: a full disk met outside the checkpoint writers (metrics, logs)
        _fail_if_unwritable(e, None, debug)
        raise


def _torchtitan_spellings(config_spec: str, overrides, args, debug: bool) -> tuple[str, tuple[str, ...]]:
    """torchtitan's `--section.key=value` flags as --set, `--job.config_file` as --config."""
    from titan_train.config import torchtitan_args

    try:
        got = torchtitan_args.translate(args)
    except config_mod.ConfigError as e:
        _fail(str(e), debug)
    if got.config is not None:
        source = click.get_current_context().get_parameter_source("config_spec")
        if source == click.core.ParameterSource.COMMANDLINE and got.config != config_spec:
            _fail(f"--config {config_spec} and --job.config_file {got.config} name two configs; give one", debug)
        config_spec = got.config
    return config_spec, (*overrides, *got.overrides)


def _load_config(path: Path, overrides: list[str], world_size: int, announce: bool):
    """A trainer TOML, or a torchtitan one (converted, with what it ignores printed once)."""
    from titan_train.config import torchtitan as torchtitan_config

    cfg, conversion = torchtitan_config.load_either(path, overrides, world_size)
    if announce and conversion is not None:
        click.echo(conversion.block(path))
    return cfg


@main.command("prepare-data")
@click.argument("sources", nargs=-1, required=True, metavar="SRC...")
@click.option(
    "--tokenizer",
    required=True,
    metavar="T",
    help='A HuggingFace tokenizer.json (or a folder holding one), or "byte"; the trainer\'s '
    "data.tokenizer must be the same tokenizer (its sha256 is checked).",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Folder to create; set data.dataset = DIR to train on it.",
)
@click.option("--text-field", default="text", show_default=True, help="JSONL field / parquet column with the text.")
@click.option(
    "--workers", type=click.IntRange(min=0), default=0, help="Tokenizing processes (0 = one per available core)."
)
@click.option(
    "--shard-tokens",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Token ids per shard file (default 134,217,728).",
)
@click.option("--force", is_flag=True, help="Replace DIR if it is an existing prepared dataset.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: print the written index as JSON on stdout.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def prepare_data(sources, tokenizer, out, text_field, workers, shard_tokens, force, fmt, debug):
    """Tokenize a corpus once into memory-mapped token shards that every rank maps at start,
    instead of each rank reading and tokenizing the corpus (start-up time and RAM then do
    not grow with the corpus).

    \b
      titan-train prepare-data corpus/ --tokenizer tokenizer.json --out data/corpus-tok
      titan-train run --config my.toml --set data.dataset='"data/corpus-tok"' \\
                      --set data.tokenizer='"tokenizer.json"'

    SRC are files or folders (searched recursively) of .txt (documents separated by a blank
    line), .jsonl / .json (one object per line), either compressed as .gz or .zst, and
    .parquet. .zst and .parquet need `pip install 'titan-npu[data]'`.

    DIR gets tokens-NNNNN.npy shards (uint16 when the vocabulary has at most 65,536 ids,
    else uint32), doc_ends-NNNNN.npy document boundaries, and index.json (tokenizer name and
    sha256, vocab size, token and document counts, source files with sizes). It is written
    as a hidden .DIR.partial-PID folder and renamed when complete, so DIR is never half
    written. Progress goes to stderr. A file named twice (itself and its folder) is read once;
    a file that changes while it is read, and a DIR inside an input (or an input inside DIR),
    are refused.

    \b
    Exit codes: 0 written, 2 bad input or DIR cannot be written (a parent that is a file, no
    space left; nothing written), 130 / 143 interrupted by Ctrl-C / SIGTERM (nothing written, no worker
    left running).
    """
    from titan_train.data import corpus, prepare

    extra = {"shard_tokens": shard_tokens} if shard_tokens else {}
    try:
        total = sum(p.stat().st_size for p in corpus.find_sources(list(sources)))
        with _terminate_unwinds(), _progress(total, "tokenizing") as advance:
            index = prepare.prepare(
                list(sources),
                tokenizer,
                out,
                text_field=text_field,
                workers=workers,
                force=force,
                on_progress=advance,
                **extra,
            )
    except KeyboardInterrupt:
        click.echo(f"titan-train: interrupted; {out} was not written", err=True)
        sys.exit(130)
    except _Terminated:
        click.echo(f"titan-train: stopped by SIGTERM; {out} was not written", err=True)
        sys.exit(EXIT_SIGTERM)
    except _user_errors() as e:
        _fail(_user_message(e), debug)
    except (OSError, RuntimeError) as e:  # DIR under a file, or a disk that filled up (the partial is gone)
        _fail_if_unwritable(e, out, debug)
        raise
    click.echo(json.dumps(index, indent=1) if fmt == "json" else prepare.summary(index, out))


class _Terminated(Exception):
    """SIGTERM (kill, scancel) during prepare-data."""


@contextlib.contextmanager
def _terminate_unwinds():
    """SIGTERM raises, so prepare-data unwinds as on Ctrl-C: its tokenizing workers are shut
    down (by default they outlived a killed parent) and the partial folder is removed."""

    def raise_terminated(signum, frame):
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _progress(total: int, label: str):
    """A bar on a terminal; in a log, a line at every 10% (bytes of input done)."""
    if sys.stderr.isatty():
        with click.progressbar(length=max(total, 1), label=label, file=sys.stderr) as bar:
            yield bar.update
        return
    state = {"done": 0, "shown": 0, "start": time.perf_counter()}

    def advance(n: int) -> None:
        state["done"] += n
        pct = 100 * state["done"] // max(total, 1)
        if pct >= state["shown"] + 10:
            state["shown"] = pct - pct % 10
            rate = state["done"] / 1e6 / max(time.perf_counter() - state["start"], 1e-9)
            click.echo(f"{label}: {pct}% of {total / 1e6:,.1f} MB, {rate:,.2f} MB/s", err=True)

    yield advance


def _preflight(cfg, opts, ignore_memory: bool = False, path: Path | None = None) -> None:
    """Everything a user can get wrong is checked here, before any rank starts."""
    from titan_train.checkpoint import initial_load
    from titan_train.data import samples
    from titan_train.runtime import device

    config_mod.validate(cfg, opts.world_size)
    dev = device.select(cfg.distributed.backend, device.probe())
    device.check_options(dev, cpu_offload=cfg.distributed.cpu_offload, mixed_precision=cfg.training.mixed_precision)
    if dev.type != "cpu" and opts.nproc > dev.count:
        raise _UserError(f"--nproc {opts.nproc} exceeds the {dev.count} {dev.type.upper()} device(s) visible here")
    samples.check_samples(cfg.data, cfg.model.vocab_size, cfg.training.seq_len, cfg.validation.dataset)
    if cfg.metrics.tensorboard:
        from titan_train.components import metrics

        metrics.require_tensorboard()
    if cfg.metrics.wandb:
        from titan_train.components import wandb_sink

        wandb_sink.require_wandb()
    initial_load.preflight(cfg)
    _check_memory(cfg, opts, dev, ignore_memory, path or cfg.name)


def _check_memory(cfg, opts, dev, ignore_memory: bool, config_ref=None) -> None:
    """Refuse a job whose analytic memory estimate is clearly over what a rank has."""
    from titan_train.memory import remedies as mr
    from titan_train.memory.estimate import hccl_buffsize_mb
    from titan_train.runtime import device

    memory, source = device.memory_per_rank(dev, opts.nproc)
    target = mr.Target(
        opts.world_size,
        memory,
        dev.backend,
        accelerator=dev.type != "cpu",
        hccl_buffsize_mb=hccl_buffsize_mb(os.environ),
    )
    status, line = mr.preflight(cfg, target, source)
    if status == mr.OVER and not ignore_memory:
        raise _UserError(
            f"{line}; details: titan-doctor diagnose --config {config_ref or cfg.name} --world-size "
            f"{opts.world_size} --device-memory {memory / 2**30:.1f}GiB (and your --set lines); "
            "--ignore-memory starts anyway"
        )
    if status != mr.FITS:
        click.echo(f"titan-train: warning: memory may not fit: {line}", err=True)


@contextlib.contextmanager
def _owning_folder(cfg, opts, fresh: bool, stop_after: int):
    """Node 0's launcher holds the checkpoint folder's lock for its ranks (it also owns the
    run folder's rank logs, which a second run would truncate) and prepares the folder
    (refuse / --fresh) before any rank starts. Other nodes' launchers do nothing."""
    from titan_train.checkpoint import run_lock

    if opts.node_rank != 0:
        yield
        return
    with run_lock.RunLock(cfg.checkpoint.folder, say=click.echo):
        run_lock.prepare_folder(
            cfg, fresh=fresh, saves=cfg.checkpoint.save_interval > 0 or stop_after > 0, say=click.echo
        )
        os.environ[run_lock.HELD_ENV] = str(os.getpid())
        yield


def _check_restarts(max_restarts: int, opts, stop_after: int) -> None:
    """--max-restarts restarts one node's ranks; what it cannot mean is refused in one line."""
    if max_restarts and opts.nnodes > 1:
        raise _UserError(
            "--max-restarts restarts the ranks of one node; with --nnodes > 1 let the scheduler restart the "
            "whole job (Slurm: sbatch --requeue, scontrol requeue): every node then resumes from the newest "
            "complete checkpoint"
        )
    if max_restarts and stop_after:
        raise _UserError(
            "--max-restarts with --stop-after: a restart would count --stop-after again from its checkpoint; "
            "set training.steps to where the run should end instead"
        )


def _resume_point(cfg) -> str:
    """Where a restarted attempt resumes, for the restart line."""
    from titan_train.checkpoint import lineage

    if not cfg.checkpoint.resume:
        return "the start (checkpoint.resume = false)"
    done = [e for e in lineage.resume_candidates(cfg.checkpoint.folder)[0] if e.complete]
    if done:
        return f"step {done[0].step} ({done[0].path})"
    return "the start: no complete checkpoint yet (set checkpoint.save_interval to lose fewer steps)"


def _worker_argv(path: Path, overrides, stop_after: int, debug: bool) -> list[str]:
    """What every rank runs: this same command, which then finds itself under torchrun."""
    argv = ["run", "--config", str(path)] + [a for o in overrides for a in ("--set", o)]
    if stop_after:
        argv += ["--stop-after", str(stop_after)]
    return argv + (["--debug"] if debug else [])


def _fail_if_unwritable(e: BaseException, path: Path | None, debug: bool) -> None:
    """Exit with one line when `e` is a full disk or a destination that cannot be written
    (`path`: what was being written; None: the file the error names); return otherwise."""
    explained = write_errors.explain(e, path)
    if explained is not None:
        _fail(str(explained), debug)


def _user_message(e: Exception) -> str:
    """The one line for a user mistake; a CheckpointError also says its fix."""
    fix = getattr(e, "fix", "")
    return f"{e}; fix: {fix}" if fix else str(e)


def _user_errors() -> tuple[type[Exception], ...]:
    from titan_train.checkpoint import lineage, resume_compare, run_lock
    from titan_train.checkpoint.formats import CheckpointError
    from titan_train.components import metrics
    from titan_train.data import stream as data
    from titan_train.runtime import device, launch

    return (
        config_mod.ConfigError,
        device.DeviceError,
        data.DataError,
        CheckpointError,
        metrics.MissingExtra,
        launch.LaunchError,
        write_errors.WriteError,
        run_lock.FolderLocked,
        lineage.FolderInUse,
        resume_compare.ShapeChanged,
        _UserError,
    )


@main.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option(
    "-o",
    "--output",
    "out",
    default="",
    metavar="PNG",
    help="Where to write the PNG (default: <first RUN_DIR>/metrics.png).",
)
def plot(runs, out):
    """Plot loss, tokens/s, MFU and peak memory over steps for one or more runs, one line
    per run, from each RUN_DIR/metrics.jsonl (a run folder such as outputs/llama_debug, or
    the .jsonl file). Needs matplotlib: pip install 'titan-npu[plot]'.

    \b
      titan-train plot outputs/llama_debug outputs/llama_debug_tp2 -o compare.png
    """
    from titan_train.components import metrics
    from titan_train.components import plot as plot_mod

    first = Path(runs[0])
    target = Path(out) if out else (first.parent if first.suffix == ".jsonl" else first) / "metrics.png"
    try:
        written = plot_mod.plot(list(runs), target)
    except (plot_mod.PlotError, metrics.MissingExtra) as e:
        _fail(str(e), debug=False)
    click.echo(f"wrote {written} ({len(runs)} run(s))")


if __name__ == "__main__":
    main()
