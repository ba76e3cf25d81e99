"""Activation checkpointing (AC) of transformer blocks, the first remedy for "out of memory".

- full: a block keeps only its input; everything inside is recomputed in backward.
- selective: a block keeps the outputs of chosen ops and recomputes the rest (norms, RoPE,
  SiLU, the element-wise products), through torch's selective-checkpoint contexts. Which
  ops is `training.selective_ac_option`:
    all_mm: every matmul, attention and the tensor-parallel reduce-scatter;
    op:     torchtitan's op-level policy: attention, the reduce-scatter and every second
            matmul, counted within the block in call order (wq, wv, w1, w2 kept; wk, wo, w3
            recomputed), so one block keeps about a third less than all_mm for four matmuls
            of recompute (facts: pytorch/torchtitan v0.2.2 torchtitan/distributed/
            activation_checkpoint.py, `_save_list` and its "every second mm" policy).
Either applies to every `every`-th block, counted by the block's layer id, so pipeline
stages agree on which blocks are checkpointed. Applied between tensor parallel and FSDP
(parallel.py), as torchtitan does; FQNs keep their names in checkpoints because DCP's
state-dict helpers drop the wrapper's prefix.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

MODES = ("none", "full", "selective")
SELECTIVE_OPTIONS = ("all_mm", "op")

# Ops whose outputs selective AC keeps, by name: some exist only on some builds / devices.
_ATTENTION_AND_COMMS = (
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "npu.npu_fusion_attention.default",
    "_c10d_functional.reduce_scatter_tensor.default",
)
_SAVED_OPS = {
    "all_mm": ("aten.mm.default", "aten.addmm.default", "aten.bmm.default", *_ATTENTION_AND_COMMS),
    # torchtitan's list also keeps max (the amax of low-precision scaling); its mm are halved below
    "op": ("aten.mm.default", "aten.max.default", *_ATTENTION_AND_COMMS),
}


def saved_ops(option: str = "all_mm") -> set:
    """The OpOverloads selective AC saves under `option`, among those this torch build has."""
    found = set()
    for name in _SAVED_OPS[option]:
        namespace, op, overload = name.split(".")
        try:
            found.add(getattr(getattr(getattr(torch.ops, namespace), op), overload))
        except (AttributeError, RuntimeError):
            continue
    return found


def _selective_context(save: frozenset, every_second_mm: bool):
    """A fresh policy per checkpointed call of a block. Forward and recompute count their
    matmuls apart, so the recompute asks for exactly the outputs the forward saved."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    mm_seen = {False: 0, True: 0}  # by ctx.is_recompute

    def policy(ctx, op, *args, **kwargs):
        keep = op in save
        if every_second_mm and op == torch.ops.aten.mm.default:
            mm_seen[ctx.is_recompute] += 1
            keep = mm_seen[ctx.is_recompute] % 2 == 1
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def wrap_block(block: nn.Module, mode: str, option: str = "all_mm") -> nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "full":
        return checkpoint_wrapper(block, preserve_rng_state=False)
    if mode == "selective":
        if option not in SELECTIVE_OPTIONS:
            raise ValueError(f"selective AC option {option!r}; use one of {', '.join(SELECTIVE_OPTIONS)}")
        context = functools.partial(_selective_context, frozenset(saved_ops(option)), option == "op")
        return checkpoint_wrapper(block, preserve_rng_state=False, context_fn=context)
    raise ValueError(f"activation checkpoint mode {mode!r}; use one of {', '.join(MODES)}")


def apply_ac(model: nn.Module, mode: str, every: int = 1, option: str = "all_mm") -> None:
    """Wrap every `every`-th block of `model.layers` (by layer id) in place."""
    if mode == "none":
        return
    for name, block in list(model.layers.named_children()):
        if int(name) % every == 0:
            model.layers[name] = wrap_block(block, mode, option)
