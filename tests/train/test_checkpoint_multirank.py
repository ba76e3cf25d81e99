"""Checkpoints saved and loaded by real multi-rank gloo runs (tests/train/ckpt_worker.py):
FSDP1 FULL / SHARDED / LOCAL torch.save parts and the seed's KeyError with the doctor's fix;
FSDP2 saved by the trainer's own build() + save in its DCP layout, round-tripped
DCP -> torch -> DCP and started from (initial_load_path, with optimizer state) on 2 x 2
FSDP x TP; HF weights loaded into FSDP and FSDP x TP layouts vs the native load; export_final."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from titan_train.checkpoint.formats import detect, naming
from titan_train.checkpoint.formats.sources import Source

from ..checkpoints import REPO, weights, write_hf
from ..diagnose.conftest import run_json
from .ckpt_worker import ARGS

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes

pytest.importorskip("safetensors")
WORKER = Path(__file__).with_name("ckpt_worker.py")
HEADS = {"n_heads": ARGS.n_heads, "n_kv_heads": ARGS.kv_heads}


def _ranks(n: int, *args: str, tp: int = 1) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TP=str(tp))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(n),
        str(WORKER),
        *args,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and GLOO_TEARDOWN_ABORT in proc.stderr:
        # torch's own gloo threads can abort a rank as it exits (pytorch/pytorch#179291); the
        # worker only builds checkpoints with torch, so run it once more (it overwrites its files)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def _convert(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "titan_doctor", "convert", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def fsdp1(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fsdp1")
    _ranks(2, "fsdp1", str(out))
    return out


def test_fsdp1_full_state_dict_is_a_plain_full_checkpoint(fsdp1):
    info = detect.describe(fsdp1 / "full.pt")
    assert info.format == "torch" and info.keymap.naming == naming.OURS and not info.keymap.prefixes
    reference = torch.load(fsdp1 / "reference.pt", weights_only=True)
    source = Source(info)
    assert all(torch.equal(source.read(k), reference[k]) for k in reference)


def test_fsdp1_sharded_parts_are_detected_and_merge_into_the_full_weights(fsdp1, tmp_path):
    info = detect.describe(fsdp1 / "sharded_rank1.pt")
    assert info.format == "torch-sharded"
    assert [p.name for p in info.parts] == ["sharded_rank0.pt", "sharded_rank1.pt"]
    assert info.param_count == sum(v.numel() for v in weights(ARGS).values())
    proc = _convert(str(fsdp1 / "sharded_rank1.pt"), str(tmp_path / "merged.pt"), "--to", "torch")
    assert proc.returncode == 0, proc.stderr
    merged = torch.load(tmp_path / "merged.pt", weights_only=True)
    reference = torch.load(fsdp1 / "reference.pt", weights_only=True)
    assert merged.keys() == reference.keys() and all(torch.equal(merged[k], reference[k]) for k in reference)


def test_seed_failure_local_part_loaded_as_full_state_dict_and_the_doctor_fix(fsdp1):
    """The users' guide failure: a sharded save read as a full state dict."""
    assert (fsdp1 / "keyerror.txt").read_text().strip() == "KeyError: 'layers.0.attention.wq.weight'"
    rc, rows = run_json("--checkpoint", str(fsdp1 / "local_rank0.pt"))
    assert rc == 1
    assert rows["ckpt.format"]["data"]["format"] == "torch-local"
    sharded = rows["ckpt.sharded"]
    assert sharded["status"] == "fail"
    assert (
        "local_rank0.pt is one rank's part of a sharded save (2 part file(s): local_rank0.pt, local_rank1.pt)"
        in sharded["title"]
    )
    assert "KeyError" in sharded["detail"] and "_flat_param" in sharded["detail"]
    assert "LOCAL_STATE_DICT" in sharded["fix"] and "dcp.save" in sharded["fix"]
    # the log explainer names the same cause from the error text alone
    rc, rows = run_json("--log", str(fsdp1 / "keyerror.txt"))
    assert rc == 1 and "log.ckpt.keyerror" in rows
    # the SHARDED parts are convertible, so the doctor warns and offers the conversion
    rc, rows = run_json("--checkpoint", str(fsdp1 / "sharded_rank0.pt"))
    assert rows["ckpt.sharded"]["status"] == "warn" and "--to torch" in rows["ckpt.sharded"]["fix"]


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fsdp2")
    sd = weights(ARGS, seed=11)
    torch.save(sd, out / "native.pt")
    write_hf(out / "hf", sd, ARGS, shards=2)
    _ranks(2, "fsdp2", str(out))
    return out


def test_fsdp2_dcp_in_the_trainer_layout(fsdp2):
    info = detect.describe(fsdp2 / "trainer")
    assert info.format == "dcp" and info.root.name == "step-1" and info.step == 1
    assert info.has_optimizer and info.keymap.prefixes == ["model."]
    assert {f.name for f in info.files} == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    assert info.param_count == sum(v.numel() for v in weights(ARGS).values())
    part = detect.describe(fsdp2 / "dtensor_rank1.pt")
    assert part.format == "torch-dtensor" and [p.name for p in part.parts] == ["dtensor_rank0.pt", "dtensor_rank1.pt"]


def test_dcp_to_torch_to_dcp_then_four_ranks_tp_resume_identically(fsdp2):
    """trainer DCP (2 ranks FSDP) -> one torch file -> DCP -> loaded on 2 x 2 FSDP x TP with its
    optimizer state: the weights are bit-identical and the next losses are the same."""
    assert _convert(str(fsdp2 / "trainer"), str(fsdp2 / "rt.pt"), "--to", "torch").returncode == 0
    whole = torch.load(fsdp2 / "rt.pt", weights_only=True)
    assert set(whole) == {"model", "optim", "scheduler", "progress", "loss_scaler"}
    assert "state.layers.0.attention.wq.weight.exp_avg" in whole["optim"]  # flat, by parameter FQN
    assert whole["progress"] == {"step": 1, "samples": 4}
    assert _convert(str(fsdp2 / "rt.pt"), str(fsdp2 / "rt_dcp"), "--to", "dcp").returncode == 0
    _ranks(4, "resume", str(fsdp2), str(fsdp2 / "rt_dcp"), tp=2)
    assert "+ optimizer state" in (fsdp2 / "resume_message.txt").read_text()
    before = torch.load(fsdp2 / "fsdp2_weights.pt", weights_only=True)
    after = torch.load(fsdp2 / "resume_tp2_weights.pt", weights_only=True)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    want = json.loads((fsdp2 / "fsdp2_losses.json").read_text())
    got = json.loads((fsdp2 / "resume_tp2_losses.json").read_text())
    # FSDP and FSDP x TP sum in different orders: equal to float32 rounding
    assert got["next"] == pytest.approx(want["next"], rel=1e-6, abs=1e-6)
    assert got["after_step"] == pytest.approx(want["after_step"], rel=1e-6, abs=1e-6)
    logits = torch.load(fsdp2 / "logits_tp2.pt", weights_only=True)
    assert torch.equal(logits["hf"], logits["native"])  # HF weights into FSDP x TP shards


def test_hf_weights_into_fsdp_give_the_native_logits(fsdp2):
    logits = torch.load(fsdp2 / "logits_tp1.pt", weights_only=True)
    assert torch.equal(logits["hf"], logits["native"])
    native = torch.load(fsdp2 / "native.pt", weights_only=True)
    from titan_train.models.llama import Transformer

    model = Transformer(ARGS)
    model.load_state_dict(native)
    tokens = torch.randint(0, ARGS.vocab_size, (2, 8), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(logits["hf"], model(tokens).detach(), rtol=0, atol=1e-6)


def test_export_final_from_fsdp_ranks(fsdp2):
    """export_final gathers the shards: torch export == the full weights; the HF export reads
    back (un-permuted) to the same weights."""
    full = torch.load(fsdp2 / "fsdp2_weights.pt", weights_only=True)
    exported = torch.load(fsdp2 / "export_torch" / "export-step-1" / "model.pt", weights_only=True)
    assert exported.keys() == full.keys() and all(torch.equal(exported[k], full[k]) for k in full)
    hf = fsdp2 / "export_hf" / "export-step-1"
    info = detect.describe(hf)
    assert info.format == "hf" and info.declared["n_kv_heads"] == ARGS.kv_heads
    source = Source(info, heads=HEADS)
    assert all(torch.equal(source.read(k), full[k]) for k in full)
