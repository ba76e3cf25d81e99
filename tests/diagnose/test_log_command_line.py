"""A program refusing its own command line (argparse's three refusals, HfArgumentParser's and
ms-swift's leftover argv), and a client that waited the whole store timeout: each read from the
message's own format (CPython 3.11 Lib/argparse.py, transformers hf_argparser.py, c10d socket.cpp)."""

import pytest

from .conftest import log_root as root


@pytest.mark.parametrize(
    "line,options",
    [
        (
            "pretrain_gpt.py: error: unrecognized arguments: --use-fused-rmsnorm --use-mc2",
            "--use-fused-rmsnorm, --use-mc2",
        ),
        (
            "ValueError: Some specified arguments are not used by the HfArgumentParser: ['--lora_rnk', '8']",
            "--lora_rnk",
        ),
        ("ValueError: remaining_argv: ['--use_fused_swiglu']", "--use_fused_swiglu"),
    ],
)
def test_options_a_parser_does_not_define_are_named_in_cause_and_fix(tmp_path, line, options):
    f = root(tmp_path, line + "\n")
    assert f.code == "log.cli.unrecognized_arguments" and f.data["family"] == "command_line"
    assert f"does not define: {options}." in f.detail
    assert f.fix.startswith(f"Remove {options} from the command line")


def test_mindspeed_switches_are_told_apart_from_megatrons_own_flags(tmp_path):
    f = root(
        tmp_path, "train.py: error: unrecognized arguments: --use-flash-attn --use-fused-swiglu --npu-deterministic\n"
    )
    note = f.detail.split("misspelled.")[1].strip()  # Megatron-LM itself defines --use-flash-attn
    assert note.startswith("--use-fused-swiglu, --npu-deterministic are MindSpeed switches")
    assert "mindspeed.megatron_adaptor" in f.fix
    g = root(tmp_path, "train.py: error: unrecognized arguments: --lr-warmup-fraction 0.1\n")
    assert "MindSpeed" not in g.detail and "mindspeed" not in g.fix


def test_an_invalid_choice_and_missing_required_options(tmp_path):
    f = root(tmp_path, "train.py: error: argument --backend: invalid choice: 'hccl' (choose from 'nccl', 'gloo')\n")
    assert f.code == "log.cli.invalid_choice"
    assert "--backend was given 'hccl'" in f.detail and "(it offers 'nccl', 'gloo')" in f.detail
    g = root(tmp_path, "pretrain_gpt.py: error: the following arguments are required: --data-path, --tokenizer-type\n")
    assert g.code == "log.cli.required_arguments" and "Pass --data-path, --tokenizer-type" in g.fix


@pytest.mark.parametrize(
    "line,waited,at,nc",
    [
        (
            "[E socket.cpp:957] [c10d] The client socket has timed out after 1800000ms while trying to connect to "
            "(10.0.0.7, 29500).",
            "30 min (1800000 ms)",
            " at 10.0.0.7:29500 ",
            "nc -zv 10.0.0.7 29500",
        ),
        (
            "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to",
            "10 min (600000 ms)",
            " for the rendezvous store and",
            "nc -zv <MASTER_ADDR> <MASTER_PORT>",
        ),
    ],
)
def test_a_client_that_waited_the_store_timeout_puts_rank_0_first(tmp_path, line, waited, at, nc):
    """The client retries its connect for the whole timeout, so a store not listening yet and one
    that cannot be reached print the same line: the finding says both, rank 0's side first, and
    leaves the network checks to the fix (with the endpoint when the line kept it)."""
    f = root(tmp_path, line + "\n")
    assert f.code == "log.dist.store_timeout" and f.data["family"] == "rendezvous"
    assert f"waited {waited}" in f.detail and at in f.detail
    assert "had not got there" in f.detail and "firewall" not in f.detail
    assert nc in f.fix and "--ddp_timeout" in f.fix
