"""The shape of a LLaMA model: the `[model]` section of a trainer config and what
`model.py` builds, as ONE dataclass, so the config and the model cannot drift.

No torch here: the config loader, the CLI's `--print-config` and the doctor read it
without paying for `import torch`.
"""

from __future__ import annotations

from dataclasses import dataclass

from titan_train.config.fields import setting


@dataclass
class ModelArgs:
    name: str = setting("llama", "model family; only llama today", choices=("llama",))
    vocab_size: int = setting(2048, "embedding rows; must cover the tokenizer's ids", ge=1)
    d_model: int = setting(256, "hidden size", ge=1)
    n_heads: int = setting(16, "attention heads; must divide d_model", ge=1)
    n_layers: int = setting(6, "transformer blocks", ge=1)
    n_kv_heads: int | None = setting(None, "grouped-query KV heads (unset = n_heads); must divide n_heads", ge=1)
    ffn_dim_multiplier: float | None = setting(None, "scales the SwiGLU width (unset = 1; LLaMA-2 70B: 1.3)", gt=0)
    multiple_of: int = setting(256, "SwiGLU width is rounded up to a multiple of this", ge=1)
    norm_eps: float = setting(1e-5, "RMSNorm epsilon", gt=0, lt=1)
    rope_theta: float = setting(10000.0, "RoPE base", gt=1)
    max_seq_len: int = setting(2048, "longest sequence the RoPE table covers", ge=1)
    # Llama 3.1's RoPE frequency scaling (Meta's llama-models apply_scaling; HF rope_type "llama3"):
    # unset = plain RoPE (Llama 2, Llama 3.0); Llama 3.1 / 3.2 / 3.3 checkpoints need factor 8
    rope_scaling_factor: float | None = setting(
        None, "Llama 3.1 RoPE scaling factor (unset = plain RoPE; 3.1: 8)", gt=0
    )
    rope_low_freq_factor: float = setting(1.0, "Llama 3.1 RoPE scaling: low-frequency factor", gt=0)
    rope_high_freq_factor: float = setting(4.0, "Llama 3.1 RoPE scaling: high-frequency factor", gt=0)
    rope_original_seq_len: int = setting(
        8192, "Llama 3.1 RoPE scaling: the context length trained before scaling", ge=1
    )

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
