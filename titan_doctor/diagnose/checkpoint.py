"""Checkpoint doctor: what a checkpoint is (format, parameter count, dtypes, optimizer and
step state, key prefixes, naming scheme) and, with a trainer config, whether it fits the
trainer's model: missing / unexpected / mis-shaped keys, each naming the [model] field that
decides it, each problem with its fix.

Metadata only (titan_train.checkpoint.formats.detect): no tensor data is read and nothing
from the checkpoint is executed. torch is imported only with a config, to build the
trainer's own model on the meta device for the comparison.
"""

from __future__ import annotations

from pathlib import Path

from titan_doctor.findings import Finding, Status
from titan_train.checkpoint.formats import CheckpointError, UnsafeCheckpoint, detect, naming

_SHARDED_WHY = {
    "torch-sharded": "values are this rank's ShardedTensor pieces; the other ranks' files hold the rest",
    "torch-local": "keys are FSDP1 flat parameters (`_flat_param`), not weight names",
    "torch-dtensor": "values are this rank's DTensor shards of each weight",
}


def check(path: Path | None, cfg=None, config_name: str = "") -> list[Finding]:
    """`cfg`: a loaded trainer JobConfig (diagnose --config) to compare the checkpoint with."""
    if path is None:
        return []
    try:
        info = detect.describe(path)
    except UnsafeCheckpoint as e:
        return [Finding("ckpt.safety", Status.FAIL, str(e), fix=e.fix, path=str(path))]
    except CheckpointError as e:
        return [Finding("ckpt.read", Status.FAIL, str(e), fix=e.fix or "", path=str(path))]
    out = [summary(info)]
    out += layout(info)
    if cfg is not None:
        out += fits(info, cfg.model, config_name or cfg.name)
    from titan_train.config.model_args import ModelArgs

    out += rope_scaling(
        info, cfg.model if cfg is not None else ModelArgs(), config_name or (cfg.name if cfg else str(path))
    )
    return out


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def summary(info: detect.CheckpointInfo) -> Finding:
    step = f"step {info.step}" if info.step is not None else "no step recorded"
    if info.keymap.to_ours:
        size = f"{_human(info.param_count)} parameters ({', '.join(info.dtypes)})"
    else:
        size = f"{len(info.tensors)} tensors, {_human(sum(t.numel for t in info.tensors.values()))} elements"
    message = f"{info.label}: {size}; optimizer state {'yes' if info.has_optimizer else 'no'}; {step}"
    km = info.keymap
    lines = [
        f"read: {info.root}",
        f"naming: {km.naming or 'no LLaMA weights recognized'}; prefixes: {', '.join(km.prefixes) or 'none'}"
        + (f"; wrappers: {', '.join(km.wrappers)}" if km.wrappers else ""),
        f"tensors: {len(info.tensors)} ({len(km.to_ours)} model weights, {len(km.other)} other), "
        f"non-tensor entries: {len(info.objects)}",
    ]
    if info.declared_by:
        lines.append(
            f"model shape from {info.declared_by}: "
            + ", ".join(f"{k}={v}" for k, v in info.declared.items() if k != "tie_word_embeddings")
        )
    lines += info.notes
    return Finding(
        "ckpt.format",
        Status.OK,
        message,
        detail="\n".join(lines),
        path=str(info.path),
        data={
            "format": info.format,
            "root": str(info.root),
            "parameters": info.param_count,
            "dtypes": info.dtypes,
            "optimizer": info.has_optimizer,
            "step": info.step,
            "naming": km.naming,
            "prefixes": km.prefixes,
            "wrappers": list(km.wrappers),
            "tensors": len(info.tensors),
            "model_weights": len(km.to_ours),
            "files": [str(f) for f in info.files],
            "declared": info.declared,
            "deepspeed_stage": info.deepspeed_stage,
        },
    )


def layout(info: detect.CheckpointInfo) -> list[Finding]:
    """Sharded parts, prefixes, foreign naming: what makes a plain load_state_dict fail."""
    out = []
    where, km = str(info.path), info.keymap
    if info.format in _SHARDED_WHY:
        parts = ", ".join(p.name for p in info.parts[:6]) + (" ..." if len(info.parts) > 6 else "")
        convertible = info.format == "torch-sharded"
        fix = (
            (
                f"titan-doctor convert {info.root} model.pt --to torch   (merges the {len(info.parts)} parts), or "
                f'start the trainer from it: [checkpoint] initial_load_path = "{info.root}"'
            )
            if convertible
            else detect.fix_for(info)
        )
        out.append(
            Finding(
                "ckpt.sharded",
                Status.WARN if convertible else Status.FAIL,
                f"{info.root.name} is one rank's part of a sharded save ({len(info.parts)} part file(s): {parts}), "
                "not a full state dict",
                detail=f"Loaded as a full state dict (load_state_dict, or a script reading "
                f"sd['layers.0.attention.wq.weight']) it fails with KeyError / missing keys: "
                f"{_SHARDED_WHY[info.format]}.",
                fix=fix,
                path=where,
                data={"parts": [str(p) for p in info.parts], "format": info.format},
            )
        )
    if info.format == "deepspeed" and info.deepspeed_stage == 3:
        out.append(
            Finding(
                "ckpt.deepspeed",
                Status.FAIL,
                "DeepSpeed ZeRO-3 checkpoint: the weights are partitioned inside the optimizer files",
                fix=detect.fix_for(info),
                path=where,
            )
        )
    if info.unmapped:
        names = list(info.unmapped)
        kind = f" (config.json model_type {info.declared['model_type']!r})" if info.declared.get("model_type") else ""
        out.append(
            Finding(
                "ckpt.unmapped",
                Status.WARN,
                f"{len(names)} model weight(s) the trainer's LLaMA has no place for{kind}: "
                + ", ".join(names[:3])
                + (" ..." if len(names) > 3 else ""),
                detail="Loading or converting would drop them and compute a different model (for example the q/k/v "
                "biases of Qwen2). initial_load_path and convert --config refuse such a checkpoint.",
                fix="Use a LLaMA-architecture checkpoint (no attention/MLP biases), or a trainer that models these weights",
                path=where,
                data={"keys": names},
            )
        )
    wrappers = {w: why for w, why in km.wrappers.items()}
    if wrappers:
        first = next(iter(wrappers))
        out.append(
            Finding(
                "ckpt.prefix",
                Status.WARN,
                "keys carry wrapper prefixes " + ", ".join(f"{w} ({why})" for w, why in wrappers.items()),
                detail="load_state_dict on the unwrapped model reports them as Missing/Unexpected key(s).",
                fix=(
                    f"titan-doctor convert {info.path} clean.pt --to torch --model-only   (strips them), or "
                    f"torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, '{first}'); "
                    "the trainer's initial_load_path strips them itself"
                ),
                path=where,
                data={"wrappers": list(wrappers)},
            )
        )
    containers = [p for p in km.prefixes if not p.startswith("module.")]
    if containers:
        meaning = naming.CONTAINERS.get(containers[0], "a container key around the state dict")
        out.append(
            Finding(
                "ckpt.prefix.container",
                Status.INFO,
                f"model weights sit under '{containers[0]}' ({meaning})",
                detail=f"A script that expects bare names (layers.0.attention.wq.weight) gets a KeyError: the keys are "
                f"{containers[0]}layers.0.attention.wq.weight.",
                fix=(
                    f"titan-doctor convert {info.path} model.pt --to torch --model-only   (bare names), or "
                    + _unwrap_hint(containers[0])
                ),
                path=where,
            )
        )
    if km.naming == naming.HF:
        out.append(
            Finding(
                "ckpt.naming",
                Status.INFO,
                "HuggingFace naming (model.layers.N.self_attn.q_proj.weight ...), q/k rows in HF's rotary order",
                detail="The trainer's names are Meta/torchtitan ones (layers.N.attention.wq.weight); HF permutes q/k "
                "rows inside each head. The trainer maps and un-permutes on load.",
                fix=f'[checkpoint] initial_load_path = "{info.path}", or titan-doctor convert {info.path} DST --to dcp',
                path=where,
            )
        )
    return out


def _unwrap_hint(container: str) -> str:
    """'model.' -> sd['model']; 'state_dict.model.' (Lightning: a dict of model.* names) -> the
    dict, then its names' prefix removed."""
    first, _, rest = container.partition(".")
    hint = f"index the loaded dict: sd = sd['{first}']"
    if rest:
        hint += f", then torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, '{rest}')"
    return hint


def rope_scaling(info: detect.CheckpointInfo, args, where: str) -> list[Finding]:
    """The RoPE scaling the checkpoint's config declares against the model's (`args`: the
    config's [model], or the trainer's defaults without --config)."""
    from titan_train.checkpoint.formats import fit

    out: list[Finding] = []
    differs = fit.scaling_differs(info.declared, args) if info.declared_by else ""
    if differs:
        out.append(
            Finding(
                "ckpt.rope_scaling",
                Status.WARN,
                f"{info.declared_by}: {differs}",
                detail="The weights load and the shapes agree, but q/k are rotated with other frequencies than the "
                "ones the model was trained with: outputs differ from the reference implementation (most at long "
                "context; the scaled low-frequency bands differ at every position).",
                fix="Set [model] rope_scaling_factor (and rope_low_freq_factor / rope_high_freq_factor / "
                "rope_original_seq_len) to what the checkpoint declares"
                if info.declared.get("rope_llama3") or not info.declared.get("rope_scaling")
                else "Expect a small mismatch that fine-tuning adapts to, or start from a release of the model "
                "without that scaling; compare logits with the reference implementation first",
                path=where,
                data={"rope_scaling": info.declared.get("rope_scaling")},
            )
        )
    return out


def fits(info: detect.CheckpointInfo, args, config: str) -> list[Finding]:
    """The checkpoint against the trainer's model of shape `args` ([model] of `config`)."""
    from titan_train.checkpoint.formats import fit

    if not info.keymap.to_ours:
        return [
            Finding(
                "ckpt.config",
                Status.FAIL,
                f"no LLaMA weights recognized in {info.root}; nothing to compare with {config}",
                path=str(info.path),
                fix="Check that this is a LLaMA checkpoint (names like layers.0.attention.wq.weight)",
            )
        ]
    result = fit.compare(info.model, args, fit.expected_shapes(args), info.declared, info.declared_by, info.unmapped)
    where = str(config)
    out = []
    d_model = next((d.checkpoint for d in result.fields if d.field == "d_model"), args.d_model)
    for d in result.fields:
        fix = d.fix(d_model, args.multiple_of)
        overrides = " ".join(f"--set model.{k}={v!r}" for k, v in d.settings(d_model, args.multiple_of).items())
        out.append(
            Finding(
                f"ckpt.config.{d.field}",
                Status.WARN if d.numeric else Status.FAIL,
                d.describe(),
                detail=(
                    "Shapes agree, but the model would compute something else than the one the "
                    "checkpoint was trained as."
                    if d.numeric
                    else ""
                ),
                fix=f"{fix} in {config}   (or titan-train run ... {overrides})",
                path=where,
                data={"field": d.field, "checkpoint": d.checkpoint, "config": d.config},
            )
        )
    for kind, title in (
        ("missing", "missing from the checkpoint"),
        ("unexpected", "in the checkpoint, not in the model"),
        ("shape", "with different shapes"),
    ):
        issues = [i for i in result.keys if i.kind == kind]
        if not issues:
            continue
        lines = [_issue_line(i) for i in issues[:20]] + ([f"... {len(issues) - 20} more"] if len(issues) > 20 else [])
        fields = sorted({_field_name(i.field) for i in issues if i.field})
        out.append(
            Finding(
                f"ckpt.config.{kind}",
                Status.FAIL,
                f"{len(issues)} key(s) {title}",
                detail="\n".join(lines),
                fix=(
                    f"fix [model] {', '.join(fields)} (see above)"
                    if fields
                    else "the checkpoint is from a different model; compare its names with layers.N.attention.wq.weight"
                ),
                path=where,
                data={"keys": [i.key for i in issues], "fields": fields},
            )
        )
    if not out:
        out.append(
            Finding(
                "ckpt.config",
                Status.OK,
                f"fits [model] of {config}: all {len(info.model)} weights present with the trainer's shapes",
                path=where,
            )
        )
    return out


def _field_name(field: str) -> str:
    return "multiple_of / ffn_dim_multiplier" if field == "ffn_dim" else field


def _issue_line(issue) -> str:
    field = f"  <- [model] {_field_name(issue.field)}" if issue.field else ""
    if issue.kind == "shape":
        return f"{issue.key}: checkpoint {list(issue.found)}, model {list(issue.expected)}{field}"
    shape = issue.expected if issue.kind == "missing" else issue.found
    return f"{issue.key} {list(shape or ())}{field}"
