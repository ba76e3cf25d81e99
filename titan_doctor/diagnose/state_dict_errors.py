"""What a failed load_state_dict says about the checkpoint versus the model.

torch prints "Missing key(s)", "Unexpected key(s)" and "size mismatch for ..." on separate
lines of one error; these functions judge all of them together, so the verdict on a
wrapper prefix (module. from DDP, _orig_mod. from torch.compile, ...) is the same for both
lists, and a size mismatch names the config field that differs (vocab_size, d_model, ...)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

WRAPPER_PREFIXES = {
    "module.": "DistributedDataParallel / DataParallel",
    "_orig_mod.": "torch.compile",
    "_fsdp_wrapped_module.": "FSDP1 wrapping",
    "_checkpoint_wrapped_module.": "activation checkpointing",
}
# Buffers models register (RoPE tables, position ids, masks): persistent by default, so they
# are in model.state_dict() and a checkpoint written without them (converted weights, a model
# that registers them persistent=False) lacks them.
BUFFER_NAMES = re.compile(
    r"(?:^|\.)(?:freqs_cis|freqs|inv_freq|cos_cached|sin_cached|rope\w*|rotary\w*|position_ids|"
    r"causal_mask|attn_mask|attention_mask|mask|bias_mask|_float_tensor)$"
)
_QUOTED = re.compile(r'"([^"]+)"|\'([^\']+)\'')
_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|blocks|h)\.(\d+)\.")

# Which config field a parameter's dimension comes from, by the parameter's name.
_VOCAB = re.compile(
    r"(?:^|\.)(?:embed_tokens|tok_embeddings|word_embeddings|wte|shared|embedding|embed|lm_head)\b"
    r"|^output\.weight$"
)
_NORM = re.compile(r"(?:norm|ln_?\w*|layer_norm|layernorm)(?:\.|$)", re.I)
_FFN = re.compile(r"(?:mlp|ffn|feed_forward|fc1|fc2|w1|w2|w3|gate_proj|up_proj|down_proj|c_fc|intermediate)", re.I)
_ATTN = re.compile(r"(?:attn|attention|q_proj|k_proj|v_proj|o_proj|wq|wk|wv|wo|qkv|query|key|value)", re.I)
_KV = re.compile(r"(?:k_proj|v_proj|\bwk\b|\bwv\b|\.key\b|\.value\b)")
FIELD_NAMES = {
    "vocab_size": "vocab_size (embedding rows)",
    "d_model": "d_model (dim / hidden_size)",
    "ffn_hidden": "the FFN hidden size (intermediate_size / ffn_dim / multiple_of)",
    "n_heads": "n_heads x head_dim",
    "n_kv_heads": "n_kv_heads x head_dim",
}


def quoted_keys(text: str) -> list[str]:
    return [a or b for a, b in _QUOTED.findall(text)]


def _strip(key: str, prefix: str) -> str:
    return key.replace(prefix, "", 1) if key.startswith(prefix) else key.replace("." + prefix, ".")


def _has(key: str, prefix: str) -> bool:
    return key.startswith(prefix) or ("." + prefix) in key


def judge_keys(missing: list[str], unexpected: list[str]) -> dict[str, Any]:
    """One verdict for both key lists: a wrapper prefix on one side, a renamed submodule,
    a different layer count, or a different model."""
    out: dict[str, Any] = {
        "missing": missing[:10],
        "unexpected": unexpected[:10],
        "counts": " and ".join(
            x
            for x in (
                f"{len(missing)} missing key(s)" if missing else "",
                f"{len(unexpected)} unexpected key(s)" if unexpected else "",
            )
            if x
        )
        or "mismatched keys",
    }
    container = _training_checkpoint(unexpected)
    if container:
        out["prefixes"] = []
        out["prefix_note"] = (
            f"The unexpected keys ({', '.join(repr(k) for k in unexpected[:6])}) are the entries of a whole "
            "training checkpoint (model weights beside optimizer state, epoch, metrics), not parameter names: the "
            "checkpoint dict itself was passed to load_state_dict instead of its model entry."
        )
        out["prefix_fix"] = (
            f"Load the model's entry: model.load_state_dict(checkpoint['{container}']) (a DDP-wrapped model: "
            f"model.module.load_state_dict(checkpoint['{container}']), or strip 'module.' from its keys)"
        )
        return out
    for prefix, origin in WRAPPER_PREFIXES.items():
        in_ckpt = [k for k in unexpected if _has(k, prefix)]
        in_model = [k for k in missing if _has(k, prefix)]
        side, keys, other = ("checkpoint", in_ckpt, missing) if in_ckpt else ("model", in_model, unexpected)
        if not keys:
            continue
        stripped = {_strip(k, prefix) for k in keys}
        if other and not stripped & set(other) and not any(k.startswith(tuple(stripped)) for k in other):
            continue  # the prefix is there, but the names do not pair up: not the explanation
        out["prefixes"] = [prefix]
        if side == "checkpoint":
            out["prefix_note"] = (
                f"The checkpoint's keys carry the prefix '{prefix}' (added by {origin} when it "
                f"was saved) and the model's do not"
                + (f": '{keys[0]}' in the checkpoint is '{_strip(keys[0], prefix)}' in the model." if other else ".")
            )
            out["prefix_fix"] = (
                f"Strip it before loading: torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"
                f"(state_dict, '{prefix}'); save the unwrapped model next time (model.module.state_dict(), or "
                f"torch.distributed.checkpoint.state_dict.get_model_state_dict(model))"
            )
        else:
            out["prefix_note"] = (
                f"The model is wrapped ({origin}, prefix '{prefix}') but the checkpoint was saved "
                f"from an unwrapped model."
            )
            out["prefix_fix"] = (
                f"Load into the unwrapped model (model.module.load_state_dict(...) / "
                f"model._orig_mod), or add the prefix: {{'{prefix}' + k: v for k, v in sd.items()}}; "
                f"torch.nn.modules.utils.consume_prefix_in_state_dict_if_present strips it the other way"
            )
        return out
    out["prefixes"] = []
    renames = _renames(missing, unexpected)
    if renames:
        pairs = ", ".join(f"'{c}' (checkpoint) -> '{m}' (model)" for m, c in renames)
        out["prefix_note"] = (
            f"No wrapper prefix: a submodule was renamed between the two versions of the code: {pairs}."
        )
        out["prefix_fix"] = (
            "Rename the keys while loading: "
            + "; ".join(f"sd = {{k.replace('{c}.', '{m}.', 1): v for k, v in sd.items()}}" for m, c in renames)
            + " (or load with the code version the checkpoint was saved from)"
        )
        return out
    only_layers = all(_LAYER.search(k) for k in missing + unexpected)
    if not (missing and unexpected) and not only_layers:
        return _one_sided(out, missing, unexpected)
    lm, lu = _max_layer(missing), _max_layer(unexpected)
    if lm is not None and (lu is None or lm > lu):
        out["prefix_note"] = (
            f"No wrapper prefix: the model has more layers than the checkpoint (model expects "
            f"layer {lm}; n_layers differs)."
        )
    elif lu is not None:
        out["prefix_note"] = (
            f"No wrapper prefix: the checkpoint has more layers than the model (checkpoint has "
            f"layer {lu}; n_layers differs)."
        )
    else:
        out["prefix_note"] = "No wrapper prefix involved: the checkpoint is from a different model or config."
    out["prefix_fix"] = (
        "Load with the same model config the checkpoint was saved with (check n_layers / dim / vocab_size)"
    )
    return out


# The entries a training script's checkpoint dict holds beside the weights (torch's saving
# tutorial, the trainers' save functions): their names as keys mean the whole dict was loaded.
_MODEL_ENTRIES = ("model", "state_dict", "model_state_dict", "module", "net", "network", "model_state", "weights")
_TRAINING_ENTRIES = re.compile(
    r"^(?:optimizer\w*|optim\w*|epoch|epochs|step|global_step|iteration|iter|lr_scheduler|scheduler\w*|scaler|amp"
    r"|args|config|cfg|best\w*|previous_best|ema\w*|model_ema|train_state|rng_state|loss|metrics?|history)$"
)


def _training_checkpoint(unexpected: list[str]) -> str:
    """The model entry's name when the 'unexpected keys' are a training checkpoint's entries."""
    names = [k for k in unexpected if "." not in k]
    if not names or len(names) != len(unexpected):
        return ""
    model = next((m for m in _MODEL_ENTRIES if m in names), "")
    return model if model and any(_TRAINING_ENTRIES.match(k) for k in names if k != model) else ""


def _one_sided(out: dict[str, Any], missing: list[str], unexpected: list[str]) -> dict[str, Any]:
    """Only one list is known (the other is empty, or was not in the log) and it is not just
    whole layers: the keys alone cannot say why, so say what they show and how to see the rest."""
    if missing:
        out["prefix_note"] = (
            "Only missing keys are shown: the model's parameters listed are not in the checkpoint under "
            "these names. If the checkpoint's keys carry a prefix (module., _orig_mod., model.) the "
            "'Unexpected key(s)' line shows it; a checkpoint with no unexpected keys lacks these "
            "parameters (a partial or another model's checkpoint, or a nested dict such as "
            "{'model': ...})."
        )
        out["prefix_fix"] = (
            "Print the checkpoint's keys: sd = torch.load(path, map_location='cpu'); print(list(sd)[:5]). "
            "A common prefix: strip it (torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"
            "(sd, '<prefix>')); a nested dict: load sd['model'] / sd['state_dict']; a partial "
            "checkpoint on purpose: load_state_dict(sd, strict=False)"
        )
    else:
        out["prefix_note"] = (
            "Only unexpected keys are shown: the checkpoint has parameters the model does not, and every "
            "parameter of the model was found: the checkpoint is from a larger model (extra layers or "
            "heads) or holds extra entries (optimizer state, EMA weights)."
        )
        out["prefix_fix"] = (
            "Build the model the checkpoint was saved from, or drop the extra keys: "
            "model.load_state_dict(sd, strict=False) after checking which keys are extra"
        )
    return out


def _renames(missing: list[str], unexpected: list[str]) -> list[tuple[str, str]]:
    """(model head, checkpoint head) pairs where keys agree after their first component."""
    tails = {k.split(".", 1)[1]: k.split(".", 1)[0] for k in unexpected if "." in k}
    pairs = Counter(
        (k.split(".", 1)[0], tails[k.split(".", 1)[1]])
        for k in missing
        if "." in k and k.split(".", 1)[1] in tails and tails[k.split(".", 1)[1]] != k.split(".", 1)[0]
    )
    paired = sum(pairs.values())
    return sorted(pairs) if missing and paired * 2 >= len(missing) else []


def _max_layer(keys: list[str]) -> int | None:
    idx = [int(m.group(1)) for k in keys for m in [_LAYER.search(k)] if m]
    return max(idx) if idx else None


# ---- size mismatch -> config field ------------------------------------------------------


def _dims(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.replace(" ", "").split(",") if x)


def config_fields(mismatches: list[tuple[str, tuple[int, ...], tuple[int, ...]]]) -> dict[str, tuple[int, int]]:
    """{field: (checkpoint value, model value)} from (param, checkpoint shape, model shape).
    d_model is read off norms and embeddings first; the other dims of attention and FFN
    weights are then d_model multiples or their own field."""
    fields: dict[str, tuple[int, int]] = {}
    for name, ck, md in mismatches:
        if len(ck) == 1 and len(md) == 1 and _NORM.search(name.rsplit(".", 1)[0] + ".") and not _FFN.search(name):
            fields.setdefault("d_model", (ck[0], md[0]))
        elif _VOCAB.search(name) and len(ck) == 2 == len(md):
            if ck[0] != md[0]:
                fields.setdefault("vocab_size", (ck[0], md[0]))
            if ck[1] != md[1]:
                fields.setdefault("d_model", (ck[1], md[1]))
    dm = fields.get("d_model")
    for name, ck, md in mismatches:
        if _VOCAB.search(name) or len(ck) != len(md):
            continue
        for a, b in zip(ck, md):
            if a == b:
                continue
            if dm and any(a == k * dm[0] and b == k * dm[1] for k in (1, 2, 3)):
                continue  # a multiple of d_model: already named
            if _FFN.search(name):
                fields.setdefault("ffn_hidden", (a, b))
            elif _ATTN.search(name):
                fields.setdefault("n_kv_heads" if _KV.search(name) else "n_heads", (a, b))
            elif not dm:
                fields.setdefault("d_model", (a, b))
                dm = (a, b)
    if not fields:
        common = Counter((a, b) for _, ck, md in mismatches for a, b in zip(ck, md) if a != b).most_common(1)
        if common:
            fields["d_model"] = common[0][0]
    return fields


def judge_sizes(lines: list[dict[str, str]]) -> dict[str, Any]:
    mismatches = [(g["param"], _dims(g["ckpt"]), _dims(g["model"])) for g in lines if "param" in g]
    fields = config_fields(mismatches)
    named = [f"{f} (checkpoint {c}, model {m})" for f, (c, m) in fields.items()]
    return {
        "n_params": len(mismatches),
        "params": [m[0] for m in mismatches[:10]],
        "fields": {f: {"checkpoint": c, "model": m} for f, (c, m) in fields.items()},
        "fields_note": (
            "The config differs in: "
            + "; ".join(f"{FIELD_NAMES.get(f, f)}: checkpoint {c}, model {m}" for f, (c, m) in fields.items())
            + "."
        )
        if fields
        else "",
        "fields_fix": ", ".join(f"{f}={c}" for f, (c, _) in fields.items()) if named else "the checkpoint's dims",
    }
