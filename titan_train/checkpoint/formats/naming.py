"""Parameter names across formats: wrapper prefixes, the trainer's (= Meta's = torchtitan's)
LLaMA names vs HuggingFace's, and the q/k row permutation between them.

Meta's reference code rotates interleaved pairs (x[2i], x[2i+1]) of each head, HF's
LlamaAttention rotates halves (x[i], x[i + head_dim/2]). HF's conversion script therefore
permutes the rows of wq and wk inside each head; with grouped-query attention wk has
n_kv_heads heads. Nothing here imports torch (the permutations take tensors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OURS = "torchtitan/Meta"
HF = "HF"

# Added by wrappers around a model; never part of the model's own names.
# source: torch 2.13 torch/distributed/fsdp/_common_utils.py FSDP_WRAPPED_MODULE,
# torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py _CHECKPOINT_WRAPPED_MODULE,
# torch/_dynamo/eval_frame.py OptimizedModule (_orig_mod), torch/nn/parallel/distributed.py (module.)
WRAPPER_INFIXES = {
    "_fsdp_wrapped_module.": "FSDP1 wrapping",
    "_checkpoint_wrapped_module.": "activation checkpointing",
    "_orig_mod.": "torch.compile",
}
LEADING_WRAPPERS = {"module.": "DistributedDataParallel / DeepSpeed's 'module' entry"}

# Containers in front of the model's names, and what puts them there.
CONTAINERS = {
    "model.": "the trainer's DCP layout (model.*, optim.*)",
    "train.model.": "the trainer's older DCP layout (train.model.*)",
    "module.": LEADING_WRAPPERS["module."],
}

# (ours, HF, rope heads) with {i} for the layer index.
# source: huggingface/transformers src/transformers/models/llama/convert_llama_weights_to_hf.py
# (write_model: the state_dict key map and `permute(w, n_heads, dim1, dim2)` for q_proj/k_proj)
HF_NAMES: tuple[tuple[str, str, str], ...] = (
    ("tok_embeddings.weight", "model.embed_tokens.weight", ""),
    ("norm.weight", "model.norm.weight", ""),
    ("output.weight", "lm_head.weight", ""),
    ("layers.{i}.attention.wq.weight", "model.layers.{i}.self_attn.q_proj.weight", "n_heads"),
    ("layers.{i}.attention.wk.weight", "model.layers.{i}.self_attn.k_proj.weight", "n_kv_heads"),
    ("layers.{i}.attention.wv.weight", "model.layers.{i}.self_attn.v_proj.weight", ""),
    ("layers.{i}.attention.wo.weight", "model.layers.{i}.self_attn.o_proj.weight", ""),
    ("layers.{i}.feed_forward.w1.weight", "model.layers.{i}.mlp.gate_proj.weight", ""),
    ("layers.{i}.feed_forward.w2.weight", "model.layers.{i}.mlp.down_proj.weight", ""),
    ("layers.{i}.feed_forward.w3.weight", "model.layers.{i}.mlp.up_proj.weight", ""),
    ("layers.{i}.attention_norm.weight", "model.layers.{i}.input_layernorm.weight", ""),
    ("layers.{i}.ffn_norm.weight", "model.layers.{i}.post_attention_layernorm.weight", ""),
)

# Entries that are not weights: recomputed RoPE tables.
# source: Meta llama model.py (`rope.freqs` in LLaMA-2 consolidated files); HF LlamaRotaryEmbedding
# `inv_freq` buffers in checkpoints written by transformers < 4.31
IGNORED = re.compile(r"(^|\.)(rope\.freqs|rotary_emb\.inv_freq)$")

# Meta's model-parallel shards split each weight along one dim (fairscale Column/RowParallelLinear,
# ParallelEmbedding); norms are replicated. tok_embeddings splits dim 1 in LLaMA 1/2 and dim 0
# (VocabParallelEmbedding) in LLaMA 3, so it is decided from the shapes (see meta_concat_dim).
# source: huggingface/transformers convert_llama_weights_to_hf.py (torch.cat dims, concat_dim by llama_version)
META_SHARD_DIM = {
    "attention.wq": 0,
    "attention.wk": 0,
    "attention.wv": 0,
    "attention.wo": 1,
    "feed_forward.w1": 0,
    "feed_forward.w3": 0,
    "feed_forward.w2": 1,
    "output": 0,
}


def _pattern(template: str) -> str:
    return re.escape(template).replace(r"\{i\}", r"(\d+)")


_OURS_RE = re.compile(r"^((?:[^.]+\.)*?)(" + "|".join(_pattern(o) for o, _, _ in HF_NAMES) + r")$")
_HF_RE = re.compile(r"^((?:[^.]+\.)*?)(" + "|".join(_pattern(h) for _, h, _ in HF_NAMES) + r")$")
_TO_OURS = [(re.compile("^" + _pattern(h) + "$"), o, rope) for o, h, rope in HF_NAMES]
_TO_HF = [(re.compile("^" + _pattern(o) + "$"), h, rope) for o, h, rope in HF_NAMES]


def strip_wrappers(key: str) -> tuple[str, list[str]]:
    """Remove FSDP1 / activation-checkpointing / torch.compile infixes; return what was removed."""
    found = []
    for infix in WRAPPER_INFIXES:
        if infix in key:
            found.append(infix)
            key = key.replace(infix, "")
    return key, found


@dataclass
class KeyMap:
    """How a checkpoint's model entries map onto the trainer's names."""

    naming: str = ""  # OURS | HF | "" (no model weights found)
    to_ours: dict[str, str] = field(default_factory=dict)  # raw key -> trainer name
    rope: dict[str, str] = field(default_factory=dict)  # trainer name -> "n_heads" | "n_kv_heads" (HF q/k)
    prefixes: list[str] = field(default_factory=list)  # containers in front of the names ("model.")
    wrappers: dict[str, str] = field(default_factory=dict)  # wrapper prefix -> what adds it
    ignored: list[str] = field(default_factory=list)  # rope tables and such
    other: list[str] = field(default_factory=list)  # everything else (optimizer, step, ...)
    unmapped: list[str] = field(default_factory=list)  # model-looking entries with no trainer name (biases, ...)

    @property
    def prefix(self) -> str:
        return self.prefixes[0] if len(self.prefixes) == 1 else ""


def map_keys(keys) -> KeyMap:
    """Recognize the model's weights among `keys` (flattened, dotted) and their naming."""
    keys = list(keys)
    cleaned = {}
    wrappers: dict[str, str] = {}
    for key in keys:
        clean, found = strip_wrappers(key)
        for w in found:
            wrappers[w] = WRAPPER_INFIXES[w]
        cleaned[key] = clean
    ours = {k: _OURS_RE.match(c) for k, c in cleaned.items()}
    hf = {k: _HF_RE.match(c) for k, c in cleaned.items()}
    n_ours, n_hf = sum(bool(m) for m in ours.values()), sum(bool(m) for m in hf.values())
    km = KeyMap(wrappers=wrappers)
    if not (n_ours or n_hf):
        km.other = [k for k in keys if not IGNORED.search(cleaned[k])]
        km.ignored = [k for k in keys if IGNORED.search(cleaned[k])]
        return km
    km.naming = HF if n_hf > n_ours else OURS
    matches = hf if km.naming == HF else ours
    prefixes: list[str] = []
    for key in keys:
        m = matches[key]
        if IGNORED.search(cleaned[key]):
            km.ignored.append(key)
        elif m is None:
            km.other.append(key)
        else:
            prefix, name = m.group(1), m.group(2)
            if prefix not in prefixes:
                prefixes.append(prefix)
            if km.naming == HF:
                name, rope = hf_to_ours(name)
                if rope:
                    km.rope[name] = rope
            km.to_ours[key] = name
    km.prefixes = [p for p in prefixes if p]
    model_like = re.compile(
        "^("
        + "|".join(re.escape(p) for p in prefixes)
        + ")"
        + (r"(model\.|lm_head\.)" if km.naming == HF else r"(layers\.\d+\.|tok_embeddings\.|output\.|norm\.)")
    )
    km.unmapped = [k for k in km.other if model_like.match(cleaned[k])]
    for p in km.prefixes:
        if "module" in p.split("."):
            km.wrappers["module."] = LEADING_WRAPPERS["module."]
    return km


def _rename(name: str, table) -> tuple[str, str]:
    for pattern, target, rope in table:
        m = pattern.match(name)
        if m:
            return target.replace("{i}", m.group(1)) if m.groups() else target, rope
    raise KeyError(name)


def hf_to_ours(name: str) -> tuple[str, str]:
    """'model.layers.3.self_attn.k_proj.weight' -> ('layers.3.attention.wk.weight', 'n_kv_heads')."""
    return _rename(name, _TO_OURS)


def ours_to_hf(name: str) -> tuple[str, str]:
    """'layers.3.attention.wq.weight' -> ('model.layers.3.self_attn.q_proj.weight', 'n_heads')."""
    return _rename(name, _TO_HF)


# ---- the q/k permutation ---------------------------------------------------------------


def to_hf_rows(w, n_heads: int):
    """Meta/torchtitan row order -> HF: within each head, interleaved pairs -> halves."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def from_hf_rows(w, n_heads: int):
    """HF row order -> Meta/torchtitan (the inverse of to_hf_rows)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def head_aligned(start: int, stop: int, head_dim: int) -> tuple[int, int]:
    """The smallest whole-head row range covering [start, stop): the permutation stays inside
    a head, so a shard's rows can be read and un-permuted without the rest of the tensor."""
    return (start // head_dim) * head_dim, -(-stop // head_dim) * head_dim


# ---- Meta model-parallel shards ----------------------------------------------------------


def meta_concat_dim(name: str, shard_shape: tuple[int, ...], n_shards: int, dim: int | None) -> int | None:
    """The dim along which Meta's consolidated.NN.pth shards of `name` are concatenated
    (None: replicated). `dim` is params.json's model width, when known."""
    if n_shards == 1 or len(shard_shape) < 2:
        return None
    if name == "tok_embeddings.weight":
        return 0 if dim is not None and shard_shape[1] == dim else 1
    for part, d in META_SHARD_DIM.items():
        if name.endswith(part + ".weight") or name == part + ".weight":
            return d
    return None
