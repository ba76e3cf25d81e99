"""Llama 3.1's RoPE frequency scaling (model_args.rope_scaling_*, llama.rope_freqs): the
published rule, written here once more the way Meta's reference states it (a loop over the
frequencies with its three bands), against the trainer's vectorised form; and the checkpoint
configs that declare it (HF rope_scaling 'llama3', Meta use_scaled_rope) agreeing with it."""

import math

import pytest
import torch

from titan_train.checkpoint.formats import fit
from titan_train.config.model_args import ModelArgs
from titan_train.models.llama import Transformer, rope_freqs, rope_tables

LLAMA31_8B_HEAD = dict(d_model=4096, n_heads=32, rope_theta=500000.0, max_seq_len=64)


def _published(freqs, factor=8.0, low=1.0, high=4.0, original=8192):
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out)


def test_unset_factor_is_plain_rope():
    args = ModelArgs(**LLAMA31_8B_HEAD)
    want = 1.0 / (500000.0 ** (torch.arange(0, 128, 2).float() / 128))
    assert torch.equal(rope_freqs(args), want)


@pytest.mark.parametrize(
    "factor,low,high,original", [(8.0, 1.0, 4.0, 8192), (32.0, 1.0, 4.0, 8192), (4.0, 2.0, 8.0, 4096)]
)
def test_scaled_frequencies_follow_the_published_rule(factor, low, high, original):
    args = ModelArgs(
        **LLAMA31_8B_HEAD,
        rope_scaling_factor=factor,
        rope_low_freq_factor=low,
        rope_high_freq_factor=high,
        rope_original_seq_len=original,
    )
    plain = rope_freqs(ModelArgs(**LLAMA31_8B_HEAD))
    scaled = rope_freqs(args)
    torch.testing.assert_close(scaled, _published(plain, factor, low, high, original), rtol=1e-6, atol=0)
    assert scaled[0] == plain[0]  # the highest frequency is kept
    assert scaled[-1] == pytest.approx(plain[-1].item() / factor)  # the lowest is divided by the factor
    mid = (scaled != plain) & (~torch.isclose(scaled, plain / factor))
    assert mid.any()  # the blended band exists for these shapes


def test_a_scaled_model_builds_its_table_from_the_scaled_frequencies():
    args = ModelArgs(d_model=64, n_heads=2, n_layers=1, vocab_size=32, max_seq_len=16, rope_theta=500000.0)
    scaled = ModelArgs(**{**args.__dict__, "rope_scaling_factor": 8.0, "rope_original_seq_len": 16})
    model = Transformer(scaled)
    model.init_weights(seed=0)
    assert torch.equal(model.rope, rope_tables(scaled))
    assert not torch.allclose(model.rope, rope_tables(args))
    assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 32)


def test_hf_config_written_and_read_back_declares_the_same_scaling():
    args = ModelArgs(**LLAMA31_8B_HEAD, rope_scaling_factor=8.0)
    hf = fit.to_hf_config(args, "bfloat16")
    assert hf["rope_scaling"] == {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    declared = fit.from_hf_config(hf)
    assert declared["rope_llama3"] == fit.llama3_scaling_of(args)
    assert fit.scaling_differs(declared, args) == ""
    plain = ModelArgs(**LLAMA31_8B_HEAD)
    assert fit.to_hf_config(plain, "bfloat16")["rope_scaling"] is None
    assert "the model has none" in fit.scaling_differs(declared, plain)
    assert "declares no scaling" in fit.scaling_differs({}, args)
    assert "not implement" in fit.scaling_differs({"rope_scaling": "yarn, factor 4"}, args)


def test_meta_params_use_scaled_rope_round_trip():
    args = ModelArgs(**LLAMA31_8B_HEAD, rope_scaling_factor=8.0)
    params = fit.to_meta_params(args)
    assert params["use_scaled_rope"] is True
    assert fit.from_meta_params(params)["rope_llama3"] == fit.llama3_scaling_of(args)
