"""Checkpoint formats, single process, on real files written by real torch: what describe()
detects for each format, what Source reads (slices, HF q/k), the q/k permutation checked on
attention outputs, the config fit, and the refusals (malicious pickles, truncated files)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from titan_train.checkpoint.formats import CheckpointError, UnsafeCheckpoint, dcp_io, detect, fit, naming, pickles
from titan_train.checkpoint.formats.sources import Source
from titan_train.checkpoint.initial_load import load_initial
from titan_train.config.model_args import ModelArgs, count_params
from titan_train.models.llama import Attention, Transformer, rope_tables

from ..checkpoints import (
    TINY,
    hf_permute,
    hf_state_dict,
    imports_torch,
    malicious_metadata,
    malicious_torch_file,
    runs_code_when_loaded,
    weights,
    write_deepspeed,
    write_hf,
    write_meta,
    write_trainer_dcp,
)

pytest.importorskip("safetensors")
N_PARAMS = count_params(TINY)["total"]
HEADS = {"n_heads": TINY.n_heads, "n_kv_heads": TINY.kv_heads}


def _read_all(path) -> dict[str, torch.Tensor]:
    info = detect.describe(path)
    source = Source(info, heads=HEADS)
    return {k: source.read(k) for k in source.keys()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k].to(b[k].dtype), b[k]) for k in a)


# ---- what describe() finds, per format ------------------------------------------------------


def test_trainer_folder_is_read_at_its_newest_step(tmp_path):
    sd = weights()
    write_trainer_dcp(tmp_path, sd, step=4)
    write_trainer_dcp(tmp_path, sd, step=12)
    (tmp_path / "step-16.tmp").mkdir()
    info = detect.describe(tmp_path)
    assert (info.format, info.root.name, info.step) == ("dcp", "step-12", 12)
    assert info.keymap.naming == naming.OURS and info.keymap.prefixes == ["model."]
    assert info.has_optimizer and info.param_count == N_PARAMS and info.dtypes == {"float32": N_PARAMS}
    assert "2 complete save(s) (step-4, step-12)" in info.notes[0]
    assert any("progress.step" in n for n in info.notes)
    assert _same(_read_all(tmp_path), sd)


def test_reading_a_dcp_folder_tensor_by_tensor_reads_its_metadata_once(tmp_path, monkeypatch):
    """convert / initial_load read one tensor at a time; at 70B x 64 ranks `.metadata` is tens
    of MB, so re-reading it per tensor (DCP's default) would cost hours."""
    sd = weights()
    write_trainer_dcp(tmp_path, sd, step=2)
    reads = []
    real = dcp_io.SafeFileSystemReader.read_metadata
    monkeypatch.setattr(
        dcp_io.SafeFileSystemReader, "read_metadata", lambda self, *a, **k: reads.append(self) or real(self, *a, **k)
    )
    assert _same(_read_all(tmp_path), sd) and len(sd) > 10
    assert len(reads) == 1


def test_legacy_trainer_layout_and_model_only_dcp(tmp_path):
    legacy = write_trainer_dcp(tmp_path / "a", weights(), step=3, legacy=True)
    info = detect.describe(legacy)
    assert info.keymap.prefixes == ["train.model."] and info.has_optimizer and info.step == 3
    bare = write_trainer_dcp(tmp_path / "b", weights(), step=1, optimizer=False)
    info = detect.describe(bare)
    assert not info.has_optimizer and info.param_count == N_PARAMS


def test_legacy_layout_cannot_resume_but_starts_a_run_via_initial_load_path(tmp_path):
    """A step folder from before issue 8 (train.model.*): resuming it is refused with the way
    out, and that way out (initial_load_path, with the optimizer) loads its weights and moments."""
    from titan_train.checkpoint import manager as checkpoint
    from titan_train.components.optim import OptimizerParts

    sd = weights()
    legacy = write_trainer_dcp(tmp_path, sd, step=3, legacy=True)
    with pytest.raises(CheckpointError, match=r"old layout \(train.model.\*\).*initial_load_path = "):
        checkpoint.load(legacy, {})
    model = Transformer(TINY)
    model.init_weights(99)
    optim = OptimizerParts([model], lambda params: torch.optim.AdamW(params, lr=0.0))
    message = load_initial([model], legacy, args=TINY, optimizers=optim)
    assert message.endswith(f"{len(sd)} tensors + optimizer state")
    assert _same({k: v.detach() for k, v in model.state_dict().items()}, sd)
    saved = dcp_io.load_everything(legacy)["train"]["optim"]["state"]
    state = optim.state_dict()
    fqn = "layers.1.feed_forward.w2.weight"
    assert saved[fqn]["exp_avg"].abs().sum() > 0
    assert torch.equal(state[f"state.{fqn}.exp_avg"], saved[fqn]["exp_avg"])
    assert torch.equal(state[f"state.{fqn}.exp_avg_sq"], saved[fqn]["exp_avg_sq"])


def test_torch_save_with_wrapper_prefixes_and_training_state(tmp_path):
    sd = weights()
    model = Transformer(TINY)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
    opt.step()
    torch.save(
        {"model": {f"module._orig_mod.{k}": v for k, v in sd.items()}, "optimizer": opt.state_dict(), "epoch": 3},
        tmp_path / "ckpt.pt",
    )
    info = detect.describe(tmp_path / "ckpt.pt")
    assert info.format == "torch" and info.step == 3 and info.has_optimizer
    assert info.keymap.prefixes == ["model.module."]
    assert set(info.keymap.wrappers) == {"_orig_mod.", "module."}
    assert info.param_count == N_PARAMS
    assert _same(_read_all(tmp_path / "ckpt.pt"), sd)


@pytest.mark.parametrize("shards", [1, 3])
def test_hf_safetensors_single_file_and_index(tmp_path, shards):
    sd = weights()
    write_hf(tmp_path, sd, shards=shards, dtype=torch.bfloat16)
    info = detect.describe(tmp_path)
    assert info.format == "hf" and info.keymap.naming == naming.HF
    assert info.dtypes == {"bfloat16": N_PARAMS} and not info.has_optimizer
    assert info.declared["n_heads"] == 4 and info.declared["n_kv_heads"] == 2 and info.declared_by == "config.json"
    assert set(info.keymap.rope.values()) == {"n_heads", "n_kv_heads"}
    assert len(info.files) == (1 if shards == 1 else shards + 1)
    assert _same(_read_all(tmp_path), {k: v.to(torch.bfloat16) for k, v in sd.items()})


def test_hf_tied_embeddings_fill_the_output_weight(tmp_path):
    sd = weights()
    sd["output.weight"] = sd["tok_embeddings.weight"].clone()
    write_hf(tmp_path, sd)
    hf_files = tmp_path / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(hf_files))
    del tensors["lm_head.weight"]
    save_file(tensors, str(hf_files))
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    assert _same(_read_all(tmp_path), sd)


@pytest.mark.parametrize("llama3", [False, True])
def test_meta_model_parallel_shards_are_merged(tmp_path, llama3):
    sd = weights()
    write_meta(tmp_path, sd, shards=2, llama3=llama3)
    info = detect.describe(tmp_path / "consolidated.01.pth")
    assert info.format == "meta" and info.keymap.naming == naming.OURS
    assert info.param_count == N_PARAMS and info.keymap.ignored == ["rope.freqs"]
    assert info.declared["n_heads"] == 4 and "vocab_size" not in info.declared  # LLaMA 2 writes -1
    assert info.tensors["tok_embeddings.weight"].shape == (64, 32)
    assert _same(_read_all(tmp_path), sd)


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_folder(tmp_path, stage):
    sd = weights()
    write_deepspeed(tmp_path, sd, step=5, stage=stage)
    info = detect.describe(tmp_path)
    assert (info.format, info.step, info.deepspeed_stage, info.has_optimizer) == ("deepspeed", 5, stage, True)
    assert info.root.name == "global_step5" and info.param_count == N_PARAMS
    if stage == 2:
        assert info.dtypes == {"bfloat16": N_PARAMS}
        assert _same(_read_all(tmp_path), {k: v.to(torch.bfloat16) for k, v in sd.items()})
    else:
        with pytest.raises(CheckpointError) as err:
            Source(info)
        assert "ZeRO-3" in str(err.value) and "zero_to_fp32.py" in err.value.fix


def test_describe_reads_no_tensor_data_and_needs_no_torch(tmp_path):
    """The doctor path: metadata only, and torch is never imported."""
    write_hf(tmp_path / "hf", weights())
    write_trainer_dcp(tmp_path / "dcp", weights(), step=2)
    torch.save(weights(), tmp_path / "w.pt")
    assert not imports_torch(
        "from titan_train.checkpoint.formats import detect\n"
        f"for p in ['{tmp_path}/hf', '{tmp_path}/dcp', '{tmp_path}/w.pt']: detect.describe(p)"
    )


# ---- sliced reads and the q/k permutation ------------------------------------------------------


@pytest.mark.parametrize("fmt", ["hf", "meta", "torch", "hf-bin"])
def test_slices_equal_the_same_slice_of_the_whole_weight(tmp_path, fmt):
    sd = weights()
    if fmt == "hf":
        write_hf(tmp_path, sd)
    elif fmt == "hf-bin":  # transformers' save_pretrained(safe_serialization=False), two shards + index
        hf, files = hf_state_dict(sd), ("pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin")
        names = list(hf)
        for i, file in enumerate(files):
            torch.save({n: hf[n] for n in names[i::2]}, tmp_path / file)
        (tmp_path / "pytorch_model.bin.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": {n: files[i % 2] for i, n in enumerate(names)}})
        )
    elif fmt == "meta":
        write_meta(tmp_path, sd, shards=2)
    else:
        torch.save(sd, tmp_path / "w.pt")
    source = Source(detect.describe(tmp_path), heads=HEADS)
    g = torch.Generator().manual_seed(0)
    for key in (
        "layers.1.attention.wq.weight",
        "layers.0.attention.wk.weight",
        "layers.0.feed_forward.w2.weight",
        "tok_embeddings.weight",
    ):
        rows, cols = sd[key].shape
        for _ in range(5):
            r0 = int(torch.randint(0, rows - 1, (1,), generator=g))
            r1 = int(torch.randint(r0 + 1, rows + 1, (1,), generator=g))
            c0 = int(torch.randint(0, cols - 1, (1,), generator=g))
            index = (slice(r0, r1), slice(c0, cols))
            assert torch.equal(source.read(key, index), sd[key][index]), (key, index)


def _hf_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads, theta):
    """LLaMA attention the HF way: rotate_half RoPE on (cos, sin) duplicated over both halves."""
    bsz, seq, _ = x.shape
    head_dim = wq.shape[0] // n_heads
    q = (x @ wq.T).view(bsz, seq, n_heads, head_dim).transpose(1, 2)
    k = (x @ wk.T).view(bsz, seq, n_kv_heads, head_dim).transpose(1, 2)
    v = (x @ wv.T).view(bsz, seq, n_kv_heads, head_dim).transpose(1, 2)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]

    def rotate_half(t):
        return torch.cat([-t[..., head_dim // 2 :], t[..., : head_dim // 2]], dim=-1)

    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(n_heads // n_kv_heads, dim=1)
    v = v.repeat_interleave(n_heads // n_kv_heads, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2).reshape(bsz, seq, -1) @ wo.T


@pytest.mark.parametrize("n_heads,n_kv_heads", [(4, 4), (8, 2)])
def test_qk_permutation_keeps_the_attention_output(n_heads, n_kv_heads):
    """Our attention with Meta-order weights == HF's attention with the permuted weights, and
    the inverse permutation gives the original weights back exactly."""
    args = ModelArgs(d_model=64, n_heads=n_heads, n_kv_heads=n_kv_heads, max_seq_len=16)
    torch.manual_seed(0)
    attn = Attention(args)
    x = torch.randn(2, 10, 64)
    ours = attn(x, rope_tables(args)[:, :10])
    wq_hf = naming.to_hf_rows(attn.wq.weight.detach(), n_heads)
    wk_hf = naming.to_hf_rows(attn.wk.weight.detach(), n_kv_heads)
    assert torch.equal(wq_hf, hf_permute(attn.wq.weight.detach(), n_heads))
    theirs = _hf_attention(
        x, wq_hf, wk_hf, attn.wv.weight.detach(), attn.wo.weight.detach(), n_heads, n_kv_heads, args.rope_theta
    )
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)
    unpermuted = _hf_attention(
        x,
        attn.wq.weight.detach(),
        attn.wk.weight.detach(),
        attn.wv.weight.detach(),
        attn.wo.weight.detach(),
        n_heads,
        n_kv_heads,
        args.rope_theta,
    )
    assert (unpermuted - ours).abs().max() > 1e-3  # without the permutation the outputs differ
    assert torch.equal(naming.from_hf_rows(wq_hf, n_heads), attn.wq.weight.detach())
    assert torch.equal(naming.from_hf_rows(wk_hf, n_kv_heads), attn.wk.weight.detach())


def test_hf_checkpoint_loaded_by_the_trainer_gives_the_native_logits(tmp_path):
    sd = weights()
    write_hf(tmp_path, sd)
    native = Transformer(TINY)
    native.load_state_dict(sd)
    loaded = Transformer(TINY)
    loaded.init_weights(99)
    message = load_initial([loaded], tmp_path, args=TINY)
    assert "HF names mapped, q/k un-permuted" in message
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    assert torch.equal(loaded(tokens), native(tokens))


# ---- fit to the config -------------------------------------------------------------------------


def test_vocab_mismatch_names_the_field_with_the_issue_example(tmp_path):
    ckpt_args = ModelArgs(vocab_size=32000, d_model=16, n_layers=1, n_heads=2, multiple_of=16, max_seq_len=16)
    cfg_args = ModelArgs(vocab_size=32001, d_model=16, n_layers=1, n_heads=2, multiple_of=16, max_seq_len=16)
    torch.save(weights(ckpt_args), tmp_path / "w.pt")
    info = detect.describe(tmp_path / "w.pt")
    result = fit.compare(info.model, cfg_args, fit.expected_shapes(cfg_args))
    assert [(d.field, d.checkpoint, d.config) for d in result.fields] == [("vocab_size", 32000, 32001)]
    assert result.fields[0].fix(16) == "set [model] vocab_size = 32000"
    assert {(i.key, i.field) for i in result.keys} == {
        ("tok_embeddings.weight", "vocab_size"),
        ("output.weight", "vocab_size"),
    }
    model = Transformer(cfg_args)
    with pytest.raises(
        CheckpointError,
        match=r"vocab_size: checkpoint 32000, config 32001 .*"
        r"set \[model\] vocab_size = 32000",
    ):
        load_initial([model], tmp_path / "w.pt", args=cfg_args)


def test_layers_heads_and_ffn_width_are_named():
    ckpt = ModelArgs(vocab_size=64, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, multiple_of=64, max_seq_len=16)
    cfg = ModelArgs(vocab_size=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, multiple_of=16, max_seq_len=16)
    found = {k: detect.TensorInfo(v, "float32") for k, v in fit.expected_shapes(ckpt).items()}
    result = fit.compare(found, cfg, fit.expected_shapes(cfg))
    by_field = {d.field: d for d in result.fields}
    assert by_field["n_layers"].checkpoint == 3 and by_field["n_kv_heads"].checkpoint == 2
    assert by_field["ffn_dim"].checkpoint == ckpt.ffn_dim
    settings = by_field["ffn_dim"].settings(64, 16)
    assert fit.ffn_width(64, settings["multiple_of"], settings.get("ffn_dim_multiplier")) == ckpt.ffn_dim
    assert {i.field for i in result.keys if i.kind == "unexpected"} == {"n_layers"}


@pytest.mark.parametrize("d_model,width", [(4096, 11008), (4096, 14336), (8192, 28672), (256, 768), (32, 100)])
def test_ffn_fields_reproduce_published_widths(d_model, width):
    """LLaMA-2 7B, LLaMA-3 8B, LLaMA-2 70B, the debug model, an odd one."""
    f = fit.ffn_fields_for(d_model, width)
    assert fit.ffn_width(d_model, f["multiple_of"], f.get("ffn_dim_multiplier")) == width


def test_rope_theta_difference_is_a_warning_not_a_shape_error(tmp_path):
    write_hf(tmp_path, weights())
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_theta": 500000.0}))
    info = detect.describe(tmp_path)
    result = fit.compare(info.model, TINY, fit.expected_shapes(TINY), info.declared, info.declared_by)
    assert [(d.field, d.numeric) for d in result.fields] == [("rope_theta", True)]
    assert result.ok


# ---- never execute code from a checkpoint -----------------------------------------------------


def test_malicious_torch_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = malicious_torch_file(tmp_path / "evil.pt", marker)
    assert runs_code_when_loaded(f"import torch; torch.load('{path}', weights_only=False)", marker)
    with pytest.raises(UnsafeCheckpoint, match="posix.system"):
        detect.describe(path)
    with pytest.raises(UnsafeCheckpoint):
        load_initial([Transformer(TINY)], path, args=TINY)
    from titan_train.checkpoint.formats.sources import safe_torch_load

    with pytest.raises(UnsafeCheckpoint):
        safe_torch_load(path)
    assert not marker.exists()


def test_malicious_dcp_metadata_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    folder = malicious_metadata(tmp_path / "ckpt", marker)
    control = f"import torch.distributed.checkpoint as dcp\ndcp.FileSystemReader('{folder}').read_metadata()"
    assert runs_code_when_loaded(control, marker)
    with pytest.raises(UnsafeCheckpoint, match=r"posix\.system.*Refused"):
        detect.describe(folder)
    from titan_train.checkpoint.formats import dcp_io

    with pytest.raises(UnsafeCheckpoint, match="not a DCP metadata class"):
        dcp_io.SafeFileSystemReader(str(folder)).read_metadata()
    with pytest.raises(UnsafeCheckpoint):
        dcp_io.load_everything(folder)
    with pytest.raises(UnsafeCheckpoint):  # the trainer's initial_load_path
        load_initial([Transformer(TINY)], folder, args=TINY)
    assert not marker.exists()


def test_malicious_entry_inside_a_dcp_shard_is_refused(tmp_path):
    """DCP stores non-tensor entries as pickles inside the .distcp files and torch's planner
    loads them with weights_only=False; our planner does not."""
    import torch.distributed.checkpoint as dcp

    from titan_train.checkpoint.formats import dcp_io

    from ..checkpoints import Payload

    marker = tmp_path / "pwned"
    folder = tmp_path / "ckpt"
    dcp.save({"model": weights(), "extra": Payload(marker)}, checkpoint_id=str(folder), no_dist=True)
    control = (
        "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
        f"dcp_to_torch_save('{folder}', '{tmp_path}/out.pt')"
    )
    assert runs_code_when_loaded(control, marker)
    assert detect.describe(folder).param_count == N_PARAMS  # the metadata itself is clean
    with pytest.raises(UnsafeCheckpoint, match="DCP entry extra"):
        dcp_io.load_everything(folder)
    assert not marker.exists()


def test_our_tensor_allow_list_is_within_torchs_weights_only_list():
    from torch import _weights_only_unpickler as w

    allowed = set(w._get_allowed_globals()) | {"torch.serialization._get_layout"}
    assert set(pickles.TORCH_SAFE_GLOBALS) <= allowed


# ---- truncated, garbage, incomplete --------------------------------------------------------------


def _truncate(path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize(
    "case",
    [
        "torch-truncated",
        "torch-garbage",
        "safetensors-truncated",
        "safetensors-garbage",
        "dcp-missing-shard",
        "dcp-truncated-shard",
        "dcp-no-metadata",
        "meta-missing-shard",
        "hf-index-missing-shard",
        "dcp-metadata-truncated",
        "empty-folder",
    ],
)
def test_broken_checkpoints_give_one_line_errors(tmp_path, case):
    sd = weights()
    if case.startswith("torch"):
        path = tmp_path / "w.pt"
        torch.save(sd, path)
        _truncate(path, 0.6) if case == "torch-truncated" else path.write_bytes(os.urandom(4096))
    elif case.startswith("safetensors"):
        write_hf(tmp_path, sd)
        path = tmp_path / "model.safetensors"
        _truncate(path, 0.7) if case == "safetensors-truncated" else path.write_bytes(b"\xff" * 64)
    elif case.startswith("dcp"):
        path = tmp_path / "ckpt"
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": sd}, checkpoint_id=str(path), no_dist=True)
        shard = next(path.glob("*.distcp"))
        if case == "dcp-missing-shard":
            shard.unlink()
        elif case == "dcp-truncated-shard":
            _truncate(shard, 0.5)
        elif case == "dcp-no-metadata":
            (path / ".metadata").unlink()
        else:
            _truncate(path / ".metadata", 0.5)
    elif case == "meta-missing-shard":
        write_meta(tmp_path, sd, shards=3)
        (tmp_path / "consolidated.01.pth").unlink()
        path = tmp_path
    elif case == "hf-index-missing-shard":
        write_hf(tmp_path, sd, shards=3)
        (tmp_path / "model-00002-of-00003.safetensors").unlink()
        path = tmp_path
    else:
        path = tmp_path
    with pytest.raises(CheckpointError) as err:
        detect.describe(path)
    message = str(err.value)
    assert "\n" not in message and tmp_path.name in message
    expected = {
        "torch-truncated": "truncated",
        "torch-garbage": "not a torch.save archive",
        "safetensors-truncated": "truncated",
        "safetensors-garbage": "not a safetensors file",
        "dcp-missing-shard": "is missing",
        "dcp-truncated-shard": "is truncated",
        "dcp-no-metadata": "no .metadata",
        "meta-missing-shard": "consolidated.01.pth is missing",
        "hf-index-missing-shard": "model-00002-of-00003.safetensors listed in the index is missing",
        "dcp-metadata-truncated": "truncated or not a pickle",
        "empty-folder": "no checkpoint found",
    }[case]
    assert expected in message, message


@pytest.mark.parametrize("gathered", [True, False])
def test_hf_trainer_deepspeed_folder_prefers_the_full_weights_beside_it(tmp_path, gathered):
    """HF Trainer + DeepSpeed ZeRO-3 checkpoint-N/: latest + global_stepN/ and model.safetensors.
    Gathered (stage3_gather_16bit_weights_on_model_save) the safetensors hold the model; not
    gathered they hold empty tensors and the way out is zero_to_fp32.py."""
    sd = weights()
    write_deepspeed(tmp_path, sd, stage=3)
    if gathered:
        write_hf(tmp_path, sd)
    else:
        from safetensors.torch import save_file

        save_file({k: torch.empty(0) for k in hf_state_dict(sd)}, str(tmp_path / "model.safetensors"))
    info = detect.describe(tmp_path)
    if gathered:
        assert info.format == "hf" and info.param_count == sum(v.numel() for v in sd.values())
        assert "DeepSpeed" in info.notes[0]
        source = Source(info, heads=HEADS)
        assert all(torch.equal(source.read(k), sd[k]) for k in sd)
    else:
        assert (info.format, info.deepspeed_stage) == ("deepspeed", 3)


def test_hf_config_of_transformers_5_nests_rope_theta_and_scaling():
    """transformers 5 save_pretrained writes rope_parameters {rope_theta, rope_type, ...} and null
    top-level rope_theta / rope_scaling; 4.x releases (the published LLaMA repos) the reverse."""
    v5 = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rope_theta": None,
        "rope_scaling": None,
        "rope_parameters": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    }
    assert fit.from_hf_config(v5)["rope_theta"] == 500000.0
    assert fit.from_hf_config(v5)["rope_scaling"] == "llama3, factor 8.0"
    plain = fit.from_hf_config({**v5, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}})
    assert plain["rope_theta"] == 500000.0 and "rope_scaling" not in plain
    v4 = {"hidden_size": 64, "rope_theta": 10000.0, "rope_scaling": None}
    assert fit.from_hf_config(v4) == {"d_model": 64, "rope_theta": 10000.0}


def test_initial_load_says_when_rope_theta_or_scaling_differ(tmp_path):
    """An HF LLaMA 3.1 (rope_theta 500000 + llama3 rope_scaling) loaded into a [model] with the
    default rope_theta: it loads (shapes agree), and the trainer's load line says so."""
    sd = weights()
    write_hf(tmp_path, sd)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                **config,
                "rope_theta": 500000.0,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
            }
        )
    )
    model = Transformer(TINY)
    message = load_initial([model], tmp_path, args=TINY)
    assert torch.equal(model.state_dict()["layers.0.attention.wq.weight"], sd["layers.0.attention.wq.weight"])
    warnings = [ln for ln in message.splitlines() if "warning:" in ln]
    assert len(warnings) == 2
    assert "rope_theta: checkpoint 500000.0, config 10000.0" in warnings[0] and "rope_theta = 500000.0" in warnings[0]
    assert "declares llama3 RoPE scaling (factor 8, low 1, high 4, original 8192) and the model has none" in warnings[1]
    assert "set model.rope_scaling_factor to match" in warnings[1]
    scaled = dataclasses.replace(TINY, rope_theta=500000.0, rope_scaling_factor=8.0)
    assert "warning" not in load_initial([Transformer(scaled)], tmp_path, args=scaled)
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert "warning" not in load_initial([Transformer(TINY)], tmp_path, args=TINY)


@pytest.mark.parametrize("llama3", [False, True])
def test_meta_shards_without_params_json_merge_the_embedding_right(tmp_path, llama3):
    """params.json lost or not copied: LLaMA 3 splits tok_embeddings on dim 0, LLaMA 2 on dim 1;
    the replicated final norm gives the model width that tells them apart."""
    sd = weights()
    write_meta(tmp_path, sd, shards=2, llama3=llama3)
    (tmp_path / "params.json").unlink()
    info = detect.describe(tmp_path)
    assert info.tensors["tok_embeddings.weight"].shape == (64, 32)
    assert _same(_read_all(tmp_path), sd)
