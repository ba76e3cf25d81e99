"""LLaMA, readable top to bottom: RMSNorm, RoPE, grouped-query attention, SwiGLU.

The four ops Ascend fuses (norm, rope, attention, SwiGLU) are called through the `kernels`
the model is built with (kernels.py: the reference PyTorch ops, or torch_npu's on an NPU).
No parallelism in here. Heads are reshaped with -1 so the same code runs on tensor-parallel
shards (each holding n_heads / tp heads). The model is built on the `meta` device and
materialized after parallelization, so `init_weights` must fill every parameter and buffer.
A pipeline stage is this same model with the blocks of other stages deleted and, except on
the first / last stage, no embedding / head: parameter names never change.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from titan_train.config.model_args import ModelArgs
from titan_train.models.kernels import REFERENCE, Kernels
from titan_train.models.sharded_init import init_param_, stable_name


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, kernels: Kernels = REFERENCE):
        super().__init__()
        self.eps, self.kernels = eps, kernels
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.rms_norm(x, self.weight, self.eps)


def rope_freqs(args: ModelArgs, device=None) -> torch.Tensor:
    """The rotary frequencies of one head: theta^(-2i/d), scaled as Llama 3.1 does when
    `rope_scaling_factor` is set. Llama 3.1 keeps the high frequencies (wavelength under
    original_len / high_freq_factor), divides the low ones (over original_len /
    low_freq_factor) by the factor, and blends linearly in between."""
    head_dim = args.head_dim
    freqs = 1.0 / (args.rope_theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    factor = args.rope_scaling_factor
    if factor is None:
        return freqs
    low, high, original = args.rope_low_freq_factor, args.rope_high_freq_factor, args.rope_original_seq_len
    wavelen = 2 * math.pi / freqs
    smooth = ((original / wavelen - low) / (high - low)).clamp(0.0, 1.0)  # 0: low band, 1: high band
    return (1 - smooth) * freqs / factor + smooth * freqs


def rope_tables(args: ModelArgs, device=None) -> torch.Tensor:
    """cos and sin of the rotary angles, stacked: shape (2, max_seq_len, head_dim // 2)."""
    angles = torch.outer(torch.arange(args.max_seq_len, device=device).float(), rope_freqs(args, device))
    return torch.stack([angles.cos(), angles.sin()])


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, kernels: Kernels = REFERENCE):
        super().__init__()
        self.head_dim, self.kernels = args.head_dim, kernels
        self.wq = nn.Linear(args.d_model, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.d_model, args.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.d_model, args.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.d_model, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        rope = rope[:, :seq_len]
        q = self.wq(x).view(bsz, seq_len, -1, self.head_dim)
        k = self.wk(x).view(bsz, seq_len, -1, self.head_dim)
        v = self.wv(x).view(bsz, seq_len, -1, self.head_dim)
        q, k = self.kernels.rope(q, rope), self.kernels.rope(k, rope)
        out = self.kernels.attention(q, k, v)  # causal; grouped-query: a kv head serves n_heads / kv_heads
        return self.wo(out.reshape(bsz, seq_len, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, args: ModelArgs, kernels: Kernels = REFERENCE):
        super().__init__()
        self.kernels = kernels
        self.w1 = nn.Linear(args.d_model, args.ffn_dim, bias=False)
        self.w2 = nn.Linear(args.ffn_dim, args.d_model, bias=False)
        self.w3 = nn.Linear(args.d_model, args.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.kernels.swiglu(self.w1(x), self.w3(x)))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs, kernels: Kernels = REFERENCE):
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.d_model, args.norm_eps, kernels)
        self.attention = Attention(args, kernels)
        self.ffn_norm = RMSNorm(args.d_model, args.norm_eps, kernels)
        self.feed_forward = FeedForward(args, kernels)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, kernels: Kernels = REFERENCE):
        """`kernels`: kernels.for_device(device type), chosen once when the model is built."""
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.d_model)
        # A ModuleDict keyed "0".."N-1" keeps checkpoint keys stable (layers.0.attention...)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, args, kernels) for i in range(args.n_layers)})
        self.norm = RMSNorm(args.d_model, args.norm_eps, kernels)
        self.output = nn.Linear(args.d_model, args.vocab_size, bias=False)
        self.register_buffer(
            "rope",
            rope_tables(args, device=self.output.weight.device),
            persistent=False,
        )

    def forward(self, tokens: torch.Tensor, head: bool = True) -> torch.Tensor:
        """tokens (batch, seq) -> logits; on a later pipeline stage, hidden states in and out.
        head=False: the final norm's output, for a loss that applies `output` itself."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h, self.rope)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None and head else h

    def init_weights(self, seed: int) -> int:
        """Fill every parameter deterministically from (seed, parameter name), drawing only
        the shard this rank holds, so every mesh and pipeline stage starts from identical
        weights. Returns the number of random values this rank drew."""
        drawn = 0
        with torch.no_grad():
            self.rope.copy_(rope_tables(self.args, device=self.rope.device))
            for name, param in self.named_parameters():
                key = stable_name(name)
                drawn += init_param_(param, std=init_std(key, self.args), seed=seed, key=key)
        return drawn


def init_std(name: str, args: ModelArgs) -> float | None:
    """LLaMA-style init: norms 1 (None), embeddings N(0,1), projections into the residual
    stream scaled down with depth, everything else N(0, 0.02); all truncated at 3 std."""
    if name.endswith("norm.weight"):
        return None
    if name == "tok_embeddings.weight":
        return 1.0
    if name == "output.weight":
        return args.d_model**-0.5
    if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
        return 0.02 / math.sqrt(2 * args.n_layers)
    return 0.02
