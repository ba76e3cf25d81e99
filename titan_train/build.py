"""`build(cfg, dims, device) -> TrainParts`: everything a training step needs.

The model is built on the meta device (per pipeline stage with pp > 1), parallelized
(TP -> AC -> compile -> FSDP, parallel.py), materialized with each rank drawing only its
shard, then given its optimizer and LR schedule. The process group must exist; the caller
picks the device. The memory planner calls this same function under FakeTensorMode with
a fake process group, so nothing here reads values back to the host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.distributed.device_mesh import DeviceMesh

from titan_train.components.optim import LossScaler, OptimizerParts, Schedulers, lr_lambda
from titan_train.config.job import JobConfig, pipeline_microbatches, pipeline_stages
from titan_train.config.parallel_dims import ParallelDims, stage_layers
from titan_train.distributed import pipeline
from titan_train.distributed.parallelize import Precision, parallelize, precision_plan
from titan_train.models import kernels
from titan_train.models.kernels import Kernels
from titan_train.models.llama import Transformer
from titan_train.step import eager_forward_backward


@dataclass
class TrainParts:
    model_parts: list[nn.Module]  # one model, or this rank's pipeline stages
    optimizers: OptimizerParts
    schedulers: Schedulers
    scaler: LossScaler
    mesh: DeviceMesh  # (dp, pp, tp)
    dims: ParallelDims
    precision: Precision
    device: torch.device
    max_norm: float
    kernels: Kernels  # the fused ops every stage's model calls (kernels.for_device)
    # (inputs, targets) of one micro-batch -> its detached loss share, after backward
    forward_backward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def parameters(self):
        return [p for part in self.model_parts for p in part.parameters()]


def build(cfg: JobConfig, dims: ParallelDims, device: torch.device, mesh: DeviceMesh | None = None) -> TrainParts:
    t, d = cfg.training, cfg.distributed
    mesh = mesh if mesh is not None else dims.build_mesh(device.type)
    precision = precision_plan(t.mixed_precision, dims, fsdp=d.fsdp, cpu_offload=d.cpu_offload)
    autocast = functools.partial(precision.autocast, device.type)
    scaler = LossScaler(enabled=t.mixed_precision == "fp16")
    ops = kernels.for_device(device.type)  # the one choice: every stage, and the planner's fake build, get these

    def prepare(model: Transformer, pipelined: bool) -> Transformer:
        with unset_fake_temporarily():  # the model is still on meta; meshes made here hold ranks, not data
            parallelize(
                model,
                mesh,
                precision,
                ac=t.activation_checkpoint,
                ac_every=t.ac_every,
                ac_option=t.selective_ac_option,
                dp_replicate=dims.dp_replicate,
                compile=t.compile,
                cpu_offload=d.cpu_offload,
                sum_reductions_only=dist.get_backend() == "gloo",
                pipelined=pipelined,
            )
        model.to_empty(device="cpu" if d.cpu_offload else device)
        model.init_weights(t.seed)
        return model

    if dims.pp > 1:
        n_stages = pipeline_stages(d)
        ids = pipeline.local_stage_ids(mesh["pp"].get_local_rank(), dims.pp, n_stages)
        layers = stage_layers(cfg.model.n_layers, n_stages)
        parts = [
            prepare(pipeline.carve_stage(cfg.model, layers[i], ops, first=i == 0, last=i == n_stages - 1), True)
            for i in ids
        ]
        step = pipeline.PipelineStep(
            has_first=0 in ids,
            has_last=n_stages - 1 in ids,
            microbatches=pipeline_microbatches(d),
            accum=t.grad_accum_steps,
            autocast=autocast,
            scaler=scaler,
            device=device,
            tensor_parallel=dims.tp > 1,
        )
        # the residual stream is fp32 under autocast (the embedding is not autocast)
        micro = t.batch_size // (dims.dp * t.grad_accum_steps * pipeline_microbatches(d))
        io = [
            pipeline.stage_io(
                cfg.model,
                micro_batch=micro,
                seq_len=t.seq_len,
                tp=dims.tp,
                logits_dtype=precision.param_dtype,
                hidden_dtype=precision.param_dtype if precision.fsdp else torch.float32,
                first=i == 0,
                last=i == n_stages - 1,
            )
            for i in ids
        ]
        step.schedule = pipeline.make_schedule(
            parts,
            ids,
            n_stages,
            pp_group=mesh["pp"].get_group(),
            device=device,
            schedule=d.pp_schedule,
            microbatches=pipeline_microbatches(d),
            loss_fn=step.loss_fn,
            io=io,
        )
        forward_backward = step
    else:
        with torch.device("meta"):
            model = Transformer(cfg.model, ops)
        parts = [prepare(model, False)]
        forward_backward = functools.partial(
            eager_forward_backward,
            model,
            autocast,
            t.grad_accum_steps,
            scaler,
            tp=dims.tp,
            loss_chunks=t.loss_chunks,
        )

    o = cfg.optimizer
    optimizers = OptimizerParts(
        parts,
        lambda params: torch.optim.AdamW(
            params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay, foreach=True
        ),
    )
    schedulers = Schedulers(optimizers, lr_lambda(t.warmup_steps, t.steps, t.lr_schedule, t.min_lr_ratio))
    return TrainParts(
        parts, optimizers, schedulers, scaler, mesh, dims, precision, device, t.max_norm, ops, forward_backward
    )
