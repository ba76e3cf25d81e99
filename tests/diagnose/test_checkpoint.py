"""`titan-doctor diagnose --checkpoint PATH [--config FILE]` as users run it: findings,
fixes, JSON, exit codes, refusals, one-line errors."""

from __future__ import annotations

import pytest
import torch

from titan_train.config.model_args import ModelArgs

from ..checkpoints import (
    imports_torch,
    malicious_metadata,
    malicious_torch_file,
    weights,
    write_deepspeed,
    write_hf,
    write_trainer_dcp,
)
from .conftest import run_cli, run_json

pytest.importorskip("safetensors")


def _config(path, **model) -> str:
    fields = {
        "vocab_size": 64,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "multiple_of": 16,
        "max_seq_len": 16,
        **model,
    }
    path.write_text("[model]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items()))
    return str(path)


def test_help_and_list_checks_mention_the_checkpoint_check():
    p = run_cli("--help")
    assert "--checkpoint PATH" in p.stdout and "--config" in p.stdout and "DeepSpeed" in p.stdout
    p = run_cli("--list-checks")
    assert any(
        ln.startswith("ckpt ") and ln.endswith("(--checkpoint PATH [--config CONFIG])") for ln in p.stdout.splitlines()
    )
    assert any(
        ln.startswith("memory ") and ln.endswith("(--config CONFIG, no --checkpoint)") for ln in p.stdout.splitlines()
    )


def test_trainer_folder_report(tmp_path):
    write_trainer_dcp(tmp_path, weights(), step=6)
    rc, rows = run_json("--checkpoint", str(tmp_path))
    assert rc == 0 and set(rows) == {"ckpt.format", "ckpt.prefix.container"}
    data = rows["ckpt.format"]["data"]
    assert (data["format"], data["step"], data["optimizer"], data["prefixes"], data["naming"]) == (
        "dcp",
        6,
        True,
        ["model."],
        "torchtitan/Meta",
    )
    assert data["parameters"] == sum(v.numel() for v in weights().values()) and data["dtypes"] == {
        "float32": data["parameters"]
    }
    assert rows["ckpt.format"]["title"].startswith("DCP checkpoint")
    assert "optimizer state yes; step 6" in rows["ckpt.format"]["title"]


def test_wrapper_prefixes_warn_with_the_fix_and_fail_under_strict(tmp_path):
    torch.save({f"_orig_mod.{k}": v for k, v in weights().items()}, tmp_path / "compiled.pt")
    rc, rows = run_json("--checkpoint", str(tmp_path / "compiled.pt"))
    assert rc == 0 and rows["ckpt.prefix"]["status"] == "warn"
    assert "_orig_mod. (torch.compile)" in rows["ckpt.prefix"]["title"]
    assert (
        "titan-doctor convert" in rows["ckpt.prefix"]["fix"]
        and "consume_prefix_in_state_dict_if_present" in rows["ckpt.prefix"]["fix"]
    )
    rc, _ = run_json("--checkpoint", str(tmp_path / "compiled.pt"), "--strict")
    assert rc == 1


def test_hf_naming_is_reported_with_how_to_use_it(tmp_path):
    write_hf(tmp_path, weights(), shards=2)
    rc, rows = run_json("--checkpoint", str(tmp_path))
    assert rc == 0 and rows["ckpt.naming"]["status"] == "info"
    assert "initial_load_path" in rows["ckpt.naming"]["fix"]
    assert rows["ckpt.format"]["data"]["declared"]["n_kv_heads"] == 2


def test_config_mismatch_names_the_field_vocab_32000_vs_32001(tmp_path):
    args = ModelArgs(vocab_size=32000, d_model=16, n_layers=1, n_heads=2, multiple_of=16, max_seq_len=16)
    torch.save(weights(args), tmp_path / "w.pt")
    cfg = _config(tmp_path / "c.toml", vocab_size=32001, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2)
    rc, rows = run_json("--checkpoint", str(tmp_path / "w.pt"), "--config", cfg)
    assert rc == 1
    row = rows["ckpt.config.vocab_size"]
    assert (
        row["status"] == "fail"
        and row["title"] == "vocab_size: checkpoint 32000, config 32001 (tok_embeddings.weight [32000, 16])"
    )
    assert (
        row["fix"].startswith(f"set [model] vocab_size = 32000 in {cfg}")
        and "--set model.vocab_size=32000" in row["fix"]
    )
    shapes = rows["ckpt.config.shape"]
    assert "tok_embeddings.weight: checkpoint [32000, 16], model [32001, 16]  <- [model] vocab_size" in shapes["detail"]
    assert shapes["data"]["keys"] == ["tok_embeddings.weight", "output.weight"]
    text = run_cli("--checkpoint", str(tmp_path / "w.pt"), "--config", cfg).stdout
    assert "[x] vocab_size: checkpoint 32000, config 32001" in text and "fix: set [model] vocab_size = 32000" in text


def test_missing_layers_and_width_are_listed_by_field(tmp_path):
    args = ModelArgs(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, multiple_of=64, max_seq_len=16)
    torch.save(weights(args), tmp_path / "w.pt")
    rc, rows = run_json("--checkpoint", str(tmp_path / "w.pt"), "--config", _config(tmp_path / "c.toml", n_layers=4))
    assert rc == 1
    assert rows["ckpt.config.n_layers"]["title"].startswith("n_layers: checkpoint 3, config 4")
    assert "multiple_of / ffn_dim_multiplier" in rows["ckpt.config.ffn_dim"]["title"]
    missing = rows["ckpt.config.missing"]
    assert missing["data"]["fields"] == ["n_layers"] and "layers.3.attention.wq.weight [32, 32]" in missing["detail"]


def test_config_that_fits_is_ok(tmp_path):
    write_hf(tmp_path, weights())
    rc, rows = run_json("--checkpoint", str(tmp_path), "--config", _config(tmp_path / "c.toml"))
    assert (
        rc == 0 and rows["ckpt.config"]["status"] == "ok" and "all 21 weights present" in rows["ckpt.config"]["title"]
    )


def test_usage_errors_and_missing_path(tmp_path):
    # --config alone is the memory plan (issue 11), which needs its layout; memory-plan options do
    # not mix with --checkpoint, where --config is the model to compare against
    p = run_cli("--config", _config(tmp_path / "c.toml"))
    assert p.returncode == 2 and "--config needs --world-size N" in p.stderr
    p = run_cli("--checkpoint", str(tmp_path), "--config", _config(tmp_path / "c.toml"), "--world-size", "8")
    assert p.returncode == 2 and "--world-size belong to the memory plan (--config without --checkpoint)" in p.stderr
    p = run_cli("--check", "ckpt")
    assert p.returncode == 2 and "the checkpoint check needs --checkpoint PATH" in p.stderr
    p = run_cli("--checkpoint", str(tmp_path), "--config", str(tmp_path / "none.toml"))
    assert p.returncode == 2 and "config file not found" in p.stderr
    rc, rows = run_json("--checkpoint", str(tmp_path / "nope"))
    assert rc == 1 and rows["ckpt.read"]["title"].endswith("nope: no such file or folder")


def test_deepspeed_zero3_fails_with_the_recovery_script(tmp_path):
    write_deepspeed(tmp_path, weights(), step=9, stage=3)
    rc, rows = run_json("--checkpoint", str(tmp_path))
    assert rc == 1 and rows["ckpt.format"]["data"]["step"] == 9
    assert "zero_to_fp32.py" in rows["ckpt.deepspeed"]["fix"]


@pytest.mark.parametrize("kind", ["torch", "dcp"])
def test_malicious_checkpoints_are_refused_and_nothing_runs(tmp_path, kind):
    marker = tmp_path / "pwned"
    path = (
        malicious_torch_file(tmp_path / "evil.pt", marker)
        if kind == "torch"
        else malicious_metadata(tmp_path / "evil", marker)
    )
    rc, rows = run_json("--checkpoint", str(path))
    assert rc == 1 and rows["ckpt.safety"]["status"] == "fail" and "posix.system" in rows["ckpt.safety"]["title"]
    assert "Refused" in rows["ckpt.safety"]["title"] and rows["ckpt.safety"]["fix"]
    assert not marker.exists()


def test_truncated_checkpoint_is_one_line_not_a_traceback(tmp_path):
    torch.save(weights(), tmp_path / "w.pt")
    data = (tmp_path / "w.pt").read_bytes()
    (tmp_path / "w.pt").write_bytes(data[: len(data) // 2])
    p = run_cli("--checkpoint", str(tmp_path / "w.pt"))
    assert p.returncode == 1 and "Traceback" not in p.stdout + p.stderr
    assert "[x] " + str(tmp_path / "w.pt") + ": truncated torch.save archive" in p.stdout


def test_the_check_imports_no_torch_without_a_config(tmp_path):
    """Headers and metadata only: the check answers without paying for `import torch`."""
    write_hf(tmp_path / "hf", weights(), shards=2)
    write_trainer_dcp(tmp_path / "run", weights(), step=1)
    assert not imports_torch(
        "from pathlib import Path; from titan_doctor.diagnose import checkpoint\n"
        f"for p in ['{tmp_path}/hf', '{tmp_path}/run']: "
        "assert checkpoint.check(Path(p))[0].code == 'ckpt.format'"
    )


@pytest.mark.parametrize("fmt", ["hf", "meta"])
def test_rope_scaling_declared_by_the_checkpoint_is_a_warning(tmp_path, fmt):
    """LLaMA 3.1+: config.json rope_scaling {rope_type: llama3, factor: 8} / params.json
    use_scaled_rope; the trainer computes plain RoPE, so the user must hear about it."""
    import json

    from ..checkpoints import write_meta

    if fmt == "hf":
        write_hf(tmp_path, weights())
        config = json.loads((tmp_path / "config.json").read_text())
        config["rope_scaling"] = {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        }
        (tmp_path / "config.json").write_text(json.dumps(config))
    else:
        write_meta(tmp_path, weights(), shards=1)
        params = json.loads((tmp_path / "params.json").read_text())
        (tmp_path / "params.json").write_text(json.dumps({**params, "use_scaled_rope": True}))
    rc, rows = run_json("--checkpoint", str(tmp_path))
    assert rc == 0 and rows["ckpt.rope_scaling"]["status"] == "warn"
    assert "llama3" in rows["ckpt.rope_scaling"]["title"] and rows["ckpt.rope_scaling"]["fix"]
    if fmt == "hf":  # plain rope_scaling: null (LLaMA 2 config.json) is no finding
        config["rope_scaling"] = None
        (tmp_path / "config.json").write_text(json.dumps(config))
        rc, rows = run_json("--checkpoint", str(tmp_path))
        assert "ckpt.rope_scaling" not in rows


def test_pointing_at_one_shard_config_json_or_an_empty_folder(tmp_path):
    """What users pass by mistake: one shard of an HF sharded save (half a model alone), the
    folder's config.json, a tokenizer file, an empty folder: each gets the whole truth or a fix."""

    sd = weights()
    write_hf(tmp_path / "hf", sd, shards=2)
    (tmp_path / "hf" / "tokenizer_config.json").write_text("{}")
    rc, rows = run_json("--checkpoint", str(tmp_path / "hf" / "model-00001-of-00002.safetensors"))
    assert rc == 0 and rows["ckpt.format"]["data"]["parameters"] == sum(v.numel() for v in sd.values())
    assert "one shard of model.safetensors.index.json" in rows["ckpt.format"]["detail"]
    rc, rows = run_json("--checkpoint", str(tmp_path / "hf" / "config.json"))
    assert rc == 0 and rows["ckpt.format"]["data"]["format"] == "hf"
    rc, rows = run_json("--checkpoint", str(tmp_path / "hf" / "tokenizer_config.json"))
    assert rc == 1 and "not model weights" in rows["ckpt.read"]["title"] and rows["ckpt.read"]["fix"]
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "absent"):
        rc, rows = run_json("--checkpoint", str(path))
        assert rc == 1 and rows["ckpt.read"]["status"] == "fail" and rows["ckpt.read"]["fix"], rows


def test_lightning_checkpoint_fix_unwraps_dict_then_prefix(tmp_path):
    """PyTorch Lightning .ckpt: {"state_dict": {"model.layers...": t}, "optimizer_states": [...], ...}:
    sd['state_dict.model'] is not a key; the fix must be the dict, then the name prefix."""
    torch.save(
        {
            "epoch": 3,
            "global_step": 1200,
            "pytorch-lightning_version": "2.4.0",
            "state_dict": {f"model.{k}": v for k, v in weights().items()},
            "optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(2)}}, "param_groups": []}],
            "lr_schedulers": [{"last_epoch": 3}],
            "hyper_parameters": {"lr": 1e-3},
        },
        tmp_path / "last.ckpt",
    )
    rc, rows = run_json("--checkpoint", str(tmp_path / "last.ckpt"))
    assert rc == 0 and rows["ckpt.format"]["data"]["optimizer"] is True and rows["ckpt.format"]["data"]["step"] == 1200
    fix = rows["ckpt.prefix.container"]["fix"]
    assert "sd = sd['state_dict']" in fix and "consume_prefix_in_state_dict_if_present(sd, 'model.')" in fix
    assert "sd['state_dict.model']" not in fix


def test_weights_the_llama_has_no_place_for_are_never_dropped_silently(tmp_path):
    """A Qwen2-style HF checkpoint (LLaMA names plus q/k/v biases): diagnose warns, with --config
    lists them as unexpected keys, and convert and the trainer's initial load refuse it."""
    import json

    from safetensors.torch import load_file, save_file

    from titan_train.checkpoint.formats import CheckpointError
    from titan_train.checkpoint.initial_load import open_checked

    from ..checkpoints import REPO, TINY

    write_hf(tmp_path / "qwen", weights())
    sd = load_file(str(tmp_path / "qwen" / "model.safetensors"))
    for i in range(2):
        for p in "qkv":
            sd[f"model.layers.{i}.self_attn.{p}_proj.bias"] = torch.zeros(
                sd[f"model.layers.{i}.self_attn.{p}_proj.weight"].shape[0]
            )
    save_file(sd, str(tmp_path / "qwen" / "model.safetensors"))
    config = json.loads((tmp_path / "qwen" / "config.json").read_text())
    (tmp_path / "qwen" / "config.json").write_text(json.dumps({**config, "model_type": "qwen2"}))
    rc, rows = run_json("--checkpoint", str(tmp_path / "qwen"))
    assert rc == 0 and rows["ckpt.unmapped"]["status"] == "warn" and "'qwen2'" in rows["ckpt.unmapped"]["title"]
    assert len(rows["ckpt.unmapped"]["data"]["keys"]) == 6
    rc, rows = run_json("--checkpoint", str(tmp_path / "qwen"), "--config", _config(tmp_path / "c.toml"))
    assert rc == 1 and "model.layers.0.self_attn.q_proj.bias" in rows["ckpt.config.unexpected"]["data"]["keys"]
    with pytest.raises(CheckpointError, match="not in the model"):
        open_checked(tmp_path / "qwen", TINY)
    import subprocess
    import sys

    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "titan_doctor",
            "convert",
            str(tmp_path / "qwen"),
            str(tmp_path / "o.pt"),
            "--to",
            "torch",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1 and "would drop" in p.stderr and not (tmp_path / "o.pt").exists()
    # the plain LLaMA of the same layout has none of it
    write_hf(tmp_path / "llama", weights())
    rc, rows = run_json("--checkpoint", str(tmp_path / "llama"))
    assert rc == 0 and "ckpt.unmapped" not in rows
