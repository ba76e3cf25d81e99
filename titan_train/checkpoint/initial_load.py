"""`[checkpoint] initial_load_path`: start a run from a checkpoint in any supported format.

Called by the Checkpointer's `resume()` once, after the model is parallelized and
materialized, before the first step, and only when the run does not resume from its own
folder. Each rank reads only what its FSDP / TP shards and its pipeline stages cover: a DCP
checkpoint in the trainer's naming goes through DCP's own resharding load; everything else is
read slice by slice (sources.py). A checkpoint that does not fit
the [model] config is refused before anything is loaded, naming the field that disagrees.
"""

from __future__ import annotations

from pathlib import Path

import torch

from titan_train.checkpoint.formats import CheckpointError, detect, fit, naming
from titan_train.checkpoint.formats.detect import CheckpointInfo
from titan_train.checkpoint.formats.sources import Source


def open_checked(path: str | Path, args) -> tuple[CheckpointInfo, Source]:
    """Describe `path`, open its weights, and refuse it unless it fits `args` (ModelArgs)."""
    info = detect.describe(path)
    source = Source(info, heads={"n_heads": args.n_heads, "n_kv_heads": args.kv_heads})
    result = fit.compare(info.model, args, fit.expected_shapes(args), info.declared, info.declared_by, info.unmapped)
    if not result.ok:
        raise CheckpointError(fit.one_line(result, args, f"checkpoint {path}"))
    return info, source


def load_initial(model_parts, path: str | Path, *, args, optimizers=None) -> str:
    """Fill this rank's model parts (one model, or its pipeline stages; plain, FSDP2 or TP
    DTensors) from `path`; with `optimizers` (the trainer's OptimizerParts) also their AdamW
    moments (a DCP checkpoint in the trainer's layout). Collective when distributed: every
    rank calls it, each with its own parts. Returns one line saying what was loaded."""
    parts = list(model_parts)
    info, source = open_checked(path, args)
    if optimizers is not None:
        _check_has_optimizer(info, path)
    if info.format == "dcp" and info.keymap.naming == naming.OURS:
        loaded = _load_dcp(parts, info, optimizers)
    else:
        loaded = _load_slices(parts, source)
    naming_note = ", HF names mapped, q/k un-permuted" if info.keymap.naming == naming.HF else ""
    stages = f" into {len(parts)} local pipeline stage(s)" if len(parts) > 1 else ""
    return (
        f"initial weights from {path}: {info.label}{naming_note}, {loaded} tensors{stages}"
        + ("" if optimizers is None else " + optimizer state")
        + "".join(f"\n[titan-train] warning: {w}" for w in numeric_warnings(info, args))
    )


def numeric_warnings(info: CheckpointInfo, args) -> list[str]:
    """What loads but computes differently from the checkpoint's own model: rope_theta /
    norm_eps its config.json or params.json declares, and RoPE scaling the trainer lacks."""
    result = fit.compare(info.model, args, {}, info.declared, info.declared_by)
    out = [
        f"{d.describe()}; {d.fix(args.d_model, args.multiple_of)} to compute what the checkpoint was trained as"
        for d in result.fields
        if d.numeric
    ]
    differs = fit.scaling_differs(info.declared, args) if info.declared_by else ""
    if differs:
        out.append(
            f"{info.declared_by}: {differs}: outputs differ from the model the weights were trained as"
            + ("; set model.rope_scaling_factor to match" if info.declared.get("rope_llama3") else "")
        )
    return out


def _check_has_optimizer(info: CheckpointInfo, path: str | Path) -> None:
    """initial_load_model_only = false: only a DCP checkpoint in the trainer's layout carries
    AdamW moments under the trainer's parameter names."""
    if info.format != "dcp" or not info.has_optimizer:
        raise CheckpointError(
            f"checkpoint.initial_load_model_only = false needs a DCP checkpoint with "
            f"optimizer state; {path} is a {info.label}" + ("" if info.format != "dcp" else " without optimizer state"),
            fix="set checkpoint.initial_load_model_only = true (weights only)",
        )


def _load_slices(parts, source: Source) -> int:
    """Each parameter reads only the slice its DTensor shard covers; a pipeline stage holds
    only its own layers, so it reads only theirs (names are the whole model's)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    count = 0
    with torch.no_grad():
        for name, param in (item for part in parts for item in part.named_parameters()):
            if isinstance(param, DTensor):
                local = param.to_local()
                shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
                index = tuple(slice(o, o + s) for o, s in zip(offset, shape))
            else:
                local, index = param, None
            if local.numel():
                local.copy_(source.read(name, index).to(local.device))
            count += 1
    return count


def _load_dcp(parts, info: CheckpointInfo, optimizers) -> int:
    """DCP's resharding load straight into the sharded parameters (and optimizer moments) this
    rank holds; the keys of other pipeline stages are left to the ranks that hold them."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from titan_train.checkpoint.formats import dcp_io

    model_sd = {k: v for part in parts for k, v in get_model_state_dict(part).items()}
    to_load = {raw: model_sd[ours] for raw, ours in info.keymap.to_ours.items() if ours in model_sd}
    optim_sd = optimizers.state_dict() if optimizers is not None else None  # flat: state.<fqn>.<name>
    if optim_sd is not None:
        root = info.keymap.prefix[: -len("model.")] if info.keymap.prefix.endswith("model.") else ""
        for key, value in optim_sd.items():
            if key.startswith("state.") and torch.is_tensor(value):
                raw = f"{root}optim.{key}"
                if raw not in info.tensors:
                    raise CheckpointError(
                        f"{info.root}: optimizer state {raw} is missing; the checkpoint's "
                        "optimizer does not match this run's (AdamW over the same parameters)",
                        fix="set checkpoint.initial_load_model_only = true",
                    )
                to_load[raw] = value
    dcp_io.load_into(to_load, info.root)
    loaded = {ours: to_load[raw] for raw, ours in info.keymap.to_ours.items() if ours in model_sd}
    for part in parts:
        own = get_model_state_dict(part).keys()
        set_model_state_dict(part, {k: loaded[k] for k in own})
    if optim_sd is not None:
        optimizers.load_state_dict(optim_sd)
    return len(loaded)


def preflight(cfg) -> None:
    """Before any rank starts: a run that will start from checkpoint.initial_load_path gets
    its one-line error now if that checkpoint is missing, unreadable, unsafe or does not fit
    [model]. Metadata only; nothing is loaded."""
    from titan_train.checkpoint import manager as checkpoint

    ck = cfg.checkpoint
    if not ck.initial_load_path or (ck.resume and checkpoint.latest(ck.folder)):
        return
    info, _ = open_checked(ck.initial_load_path, cfg.model)
    if not ck.initial_load_model_only:
        _check_has_optimizer(info, ck.initial_load_path)
