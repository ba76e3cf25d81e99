"""Mesh, tensor parallel plan and FSDP2, applied to a model still on the meta device.

Order as in torchtitan: tensor parallel first, then FSDP2 per transformer block and root.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass(frozen=True)
class ParallelDims:
    """dp_shard x tp = world size; validated before any process group exists."""

    dp: int
    tp: int

    @classmethod
    def for_world(cls, world_size: int, tp: int) -> "ParallelDims":
        if tp < 1 or world_size % tp:
            raise ValueError(f"distributed.tp_size = {tp} must divide the world size {world_size}")
        return cls(dp=world_size // tp, tp=tp)


def build_mesh(device_type: str, dims: ParallelDims) -> DeviceMesh:
    return init_device_mesh(device_type, (dims.dp, dims.tp), mesh_dim_names=("dp", "tp"))


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Megatron-style plan with sequence parallel on the norms: the residual stream is
    sharded on the sequence dim between blocks; q/k/v and w1/w3 are column-wise, wo and w2
    row-wise; the embedding is row-wise, the output column-wise with replicated logits."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel, parallelize_module)

    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None),
                                            desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        })


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, *, param_dtype: torch.dtype,
               cpu_offload: bool, sum_reductions_only: bool) -> None:
    """fully_shard each block, then the root. Gradients are reduced in fp32.

    sum_reductions_only: backends without AVG / PREMUL_SUM (gloo) reduce with SUM and
    FSDP divides afterwards.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    kwargs = {"mesh": dp_mesh, "mp_policy": mp}
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        # The last block is resharded by the root right away, so keep it gathered.
        fully_shard(block, reshard_after_forward=i < len(blocks) - 1, **kwargs)
    fully_shard(model, **kwargs)
    if sum_reductions_only:
        for module in model.modules():
            if hasattr(module, "set_force_sum_reduction_for_comms"):
                module.set_force_sum_reduction_for_comms(True)


def uses_fsdp(fsdp: bool, dims: ParallelDims, cpu_offload: bool) -> bool:
    """FSDP only where it does something: sharding over dp > 1 ranks, or offloading.
    On one data-parallel rank it would only add copies to every step."""
    return fsdp and (dims.dp > 1 or cpu_offload)


def parallelize(model: nn.Module, mesh: DeviceMesh, *, fsdp: bool, param_dtype: torch.dtype,
                cpu_offload: bool, sum_reductions_only: bool) -> None:
    """Apply TP (if tp > 1), then FSDP2 (if `fsdp`: callers decide with uses_fsdp)."""
    if mesh["tp"].size() > 1:
        apply_tp(model, mesh["tp"])
    if fsdp:
        apply_fsdp(model, mesh["dp"], param_dtype=param_dtype, cpu_offload=cpu_offload,
                   sum_reductions_only=sum_reductions_only)
