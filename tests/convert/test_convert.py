"""`titan-doctor convert SRC DST --to dcp|torch|hf|meta` as users run it, on real files:
round trips, HF naming and q/k permutation, sharded safetensors with an index, dtype cast,
prefix removal, and the failure modes (missing source, unsafe source, existing DST, a
failure halfway) that must leave nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from titan_train.checkpoint.formats import CheckpointError, detect
from titan_train.checkpoint.formats.safetensors_io import read_header

from ..checkpoints import REPO, TINY, hf_state_dict, malicious_torch_file, weights, write_meta, write_trainer_dcp
from ..checkpoints import doctor_convert as convert

safetensors = pytest.importorskip("safetensors")
from safetensors.torch import load_file  # noqa: E402


def _config(path: Path) -> Path:
    path.write_text(
        "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\n"
        "multiple_of = 16\nmax_seq_len = 16\n"
    )
    return path


def _hf_tensors(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in folder.glob("*.safetensors"):
        out.update(load_file(str(f)))
    return out


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".partial-" in p.name]


def test_meta_to_hf_to_meta_is_identical(tmp_path):
    """Two model-parallel Meta shards with GQA -> HF (names, q/k permuted per head) -> Meta."""
    sd = weights()
    write_meta(tmp_path / "meta", sd, shards=2)
    p = convert(tmp_path / "meta", tmp_path / "hf", "--to", "hf")
    assert p.returncode == 0 and "-> " in p.stdout and "21 model weights" in p.stdout
    hf = _hf_tensors(tmp_path / "hf")
    reference = hf_state_dict(sd)  # transformers' conversion, written out independently
    assert hf.keys() == reference.keys() and all(torch.equal(hf[k], reference[k]) for k in reference)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["intermediate_size"]) == (4, 2, 96)
    p = convert(tmp_path / "hf", tmp_path / "back", "--to", "meta")
    assert p.returncode == 0
    back = torch.load(tmp_path / "back" / "consolidated.00.pth", weights_only=True)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    params = json.loads((tmp_path / "back" / "params.json").read_text())
    assert (params["dim"], params["n_heads"], params["n_kv_heads"], params["vocab_size"]) == (32, 4, 2, 64)


def test_sharded_hf_output_with_index_and_bf16_cast(tmp_path):
    sd = weights()
    torch.save(sd, tmp_path / "w.pt")
    p = convert(
        tmp_path / "w.pt",
        tmp_path / "hf",
        "--to",
        "hf",
        "--config",
        _config(tmp_path / "c.toml"),
        "--dtype",
        "bf16",
        "--max-shard-size",
        "20KB",
    )
    assert p.returncode == 0, p.stderr
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    shards = sorted((tmp_path / "hf").glob("model-*-of-*.safetensors"))
    assert len(shards) > 2 and {s.name for s in shards} == set(index["weight_map"].values())
    assert all(s.stat().st_size <= 20_000 + 8_192 for s in shards)  # tensor bytes per shard + header
    assert {t.dtype for f in shards for t in read_header(f)[0].values()} == {"bfloat16"}
    hf = _hf_tensors(tmp_path / "hf")
    assert all(torch.equal(hf[k], v.to(torch.bfloat16)) for k, v in hf_state_dict(sd).items())
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_trainer_dcp_to_hf_needs_the_head_count(tmp_path):
    write_trainer_dcp(tmp_path / "run", weights(), step=3)
    p = convert(tmp_path / "run", tmp_path / "hf", "--to", "hf")
    assert p.returncode == 1 and "attention heads" in p.stderr and "--config" in p.stderr
    assert not (tmp_path / "hf").exists()
    p = convert(tmp_path / "run", tmp_path / "hf", "--to", "hf", "--config", _config(tmp_path / "c.toml"))
    assert p.returncode == 0, p.stderr
    assert set(_hf_tensors(tmp_path / "hf")) == set(hf_state_dict(weights()))


def test_config_that_does_not_fit_stops_before_writing(tmp_path):
    torch.save(weights(), tmp_path / "w.pt")
    cfg = tmp_path / "c.toml"
    cfg.write_text(_config(tmp_path / "c.toml").read_text().replace("vocab_size = 64", "vocab_size = 65"))
    p = convert(tmp_path / "w.pt", tmp_path / "hf", "--to", "hf", "--config", cfg)
    assert p.returncode == 1 and "vocab_size: checkpoint 64, config 65" in p.stderr
    assert not (tmp_path / "hf").exists() and not _leftovers(tmp_path)
    # a config that cannot be read is a usage error, as in diagnose --config
    p = convert(tmp_path / "w.pt", tmp_path / "hf", "--to", "hf", "--config", tmp_path / "none.toml")
    assert p.returncode == 2 and "--config: config file not found" in p.stderr
    assert not (tmp_path / "hf").exists() and not _leftovers(tmp_path)


def test_prefixes_are_removed_for_a_bare_state_dict(tmp_path):
    sd = weights()
    torch.save({"model": {f"module._orig_mod.{k}": v for k, v in sd.items()}, "epoch": 2}, tmp_path / "w.pt")
    p = convert(tmp_path / "w.pt", tmp_path / "clean.pt", "--to", "torch")
    assert p.returncode == 0
    clean = torch.load(tmp_path / "clean.pt", weights_only=True)
    assert clean.keys() == sd.keys() and all(torch.equal(clean[k], sd[k]) for k in sd)
    from titan_train.models.llama import Transformer

    Transformer(TINY).load_state_dict(clean)  # strict load of the converted file works


def test_dcp_and_torch_round_trip_keeps_every_entry(tmp_path):
    write_trainer_dcp(tmp_path / "run", weights(), step=4)
    assert convert(tmp_path / "run", tmp_path / "all.pt", "--to", "torch").returncode == 0
    whole = torch.load(tmp_path / "all.pt", weights_only=True)
    assert set(whole) == {"model", "optim", "progress"} and whole["progress"] == {"step": 4, "samples": 32}
    assert convert(tmp_path / "all.pt", tmp_path / "again", "--to", "dcp").returncode == 0
    first, second = detect.describe(tmp_path / "run" / "step-4"), detect.describe(tmp_path / "again")
    assert first.tensors == second.tensors and sorted(first.objects) == sorted(second.objects)
    p = convert(tmp_path / "run", tmp_path / "model.pt", "--to", "torch", "--model-only", "--format", "json")
    report = json.loads(p.stdout)
    assert report["ok"] and not report["whole"] and report["tensors"] == 21
    assert set(torch.load(tmp_path / "model.pt", weights_only=True)) == set(weights())


def test_missing_source_is_exit_1_and_writes_nothing(tmp_path):
    p = convert(tmp_path / "nope", tmp_path / "out", "--to", "dcp")
    assert p.returncode == 1 and "nope: no such file or folder" in p.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_unsafe_source_is_refused_and_nothing_runs_or_is_written(tmp_path):
    marker = tmp_path / "pwned"
    malicious_torch_file(tmp_path / "evil.pt", marker)
    for target in ("dcp", "hf", "torch"):
        p = convert(tmp_path / "evil.pt", tmp_path / "out", "--to", target, "--config", _config(tmp_path / "c.toml"))
        assert p.returncode == 1 and "Refused" in p.stderr
    assert not marker.exists() and not (tmp_path / "out").exists() and not _leftovers(tmp_path)


def test_existing_destination_needs_force(tmp_path):
    torch.save(weights(), tmp_path / "w.pt")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    p = convert(tmp_path / "w.pt", tmp_path / "out", "--to", "dcp")
    assert p.returncode == 1 and "already exists" in p.stderr and (tmp_path / "out" / "keep").exists()
    # --force replaces only an earlier dcp output: a folder holding a person's file is refused (issue 18)
    p = convert(tmp_path / "w.pt", tmp_path / "out", "--to", "dcp", "--force")
    assert p.returncode == 1 and "refusing to replace it" in p.stderr and (tmp_path / "out" / "keep").exists()
    (tmp_path / "out" / "keep").unlink()
    p = convert(tmp_path / "w.pt", tmp_path / "out", "--to", "dcp", "--force")
    assert p.returncode == 0 and (tmp_path / "out" / ".metadata").is_file()


def test_progress_lines_on_request(tmp_path):
    torch.save(weights(), tmp_path / "w.pt")
    p = convert(tmp_path / "w.pt", tmp_path / "out.pt", "--to", "torch", "--progress")
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("convert:")]
    assert lines and lines[-1].startswith("convert: 100.0%")


def test_failure_halfway_leaves_no_partial_output(tmp_path, monkeypatch):
    """A read error in the middle of writing HF shards: DST never appears, the temporary is gone."""
    from titan_doctor.convert import run
    from titan_train.checkpoint.formats import sources

    write_meta(tmp_path / "meta", weights(), shards=1)
    original, calls = sources.Source.read, []

    def failing(self, key, index=None):
        calls.append(key)
        if len(calls) == 6:
            raise CheckpointError("disk went away")
        return original(self, key, index)

    monkeypatch.setattr(sources.Source, "read", failing)
    with pytest.raises(CheckpointError, match="disk went away"):
        run.convert(tmp_path / "meta", tmp_path / "hf", "hf", max_shard_bytes=10_000)
    assert len(calls) == 6 and not (tmp_path / "hf").exists() and not _leftovers(tmp_path)


def test_without_the_safetensors_package_hf_data_is_one_clear_error(tmp_path):
    """safetensors is an extra: headers are still read (diagnose works), data needs the package."""
    from ..checkpoints import write_hf

    blocker = tmp_path / "blocker" / "safetensors"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named safetensors (blocked by the test)')\n")
    write_hf(tmp_path / "hf", weights())
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'blocker'}{os.pathsep}{REPO}")
    diagnose = subprocess.run(
        [sys.executable, "-m", "titan_doctor", "diagnose", "--checkpoint", str(tmp_path / "hf")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert diagnose.returncode == 0 and "[ok] HuggingFace safetensors" in diagnose.stdout
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "titan_doctor",
            "convert",
            str(tmp_path / "hf"),
            str(tmp_path / "out.pt"),
            "--to",
            "torch",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.splitlines() == [
        "titan-doctor convert: error: HF safetensors data needs the 'safetensors' package, which is not installed",
        "  fix: pip install 'titan-npu[hf]'   (or: pip install safetensors)",
    ]
    assert not (tmp_path / "out.pt").exists()


def test_tied_hf_checkpoint_converts_back_to_hf(tmp_path):
    """tie_word_embeddings=true: no lm_head.weight in the file, the trainer's output.weight reads
    embed_tokens; writing that back out must not trip safetensors' shared-memory check."""
    from safetensors.torch import save_file

    sd = weights()
    hf = {k: v for k, v in hf_state_dict(sd).items() if k != "lm_head.weight"}
    (tmp_path / "src").mkdir()
    save_file(hf, str(tmp_path / "src" / "model.safetensors"), metadata={"format": "pt"})
    from ..checkpoints import hf_config

    (tmp_path / "src" / "config.json").write_text(json.dumps(hf_config(tie_word_embeddings=True)))
    p = convert(tmp_path / "src", tmp_path / "hf", "--to", "hf")
    assert p.returncode == 0, p.stderr
    out = _hf_tensors(tmp_path / "hf")
    assert torch.equal(out["lm_head.weight"], hf["model.embed_tokens.weight"])
    assert all(torch.equal(out[k], hf[k]) for k in hf)


def test_destination_holding_the_source_is_refused_even_with_force(tmp_path):
    """`convert hf/model.safetensors hf --to hf --force` would replace the folder the source
    (and its tokenizer files) lives in."""
    write_meta(tmp_path / "meta", weights(), shards=1)
    (tmp_path / "meta" / "tokenizer.model").write_bytes(b"spm")
    for dst in (tmp_path / "meta", tmp_path):
        p = convert(tmp_path / "meta" / "consolidated.00.pth", dst, "--to", "hf", "--force")
        assert p.returncode == 1 and "delete the source" in p.stderr, p.stderr
    assert sorted(f.name for f in (tmp_path / "meta").iterdir()) == [
        "consolidated.00.pth",
        "params.json",
        "tokenizer.model",
    ]


def _hf_bin_folder(folder: Path, *, shards: int, tied: bool = False, extra_files: bool = False) -> dict:
    """HF's pre-safetensors layout: pytorch_model.bin, or pytorch_model-0000i-of-0000n.bin +
    pytorch_model.bin.index.json, next to config.json (transformers' save_pretrained(safe_serialization=False))."""
    from ..checkpoints import hf_config

    folder.mkdir(parents=True)
    hf = hf_state_dict(weights())
    if tied:
        hf.pop("lm_head.weight")
    hf["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)  # transformers < 4.31 saved it
    names = list(hf)
    if shards == 1:
        torch.save(hf, folder / "pytorch_model.bin")
    else:
        weight_map = {}
        for i in range(shards):
            file = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
            torch.save({n: hf[n] for n in names[i::shards]}, folder / file)
            weight_map.update({n: file for n in names[i::shards]})
        (folder / "pytorch_model.bin.index.json").write_text(
            json.dumps({"metadata": {"total_size": sum(v.numel() * 4 for v in hf.values())}, "weight_map": weight_map})
        )
    (folder / "config.json").write_text(json.dumps(hf_config(tie_word_embeddings=tied, rope_theta=500000.0)))
    if extra_files:  # an HF Trainer checkpoint-N folder
        torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
        torch.save({"last_epoch": 3}, folder / "scheduler.pt")
        (folder / "training_args.bin").write_bytes(b"not read")
    return hf


@pytest.mark.parametrize("shards,tied,extra", [(2, False, False), (3, True, False), (1, False, True)])
def test_hf_pytorch_model_bin_folders_convert_with_config_json(tmp_path, shards, tied, extra):
    """pytorch_model.bin (+ index when sharded), config.json giving the head count and rope_theta."""
    sd = weights()
    _hf_bin_folder(tmp_path / "src", shards=shards, tied=tied, extra_files=extra)
    info = detect.describe(tmp_path / "src")
    assert (info.declared_by, info.declared["rope_theta"], info.declared["n_heads"]) == ("config.json", 500000.0, 4)
    assert len(info.model) == len(sd)
    p = convert(tmp_path / "src", tmp_path / "out.pt", "--to", "torch")  # no --config: config.json has the heads
    assert p.returncode == 0, p.stderr
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    if tied:
        sd["output.weight"] = sd["tok_embeddings.weight"]
    assert out.keys() == sd.keys() and all(torch.equal(out[k], sd[k]) for k in sd)


def test_rope_scaling_the_output_does_not_carry_is_said(tmp_path):
    from ..checkpoints import write_hf

    write_hf(tmp_path / "src", weights())
    config = json.loads((tmp_path / "src" / "config.json").read_text())
    (tmp_path / "src" / "config.json").write_text(
        json.dumps({**config, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    )
    p = convert(tmp_path / "src", tmp_path / "meta", "--to", "meta", "--format", "json")
    assert p.returncode == 0, p.stderr
    notes = json.loads(p.stdout)["notes"]
    assert any("RoPE scaling (llama3, factor 8.0) is not written to the output's params.json" in n for n in notes)
