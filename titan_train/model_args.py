"""The shape of a LLaMA model: the `[model]` section of a trainer config and what
`model.py` builds, as ONE dataclass, so the config and the model cannot drift.

No torch here: the config loader, the CLI's `--print-config` and the doctor read it
without paying for `import torch`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelArgs:
    name: str = "llama"                    # model family; only "llama" today
    vocab_size: int = 2048                 # embedding rows; must cover the tokenizer's ids
    d_model: int = 256                     # hidden size
    n_heads: int = 16                      # attention heads; must divide d_model
    n_layers: int = 6                      # transformer blocks
    n_kv_heads: int | None = None          # grouped-query KV heads (None = n_heads)
    ffn_dim_multiplier: float | None = None  # scales the SwiGLU width (LLaMA-2 70B: 1.3)
    multiple_of: int = 256                 # SwiGLU width is rounded up to a multiple of this
    norm_eps: float = 1e-5                 # RMSNorm epsilon
    rope_theta: float = 10000.0            # RoPE base
    max_seq_len: int = 2048                # longest sequence the RoPE table covers

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
