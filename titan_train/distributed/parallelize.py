"""Tensor parallel plan, activation checkpointing, compile and FSDP2, applied to a model
(or a pipeline stage of it) still on the meta device.

Order as in torchtitan: tensor parallel, then AC, then torch.compile per block, then FSDP2
per transformer block and root. The mixed-precision decision is made here, once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from titan_train.config.parallel_dims import ParallelDims, fsdp_mesh
from titan_train.config.precision import torch_dtype
from titan_train.distributed.activation_checkpoint import apply_ac


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Megatron-style plan with sequence parallel on the norms: the residual stream is
    sharded on the sequence dim between blocks; q/k/v and w1/w3 are column-wise, wo and w2
    row-wise; the embedding is row-wise, the output column-wise with its logits left sharded
    over the vocabulary (a DTensor) for the loss to run under loss_parallel (loss.py)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    ends = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    # a pipeline stage holds the embedding only if first, norm and output only if last
    parallelize_module(model, tp_mesh, {k: v for k, v in ends.items() if getattr(model, k) is not None})
    for block in model.layers.values():
        parallelize_module(
            block,
            tp_mesh,
            {
                "attention_norm": SequenceParallel(),
                "attention": PrepareModuleInput(
                    input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
                ),
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                "ffn_norm": SequenceParallel(),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "feed_forward.w1": ColwiseParallel(),
                "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            },
        )


def apply_fsdp(
    model: nn.Module,
    dp_mesh: DeviceMesh,  # 1-D: FSDP; 2-D (dp_replicate, dp_shard): HSDP
    *,
    param_dtype: torch.dtype,
    cpu_offload: bool,
    sum_reductions_only: bool,
    pipelined: bool = False,
) -> None:
    """fully_shard each block, then the root. Gradients are reduced in fp32.

    sum_reductions_only: backends without AVG / PREMUL_SUM (gloo) reduce with SUM and
    FSDP divides afterwards. pipelined: a stage runs several micro-batches forward before
    their backward, so blocks stay gathered instead of being gathered again per micro-batch.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    kwargs = {"mesh": dp_mesh, "mp_policy": mp}
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        # The last block is resharded by the root right away, so keep it gathered.
        fully_shard(block, reshard_after_forward=not pipelined and i < len(blocks) - 1, **kwargs)
    fully_shard(model, **kwargs)
    if sum_reductions_only:
        for module in model.modules():
            if hasattr(module, "set_force_sum_reduction_for_comms"):
                module.set_force_sum_reduction_for_comms(True)


@dataclass(frozen=True)
class Precision:
    """The mixed-precision decision: with FSDP, its MixedPrecisionPolicy casts parameters
    to `param_dtype` for compute; without FSDP, autocast does (reductions stay fp32)."""

    name: str  # fp32 | bf16 | fp16
    fsdp: bool  # shard with FSDP2

    @property
    def param_dtype(self) -> torch.dtype:
        return torch_dtype(self.name)

    def autocast(self, device_type: str):
        if self.fsdp or self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=self.param_dtype)


def precision_plan(mixed_precision: str, dims: ParallelDims, *, fsdp: bool, cpu_offload: bool) -> Precision:
    """FSDP only where it does something (ParallelDims.uses_fsdp)."""
    return Precision(mixed_precision, fsdp=dims.uses_fsdp(fsdp, cpu_offload))


def parallelize(
    model: nn.Module,
    mesh: DeviceMesh,
    precision: Precision,
    *,
    ac: str = "none",
    ac_every: int = 1,
    ac_option: str = "all_mm",
    dp_replicate: int = 1,
    compile: bool = False,
    cpu_offload: bool = False,
    sum_reductions_only: bool = False,
    pipelined: bool = False,
) -> None:
    """TP (if tp > 1), AC (if not "none"), torch.compile per block, FSDP2 (if precision.fsdp;
    HSDP when dp_replicate > 1)."""
    if mesh["tp"].size() > 1:
        apply_tp(model, mesh["tp"])
    apply_ac(model, ac, ac_every, ac_option)
    if compile:
        for block in model.layers.values():
            block.compile()
    if precision.fsdp:
        apply_fsdp(
            model,
            fsdp_mesh(mesh, dp_replicate),
            param_dtype=precision.param_dtype,
            cpu_offload=cpu_offload,
            sum_reductions_only=sum_reductions_only,
            pipelined=pipelined,
        )
