"""`titan-doctor diagnose --config`: the memory plan as users run it (exit codes, text, JSON,
one-line input errors) and the parts it is made of."""

from __future__ import annotations

import pytest

from titan_doctor.diagnose import memory_plan, registry
from titan_doctor.diagnose.memory_plan import MemoryRequest, PlanError, parse_size

from .conftest import run_cli, run_json

GiB = 2**30


@pytest.mark.parametrize(
    "name,world",
    [
        ("llama_7b", 8),
        ("llama_13b", 16),
        ("llama_70b", 64),
        ("llama_70b_long", 64),
        ("llama3_8b", 8),
        ("llama3_70b", 64),
    ],
)
def test_shipped_configs_fit_the_cards_they_are_written_for_with_10_percent_spare(name, world):
    code, rows = run_json("--config", name, "--world-size", str(world), "--device", "910B2")
    data = rows["memory.plan"]["data"]
    assert code == 0 and data["verdict"] == "fits", rows["memory.plan"]["title"]
    assert data["headroom_bytes"] >= 0.1 * data["memory_bytes"], rows["memory.plan"]["title"]


# llama_70b as it was shipped before issue 21: no AC, 8 sequences per micro-batch
UNFIT_70B = ["--set", 'training.activation_checkpoint="none"', "--set", "training.grad_accum_steps=1"]


def test_70b_on_64_910b2_without_ac_does_not_fit_and_gets_ranked_remedies():
    code, rows = run_json("--config", "llama_70b", "--world-size", "64", "--device", "910B2", *UNFIT_70B)
    assert code == 1
    plan, rem = rows["memory.plan"], rows["memory.remedies"]
    data = plan["data"]
    assert plan["status"] == "fail" and data["verdict"] == "does not fit"
    assert data["memory_bytes"] == int(60.96 * GiB) and data["layout"] == "dp 8 x pp 1 x tp 8"
    assert data["peak_bytes"] > data["memory_bytes"] and data["headroom_bytes"] < 0
    terms = {t["name"] for t in data["stages"][0]["terms"]}
    assert {"params (sharded, fp32)", "optimizer state", "activations", "logits and loss"} <= terms
    assert "140" not in plan["title"] and "138.0 GB" in plan["detail"] and "17.2 GB per card" in plan["detail"]
    remedies = rem["data"]["remedies"]
    config_changes = [r for r in remedies if not r["flags"]]
    assert [r["saved_bytes"] for r in config_changes] == sorted(
        (r["saved_bytes"] for r in config_changes), reverse=True
    )
    assert all(r["command"].startswith("--set ") for r in config_changes)
    assert plan["fix"].startswith("titan-train run --config llama_70b --set ")
    assert config_changes[0]["command"] in plan["fix"]


def test_full_ac_makes_70b_fit_and_exit_0():
    code, rows = run_json(
        "--config",
        "llama_70b",
        "--world-size",
        "64",
        "--device",
        "910B2",
        *UNFIT_70B,
        "--set",
        'training.activation_checkpoint="full"',
    )
    assert code == 0 and rows["memory.plan"]["status"] == "ok" and "memory.remedies" not in rows


def test_7b_weights_fit_one_card_training_without_sharding_does_not():
    p = run_cli("--config", "llama_7b", "--world-size", "1", "--device", "910B2")
    assert p.returncode == 1
    assert "weights in bf16: 13.5 GB" in p.stdout and "fits one card" in p.stdout
    assert "without FSDP sharding — does not fit before any activation" in p.stdout
    assert "cpu_offload=true" in p.stdout


def test_text_output_shows_the_breakdown_and_the_device_source():
    p = run_cli("--config", "llama_13b", "--world-size", "16", "--device", "910B4")
    out = p.stdout
    for text in (
        "per-rank breakdown",
        "communication buffers",
        "3 HCCL communicators x 2 x HCCL_BUFFSIZE 200 MB",
        "allocator margin",
        "Ascend 910B4: 32 GiB nominal",
        "remedies, re-estimated",
    ):
        assert text in out, text


def test_hccl_buffsize_from_the_environment_changes_the_buffers(monkeypatch):
    from .conftest import clean_env

    p = run_cli(
        "--config",
        "llama_13b",
        "--world-size",
        "16",
        "--device-memory",
        "1TiB",
        "-v",
        env=clean_env(HCCL_BUFFSIZE="50"),
    )
    assert p.returncode == 0 and "x HCCL_BUFFSIZE 50 MB" in p.stdout


def test_device_memory_overrides_and_fits():
    code, rows = run_json("--config", "llama_debug", "--world-size", "2", "--device-memory", "2GiB")
    assert code == 0 and rows["memory.plan"]["data"]["memory_bytes"] == 2 * GiB


@pytest.mark.parametrize(
    "args,message",
    [
        (("--config", "llama_70b", "--device", "910B2"), "--config needs --world-size"),
        (("--config", "llama_70b", "--world-size", "64"), "--device NAME"),
        (("--config", "llama_70b", "--world-size", "64", "--device", "TPUv9"), "'TPUv9' is not in rules/devices.toml"),
        (("--config", "llama_70b", "--world-size", "64", "--device-memory", "lots"), "expected a size like 64GiB"),
        (("--config", "nope", "--world-size", "8", "--device", "910B2"), "config file not found"),
        (("--config", "llama_70b", "--world-size", "63", "--device", "910B2"), "must divide the world size 63"),
        (
            ("--config", "llama_70b", "--world-size", "64", "--device", "910B2", "--set", "training.nope=1"),
            "unknown key training.nope",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    p = run_cli(*args)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_list_checks_and_help_mention_the_memory_plan():
    p = run_cli("--list-checks")
    assert (
        "memory" in [ln.split()[0] for ln in p.stdout.splitlines()] and "(--config CONFIG, no --checkpoint)" in p.stdout
    )
    assert "--world-size" in run_cli("--help").stdout
    assert [c.id for c in registry.select([], comm=False, logs=False, memory=True)] == ["memory"]
    assert "memory" not in [c.id for c in registry.select([], comm=False, logs=False)]


@pytest.mark.parametrize(
    "text,size",
    [
        ("64GiB", 64 * GiB),
        ("60.96 GiB", int(60.96 * GiB)),
        ("64G", 64 * GiB),
        ("32GB", 32 * 10**9),
        ("1024", 1024),
        ("1TiB", 2**40),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


def test_cards_come_from_devices_toml():
    card = memory_plan.resolve_card(MemoryRequest("llama_7b", 8, device="910B4"))
    assert card.memory_bytes == 32 * GiB and card.backend == "hccl" and "910B4" in card.name
    card = memory_plan.resolve_card(MemoryRequest("llama_7b", 8, device="A100"))
    assert card.memory_bytes == int(79.35 * GiB) and card.backend == "nccl" and "usable" in card.source
    assert memory_plan.resolve_card(MemoryRequest("x", 1, device="910A")).memory_bytes == 32 * GiB
    with pytest.raises(PlanError):
        memory_plan.resolve_card(MemoryRequest("x", 1))


def test_a_torchtitan_toml_is_planned_as_titan_train_run_would_convert_it(tmp_path):
    """torchtitan's published figures come with torchtitan TOMLs; the plan reads them as
    `titan-train run` does (it said "model.name = 'llama3' is not valid")."""
    from titan_train.config.torchtitan import load_either
    from titan_train.memory import estimate as me

    path = tmp_path / "llama3_8b.toml"
    path.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
        '[activation_checkpoint]\nmode = "full"\n'
    )
    code, rows = run_json("--config", str(path), "--world-size", "8", "--device", "910B2", "--backend", "nccl")
    data = rows["memory.plan"]["data"]
    assert data["layout"] == "dp 8 x pp 1 x tp 1"
    cfg, conversion = load_either(path, [], 8)
    assert conversion is not None and cfg.model.vocab_size == 128256 and cfg.training.activation_checkpoint == "full"
    assert data["peak_bytes"] == me.estimate(me.layout(cfg, 8, "nccl")).peak_bytes
    assert code == (0 if data["peak_bytes"] <= data["memory_bytes"] else 1)
