"""Activation checkpointing (AC) of transformer blocks, the first remedy for "out of memory".

- full: a block keeps only its input; everything inside is recomputed in backward.
- selective: a block keeps the outputs of its expensive ops (matmuls, attention, and the
  tensor-parallel reduce-scatter) and recomputes the cheap ones (norms, RoPE, SiLU, the
  element-wise products), through torch's selective-checkpoint contexts.
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

# Ops whose outputs selective AC keeps, by name: some exist only on some builds / devices.
_SAVED_OPS = (
    "aten.mm.default",
    "aten.addmm.default",
    "aten.bmm.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "npu.npu_fusion_attention.default",
    "_c10d_functional.reduce_scatter_tensor.default",
)


def saved_ops() -> set:
    """The OpOverloads selective AC saves, among those this torch build has."""
    found = set()
    for name in _SAVED_OPS:
        namespace, op, overload = name.split(".")
        try:
            found.add(getattr(getattr(getattr(torch.ops, namespace), op), overload))
        except (AttributeError, RuntimeError):
            continue
    return found


def _selective_context(save: frozenset):
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def wrap_block(block: nn.Module, mode: str) -> nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "full":
        return checkpoint_wrapper(block, preserve_rng_state=False)
    if mode == "selective":
        context = functools.partial(_selective_context, frozenset(saved_ops()))
        return checkpoint_wrapper(block, preserve_rng_state=False, context_fn=context)
    raise ValueError(f"activation checkpoint mode {mode!r}; use one of {', '.join(MODES)}")


def apply_ac(model: nn.Module, mode: str, every: int = 1) -> None:
    """Wrap every `every`-th block of `model.layers` (by layer id) in place."""
    if mode == "none":
        return
    for name, block in list(model.layers.named_children()):
        if int(name) % every == 0:
            model.layers[name] = wrap_block(block, mode)
