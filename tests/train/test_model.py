"""The LLaMA model: real LLaMA-2 sizes from the shipped configs, built on meta."""

from __future__ import annotations

import torch

from titan_train.config import job as config
from titan_train.config.model_args import ModelArgs, count_params, flops_per_token
from titan_train.models.llama import Transformer

from .conftest import REPO


def test_shipped_configs_have_llama_sizes_without_allocating():
    want = {"llama_7b": 6_738_415_616, "llama_13b": 13_015_864_320, "llama_70b": 68_976_648_192}
    want |= {"llama3_8b": 8_030_261_248, "llama3_70b": 70_553_706_496}  # Llama 3.1's published counts
    for name, n in want.items():
        args = config.load(REPO / "configs" / f"{name}.toml").model
        with torch.device("meta"):
            model = Transformer(args)
        assert sum(p.numel() for p in model.parameters()) == n == count_params(args)["total"]
        assert all(p.is_meta for p in model.parameters())


def test_forward_shapes_gqa_and_deterministic_init():
    args = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=16, max_seq_len=16)
    models = []
    for _ in range(2):
        with torch.device("meta"):
            m = Transformer(args)
        m.to_empty(device="cpu")
        m.init_weights(seed=3)
        models.append(m)
    assert models[0].layers["0"].attention.wk.weight.shape == (16, 32)  # 2 kv heads x 8
    for (n, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters()):
        assert torch.equal(a, b), n
    tokens = torch.randint(0, 64, (3, 10))
    logits = models[0](tokens)
    assert logits.shape == (3, 10, 64)
    # causal: changing a later token never changes earlier logits
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 64
    assert torch.allclose(models[0](changed)[:, :7], logits[:, :7], atol=1e-5)
    assert not torch.allclose(models[0](changed)[:, 7:], logits[:, 7:])


def test_flops_per_token_counts_attention():
    args = ModelArgs()
    assert flops_per_token(args, 2048) - flops_per_token(args, 1024) == 12 * args.n_layers * args.d_model * 1024
