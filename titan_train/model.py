"""LLaMA, readable top to bottom: RMSNorm, RoPE, grouped-query attention, SwiGLU.

The four ops Ascend fuses (norm, rope, attention, SwiGLU) are called through the `kernels`
the model is built with (kernels.py: the reference PyTorch ops, or torch_npu's on an NPU).
No parallelism in here. Heads are reshaped with -1 so the same code runs on tensor-parallel
shards (each holding n_heads / tp heads). The model is built on the `meta` device and
materialized after parallelization, so `init_weights` must fill every parameter and buffer.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch
from torch import nn

from titan_train.kernels import REFERENCE, Kernels


@dataclass
class ModelArgs:
    """The shape of a LLaMA model (the [model] section of a trainer config)."""

    vocab_size: int = 2048
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 16
    n_kv_heads: int | None = None      # None: same as n_heads (no grouping)
    multiple_of: int = 256              # FFN hidden size is rounded up to this
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dim(self) -> int:
        """LLaMA's SwiGLU width: 2/3 of 4*d, times the multiplier, rounded up."""
        hidden = int(2 * (4 * self.d_model) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, kernels: Kernels = REFERENCE):
        super().__init__()
        self.eps, self.kernels = eps, kernels
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.rms_norm(x, self.weight, self.eps)


def rope_tables(head_dim: int, seq_len: int, theta: float, device=None) -> torch.Tensor:
    """cos and sin of the rotary angles, stacked: shape (2, seq_len, head_dim // 2)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), freqs)
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
            "rope", rope_tables(args.head_dim, args.max_seq_len, args.rope_theta, device=self.output.weight.device),
            persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        rope = self.rope[:, : tokens.shape[1]]
        for layer in self.layers.values():
            h = layer(h, rope)
        return self.output(self.norm(h))

    def init_weights(self, seed: int) -> None:
        """Fill every parameter deterministically from (seed, parameter name).

        Each parameter's full value is drawn from its own generator and then cut to the
        shard this rank holds, so 1 rank, FSDP and FSDP x TP start from identical weights.
        """
        with torch.no_grad():
            self.rope.copy_(rope_tables(self.args.head_dim, self.args.max_seq_len,
                                        self.args.rope_theta, device=self.rope.device))
            for name, param in self.named_parameters():
                fill_from_full(param, lambda shape, gen, n=name: _initial_value(n, shape, gen, self.args),
                               seed=seed, key=name)


def _initial_value(name: str, shape: torch.Size, gen: torch.Generator, args: ModelArgs) -> torch.Tensor:
    """LLaMA-style init: norms 1, embeddings N(0,1), projections into the residual stream
    scaled down with depth, everything else N(0, 0.02), truncated at 3 std."""
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    if name == "tok_embeddings.weight":
        std = 1.0
    elif name == "output.weight":
        std = args.d_model ** -0.5
    elif name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
        std = 0.02 / math.sqrt(2 * args.n_layers)
    else:
        std = 0.02
    out = torch.empty(shape)
    return nn.init.trunc_normal_(out, std=std, a=-3 * std, b=3 * std, generator=gen)


def fill_from_full(param: torch.Tensor, make, *, seed: int, key: str) -> None:
    """Copy this rank's shard of `make(full_shape, generator)` into `param` (plain or DTensor)."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(key.encode())) % (2**63))
    full = make(param.shape, gen).to(param.dtype)
    local = _local_shard(param, full)
    target = param.to_local() if hasattr(param, "to_local") else param
    target.copy_(local.to(target.device))


def _local_shard(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(param, DTensor):
        return full
    # src_data_rank=None: every rank holds the same full value, so no communication.
    return distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local()


def count_params(args: ModelArgs) -> dict[str, int]:
    """Parameter counts from the shape alone (used for FLOPs and by the doctor)."""
    d, kv = args.d_model, args.kv_heads * args.head_dim
    attn = d * d * 2 + d * kv * 2
    ffn = 3 * d * args.ffn_dim
    per_layer = attn + ffn + 2 * d
    embedding = args.vocab_size * d
    total = embedding + args.n_layers * per_layer + d + args.vocab_size * d
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding}


def flops_per_token(args: ModelArgs, seq_len: int) -> float:
    """Training FLOPs per token: 6 * non-embedding params + attention (12 * L * d * seq),
    the convention of the PaLM paper used by torchtitan and nanoGPT for MFU."""
    return 6 * count_params(args)["non_embedding"] + 12 * args.n_layers * args.d_model * seq_len
