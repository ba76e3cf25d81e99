"""`titan-doctor`: the command group. Subcommands load lazily so that `diagnose` never
pays for importing libcst (migrate) and nothing here imports torch."""

from __future__ import annotations

import importlib

import click

from titan_doctor import __version__

# name -> (module, attribute, one-line help shown by `titan-doctor --help`)
SUBCOMMANDS = {
    "migrate": (
        "titan_doctor.migrate.command",
        "migrate",
        "Rewrite CUDA PyTorch code for Ascend NPU (torch_npu / HCCL).",
    ),
    "diagnose": (
        "titan_doctor.diagnose.command",
        "diagnose",
        "Check versions, CANN install, HCCL setup; explain crash logs.",
    ),
    "convert": (
        "titan_doctor.convert.command",
        "convert",
        "Convert a checkpoint between DCP, torch.save, HF safetensors and Meta.",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module, attr, _ = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="titan-doctor")
def main():
    """Move a CUDA PyTorch/torchtitan training job to Ascend NPUs and keep it healthy.

    \b
    Exit codes: 0 nothing to do / all good, 1 findings remain, 2 usage or tool error.
    """
