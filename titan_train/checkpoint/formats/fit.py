"""Does a checkpoint fit a model config? Model shapes as other formats declare them
(HF config.json, Meta params.json), as the weights imply them, and the differences to the
trainer's [model] section, each named by the config field that decides it.

`args` below is a titan_train.config.model_args.ModelArgs (or anything with its fields); only
`expected_shapes` imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from titan_train.checkpoint.formats import TensorInfo

# Which [model] field decides each dim of each weight (the trainer's names).
_SHAPE_FIELDS: tuple[tuple[re.Pattern, tuple[str, ...]], ...] = tuple(
    (re.compile(p), f)
    for p, f in (
        (r"^tok_embeddings\.weight$", ("vocab_size", "d_model")),
        (r"^output\.weight$", ("vocab_size", "d_model")),
        (r"^norm\.weight$", ("d_model",)),
        (r"^layers\.\d+\.attention\.wq\.weight$", ("d_model", "d_model")),
        (r"^layers\.\d+\.attention\.w[kv]\.weight$", ("n_kv_heads", "d_model")),
        (r"^layers\.\d+\.attention\.wo\.weight$", ("d_model", "d_model")),
        (r"^layers\.\d+\.feed_forward\.w[13]\.weight$", ("ffn_dim", "d_model")),
        (r"^layers\.\d+\.feed_forward\.w2\.weight$", ("d_model", "ffn_dim")),
        (r"^layers\.\d+\.(attention|ffn)_norm\.weight$", ("d_model",)),
    )
)
_LAYER = re.compile(r"^layers\.(\d+)\.")
# Fields that change results without changing shapes: a mismatch loads, then computes differently.
NUMERIC_FIELDS = ("rope_theta", "norm_eps")


def shape_fields(name: str) -> tuple[str, ...]:
    for pattern, fields in _SHAPE_FIELDS:
        if pattern.match(name):
            return fields
    return ()


# ---- shapes declared by other formats ---------------------------------------------------


def from_hf_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """HF LlamaConfig (config.json) -> [model] fields (+ ffn_dim for intermediate_size)."""
    names = {
        "vocab_size": "vocab_size",
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "num_key_value_heads": "n_kv_heads",
        "rms_norm_eps": "norm_eps",
        "rope_theta": "rope_theta",
        "intermediate_size": "ffn_dim",
        "max_position_embeddings": "max_seq_len",
    }
    # transformers >= 5 writes rope_theta and the scaling inside `rope_parameters` (rope_theta and
    # rope_scaling at the top level are null then); releases made with 4.x have them at the top.
    # source: transformers 5.x models/llama/configuration_llama.py (rope_parameters: RopeParameters)
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    cfg = {
        **cfg,
        "rope_theta": cfg.get("rope_theta") or rope.get("rope_theta"),
        "rope_scaling": cfg.get("rope_scaling") or (rope or None),
    }
    out = {ours: cfg[theirs] for theirs, ours in names.items() if cfg.get(theirs) is not None}
    if isinstance(cfg.get("model_type"), str) and cfg["model_type"] != "llama":
        out["model_type"] = cfg["model_type"]
    if cfg.get("tie_word_embeddings"):
        out["tie_word_embeddings"] = True
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type", "default")) != "default":
        kind = scaling.get("rope_type") or scaling.get("type")
        out["rope_scaling"] = f"{kind}, factor {scaling.get('factor')}"
        if kind == "llama3":  # the one scaling the trainer implements (model_args.rope_scaling_*)
            out["rope_llama3"] = _llama3_scaling(
                scaling.get("factor"),
                scaling.get("low_freq_factor", 1.0),
                scaling.get("high_freq_factor", 4.0),
                scaling.get("original_max_position_embeddings", 8192),
            )
    return out


def _llama3_scaling(factor, low, high, original) -> tuple[float, float, float, int]:
    return float(factor), float(low), float(high), int(original)


def llama3_scaling_of(args) -> tuple[float, float, float, int] | None:
    """The model's Llama 3.1 RoPE scaling as a checkpoint declares it, or None (plain RoPE)."""
    if args.rope_scaling_factor is None:
        return None
    return _llama3_scaling(
        args.rope_scaling_factor, args.rope_low_freq_factor, args.rope_high_freq_factor, args.rope_original_seq_len
    )


def scaling_differs(declared: dict[str, Any], args) -> str:
    """What differs between the RoPE scaling a checkpoint declares and the model's ("" when
    they agree): the checkpoint's model was trained with those frequencies."""
    said = declared.get("rope_scaling")
    ours = llama3_scaling_of(args)
    if not said:
        return f"the model scales RoPE (factor {ours[0]:g}) and the checkpoint declares no scaling" if ours else ""
    if declared.get("rope_llama3") is None:
        return f"it declares RoPE scaling ({said}), a kind the trainer does not implement (only llama3's)"
    if ours != declared["rope_llama3"]:
        theirs = declared["rope_llama3"]
        return (
            f"it declares llama3 RoPE scaling (factor {theirs[0]:g}, low {theirs[1]:g}, high {theirs[2]:g}, original "
            f"{theirs[3]}) and the model has "
            + ("none" if ours is None else f"factor {ours[0]:g}, low {ours[1]:g}, high {ours[2]:g}, original {ours[3]}")
        )
    return ""


def from_meta_params(params: dict[str, Any]) -> dict[str, Any]:
    """Meta params.json -> [model] fields. LLaMA-2 writes vocab_size = -1 (the tokenizer decides)."""
    params = params.get("model", params)
    names = {
        "dim": "d_model",
        "n_layers": "n_layers",
        "n_heads": "n_heads",
        "n_kv_heads": "n_kv_heads",
        "vocab_size": "vocab_size",
        "multiple_of": "multiple_of",
        "ffn_dim_multiplier": "ffn_dim_multiplier",
        "norm_eps": "norm_eps",
        "rope_theta": "rope_theta",
    }
    out = {ours: params[theirs] for theirs, ours in names.items() if params.get(theirs) is not None}
    if out.get("vocab_size", 0) <= 0:
        out.pop("vocab_size", None)
    if params.get("use_scaled_rope"):  # LLaMA 3.1 / 3.2 (Meta's apply_scaling, factor 8)
        out["rope_scaling"] = "llama3 (use_scaled_rope)"
        out["rope_llama3"] = _llama3_scaling(params.get("rope_scaling_factor", 8.0), 1.0, 4.0, 8192)
    return out


def to_hf_config(args, dtype: str) -> dict[str, Any]:
    """The config.json HF's LlamaForCausalLM needs for these weights."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": args.d_model,
        "intermediate_size": args.ffn_dim,
        "num_attention_heads": args.n_heads,
        "num_hidden_layers": args.n_layers,
        "num_key_value_heads": args.n_kv_heads or args.n_heads,
        "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta,
        "vocab_size": args.vocab_size,
        "max_position_embeddings": args.max_seq_len,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": dtype,
        # transformers 4.x's spelling (5.x reads it too): the frequencies the weights were trained with
        "rope_scaling": None
        if args.rope_scaling_factor is None
        else {
            "rope_type": "llama3",
            "factor": args.rope_scaling_factor,
            "low_freq_factor": args.rope_low_freq_factor,
            "high_freq_factor": args.rope_high_freq_factor,
            "original_max_position_embeddings": args.rope_original_seq_len,
        },
    }


def to_meta_params(args) -> dict[str, Any]:
    out = {
        "dim": args.d_model,
        "n_layers": args.n_layers,
        "n_heads": args.n_heads,
        "n_kv_heads": args.n_kv_heads or args.n_heads,
        "vocab_size": args.vocab_size,
        "multiple_of": args.multiple_of,
        "norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta,
    }
    if args.ffn_dim_multiplier is not None:
        out["ffn_dim_multiplier"] = args.ffn_dim_multiplier
    if args.rope_scaling_factor is not None:  # Meta's flag; its apply_scaling uses low 1, high 4, original 8192
        out["use_scaled_rope"] = True
        out["rope_scaling_factor"] = args.rope_scaling_factor
    return out


def ffn_width(d_model: int, multiple_of: int, multiplier: float | None) -> int:
    """LLaMA's SwiGLU width (titan_train.config.model_args.ModelArgs.ffn_dim, as a function)."""
    hidden = int(2 * (4 * d_model) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def ffn_fields_for(d_model: int, width: int, prefer: int = 256) -> dict[str, Any]:
    """[model] multiple_of / ffn_dim_multiplier that give this feed-forward width."""
    for multiple_of in dict.fromkeys((prefer, 256, 1024, 512, 128, 64, 4096, 2048)):
        if ffn_width(d_model, multiple_of, None) == width:
            return {"multiple_of": multiple_of}
    base = int(2 * (4 * d_model) / 3)
    for multiple_of in dict.fromkeys((prefer, 256, 1024, 512, 128)):
        for step in range(width // multiple_of, 0, -1):
            mult = round(step * multiple_of / base, 4)
            if ffn_width(d_model, multiple_of, mult) == width:
                return {"multiple_of": multiple_of, "ffn_dim_multiplier": mult}
    if width >= base:
        return {"multiple_of": width}
    return {"multiple_of": 1, "ffn_dim_multiplier": width / base}


# ---- shapes implied by the weights --------------------------------------------------------


def inferred(tensors: dict[str, TensorInfo], n_heads: int | None = None) -> dict[str, Any]:
    """[model] fields the weights (trainer names) imply; n_kv_heads needs the head count."""
    out: dict[str, Any] = {}
    emb = tensors.get("tok_embeddings.weight") or tensors.get("output.weight")
    if emb and len(emb.shape) == 2:
        out["vocab_size"], out["d_model"] = emb.shape
    elif "norm.weight" in tensors:
        out["d_model"] = tensors["norm.weight"].shape[0]
    layers = {int(m.group(1)) for k in tensors if (m := _LAYER.match(k))}
    if layers:
        out["n_layers"] = max(layers) + 1
    wk = tensors.get("layers.0.attention.wk.weight")
    if wk and n_heads and out.get("d_model") and out["d_model"] % n_heads == 0:
        out["n_kv_heads"] = wk.shape[0] // (out["d_model"] // n_heads)
    w1 = tensors.get("layers.0.feed_forward.w1.weight")
    if w1:
        out["ffn_dim"] = w1.shape[0]
    return out


def expected_shapes(args) -> dict[str, tuple[int, ...]]:
    """The trainer's own state-dict keys and shapes for `args`: the model built on the meta
    device (no memory), so the comparison can never drift from model.py."""
    import torch

    from titan_train.models.llama import Transformer

    with torch.device("meta"):
        model = Transformer(args)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


# ---- the comparison ----------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDiff:
    """A [model] field whose value the checkpoint contradicts."""

    field: str  # [model] key, or "ffn_dim" (decided by multiple_of / ffn_dim_multiplier)
    checkpoint: Any
    config: Any
    evidence: str  # "tok_embeddings.weight [32000, 4096]" / "config.json"
    numeric: bool = False  # shapes agree; the model would compute something else

    def settings(self, d_model: int, prefer_multiple_of: int = 256) -> dict[str, Any]:
        """[model] values that make the config agree with the checkpoint."""
        if self.field == "ffn_dim":
            return ffn_fields_for(d_model, int(self.checkpoint), prefer_multiple_of)
        return {self.field: self.checkpoint}

    def fix(self, d_model: int, prefer_multiple_of: int = 256) -> str:
        return "set " + " and ".join(
            f"[model] {k} = {v!r}" for k, v in self.settings(d_model, prefer_multiple_of).items()
        )

    def describe(self) -> str:
        name = "feed-forward width (multiple_of / ffn_dim_multiplier)" if self.field == "ffn_dim" else self.field
        return f"{name}: checkpoint {self.checkpoint}, config {self.config} ({self.evidence})"


@dataclass(frozen=True)
class KeyIssue:
    kind: str  # "missing" | "unexpected" | "shape"
    key: str  # trainer name
    found: tuple[int, ...] | None = None
    expected: tuple[int, ...] | None = None
    field: str = ""  # the [model] field that decides the disagreeing dim


@dataclass
class Fit:
    fields: list[FieldDiff]
    keys: list[KeyIssue]

    @property
    def ok(self) -> bool:
        return not self.keys and not any(not f.numeric for f in self.fields)


def _config_value(args, name: str):
    if name == "n_kv_heads":
        return args.n_kv_heads or args.n_heads
    return getattr(args, name)


def compare(
    found: dict[str, TensorInfo],
    args,
    expected: dict[str, tuple[int, ...]],
    declared: dict[str, Any] | None = None,
    source: str = "",
    unmapped: dict[str, TensorInfo] | None = None,
) -> Fit:
    """Field-level disagreements first (what to change in the config), then every missing,
    unexpected or mis-shaped key, each naming its field."""
    declared = declared or {}
    diffs: list[FieldDiff] = []
    implied = inferred(found, declared.get("n_heads") or args.n_heads)
    evidence = {
        "vocab_size": "tok_embeddings.weight",
        "d_model": "tok_embeddings.weight",
        "n_layers": "layer count",
        "n_kv_heads": "layers.0.attention.wk.weight",
        "ffn_dim": "layers.0.feed_forward.w1.weight",
    }
    for name, value in implied.items():
        want = args.ffn_dim if name == "ffn_dim" else _config_value(args, name)
        if value != want:
            key = evidence[name]
            shown = f"{key} {list(found[key].shape)}" if key in found else key
            diffs.append(FieldDiff(name, value, want, shown))
    seen = {d.field for d in diffs}
    for name in ("n_heads", "n_kv_heads", "rope_theta", "norm_eps"):
        if name in declared and name not in seen:
            want = _config_value(args, name)
            if declared[name] != want and not (isinstance(want, float) and abs(declared[name] - want) <= 1e-12):
                diffs.append(
                    FieldDiff(
                        name,
                        declared[name],
                        want,
                        source or "declared by the checkpoint",
                        numeric=name in NUMERIC_FIELDS,
                    )
                )
    issues: list[KeyIssue] = []
    for key, shape in expected.items():
        if key not in found:
            m = _LAYER.match(key)
            issues.append(KeyIssue("missing", key, None, shape, "n_layers" if m else ""))
        elif tuple(found[key].shape) != tuple(shape):
            got = tuple(found[key].shape)
            fields = shape_fields(key)
            dim = next((i for i, (a, b) in enumerate(zip(got, shape)) if a != b), 0)
            issues.append(KeyIssue("shape", key, got, shape, fields[dim] if dim < len(fields) else ""))
    for key in found:
        if key not in expected:
            issues.append(
                KeyIssue("unexpected", key, tuple(found[key].shape), None, "n_layers" if _LAYER.match(key) else "")
            )
    issues += [KeyIssue("unexpected", key, tuple(t.shape), None) for key, t in (unmapped or {}).items()]
    return Fit(diffs, issues)


def one_line(fit: Fit, args, where: str) -> str:
    """The first disagreement as one line with its fix (the trainer's error message)."""
    hard = [d for d in fit.fields if not d.numeric]
    if hard:
        d = hard[0]
        more = f" (and {len(hard) - 1} more: {', '.join(x.field for x in hard[1:])})" if len(hard) > 1 else ""
        return (
            f"{where} does not fit the config: {d.describe()}{more}; "
            f"{d.fix(_ckpt_d_model(fit, args), args.multiple_of)}"
        )
    issue = fit.keys[0]
    detail = {
        "missing": "is missing from the checkpoint",
        "unexpected": "is in the checkpoint but not in the model",
        "shape": f"has shape {list(issue.found or ())} in the checkpoint, {list(issue.expected or ())} in the model",
    }
    field = f" (decided by [model] {issue.field})" if issue.field else ""
    return f"{where} does not fit the config: {issue.key} {detail[issue.kind]}{field} ({len(fit.keys)} key problem(s))"


def _ckpt_d_model(fit: Fit, args) -> int:
    return next((d.checkpoint for d in fit.fields if d.field == "d_model"), args.d_model)
