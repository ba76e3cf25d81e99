"""`titan-train`: the reference LLaMA trainer (FSDP2 + tensor parallel) on npu / cuda / cpu."""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import click

from titan_train import __version__
from titan_train import config as config_mod
from titan_train.device import disable_backend_autoload
from titan_train.resources import configs_dir

EXIT_USAGE = 2


def resolve_config(spec: str) -> Path:
    """A path, or the name of a shipped config ("llama_debug" -> configs/llama_debug.toml)."""
    path = Path(spec)
    if path.exists() or path.suffix == ".toml" or "/" in spec:
        return path
    return configs_dir() / f"{spec}.toml"


class _UserError(Exception):
    """A setup mistake found by the CLI itself (not by config/device/data)."""


def _fail(message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    click.echo(f"titan-train: error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def _require_fsdp2() -> None:
    import torch

    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        raise _UserError(f"torch {torch.__version__} has no FSDP2 (torch.distributed.fsdp.fully_shard); "
                         "install torch >= 2.6 with its matching torch_npu") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="titan-train")
def main():
    """Train LLaMA the PyTorch FSDP way on Ascend NPU (hccl), NVIDIA (nccl) or CPU (gloo).

    \b
    Exit codes: 0 done, 1 a rank failed while training, 2 bad config or setup.
    """


@main.command()
@click.option("--config", "config_spec", default="llama_debug", show_default=True,
              help="Trainer TOML file, or the name of a shipped config (llama_debug, llama_7b, llama_13b, llama_70b).")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a config value, e.g. --set training.steps=20 (repeatable; values are TOML).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ranks to start on this node (torchrun's --nproc-per-node).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes in the job.")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="This node's rank (with --master-addr).")
@click.option("--master-addr", default="", help="Address of node 0 (static multi-node rendezvous).")
@click.option("--master-port", type=click.IntRange(0, 65535), default=0, help="Port on node 0 (default 29500).")
@click.option("--rdzv-endpoint", default="", help="HOST:PORT for c10d rendezvous (elastic multi-node).")
@click.option("--rdzv-id", default="titan-train", show_default=True, help="Rendezvous id shared by all nodes.")
@click.option("--stop-after", type=click.IntRange(min=0), default=0,
              help="Stop after this many steps in this run (checkpointing there); the next run resumes.")
@click.option("--print-config", is_flag=True, help="Print the resolved config (defaults and overrides applied) as JSON and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def run(config_spec, overrides, nproc, nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id,
        stop_after, print_config, debug):
    """Train with the given config. Starts the ranks itself, and also runs unchanged as the
    script of a `torchrun` you start yourself:

    \b
      titan-train run --config configs/llama_debug.toml --nproc 2
      torchrun --nproc-per-node 8 -m titan_train.cli run --config llama_7b

    `training.batch_size` is the GLOBAL batch (sequences per optimizer step); each
    data-parallel rank reads batch_size / (dp x grad_accum_steps) sequences per micro-step.
    Checkpoints go to checkpoint.folder (default outputs/<config>/checkpoints/step-N) and a
    run resumes from the newest complete one. Metrics: outputs/<config>/metrics.jsonl.
    """
    disable_backend_autoload()
    from titan_train import launch

    path = resolve_config(config_spec)
    try:
        cfg = config_mod.load(path, list(overrides))
        if print_config:
            click.echo(json.dumps(config_mod.to_dict(cfg), indent=2))
            return
        _require_fsdp2()
        if not launch.under_torchrun():
            opts = launch.LaunchOptions(nproc=nproc, nnodes=nnodes, node_rank=node_rank, rdzv_id=rdzv_id,
                                        rdzv_endpoint=rdzv_endpoint, master_addr=master_addr,
                                        master_port=master_port)
            _preflight(cfg, opts)
            if opts.world_size > 1:
                sys.exit(launch.spawn(opts, _worker_argv(path, overrides, stop_after, debug)))
            launch.single_process_env()
        from titan_train.train import train

        train(cfg, stop_after)
    except _user_errors() as e:
        _fail(str(e), debug)


def _preflight(cfg, opts) -> None:
    """Everything a user can get wrong is checked here, before any rank starts."""
    from titan_train import data, device
    from titan_train.checkpoint_formats import initial_load

    config_mod.validate(cfg, opts.world_size)
    dev = device.select(cfg.distributed.backend, device.probe())
    device.check_options(dev, cpu_offload=cfg.distributed.cpu_offload, mixed_precision=cfg.training.mixed_precision)
    if dev.type != "cpu" and opts.nproc > dev.count:
        raise _UserError(f"--nproc {opts.nproc} exceeds the {dev.count} {dev.type.upper()} device(s) visible here")
    data.checked_tokenizer(cfg.data.tokenizer, cfg.data.dataset, cfg.model.vocab_size)
    initial_load.preflight(cfg)


def _worker_argv(path: Path, overrides, stop_after: int, debug: bool) -> list[str]:
    """What every rank runs: this same command, which then finds itself under torchrun."""
    argv = ["run", "--config", str(path)] + [a for o in overrides for a in ("--set", o)]
    if stop_after:
        argv += ["--stop-after", str(stop_after)]
    return argv + (["--debug"] if debug else [])


def _user_errors() -> tuple[type[Exception], ...]:
    from titan_train import data, device
    from titan_train.checkpoint_formats import CheckpointError

    return config_mod.ConfigError, device.DeviceError, data.DataError, CheckpointError, _UserError

if __name__ == "__main__":
    main()
