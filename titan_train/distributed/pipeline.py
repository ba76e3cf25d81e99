"""Pipeline parallel: the model's blocks split into stages, run by a schedule of
torch.distributed.pipelining (GPipe, 1F1B, interleaved 1F1B).

A stage is the full model built on meta with the blocks of other stages deleted, and the
embedding (first stage only) or the final norm and output (last stage only) set to None.
Parameter names therefore stay those of the whole model (`layers.5.attention.wq.weight`
on whichever stage holds it): checkpoints do not depend on the pipeline layout.

Only the last stage computes the loss. The loss function divides by the number of
micro-batches and accumulation steps itself (the schedule's own grad scaling is off, as
it would rescale gradients accumulated over earlier accumulation steps).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from titan_train.components.loss import cross_entropy, loss_context
from titan_train.config.model_args import ModelArgs
from titan_train.models.kernels import Kernels
from titan_train.models.llama import Transformer
from titan_train.runtime.profiling import span


def local_stage_ids(pp_rank: int, pp_size: int, n_stages: int) -> list[int]:
    """Stages this pp rank runs: one, or (interleaved) every pp_size-th in a loop."""
    return list(range(pp_rank, n_stages, pp_size))


def carve_stage(args: ModelArgs, layer_ids: list[int], ops: Kernels, *, first: bool, last: bool) -> Transformer:
    """The model on meta with only this stage's pieces, calling `ops`; names unchanged."""
    with torch.device("meta"):
        model = Transformer(args, ops)
    keep = {str(i) for i in layer_ids}
    for name in [n for n in model.layers if n not in keep]:
        del model.layers[name]
    if not first:
        model.tok_embeddings = None
    if not last:
        model.norm = None
        model.output = None
    return model


def stage_io(
    args: ModelArgs,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int,
    hidden_dtype: torch.dtype,
    logits_dtype: torch.dtype,
    first: bool,
    last: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stage's example input and output (meta tensors): token ids into the first stage,
    logits out of the last, the residual stream between (sequence-sharded under tp). Given
    up front, stages need not exchange shapes over the network before the first step, which
    also lets the memory planner run a stage alone on a fake process group."""
    seq = seq_len // tp if tp > 1 else seq_len
    hidden = torch.empty(micro_batch, seq, args.d_model, dtype=hidden_dtype, device="meta", requires_grad=True)
    inputs = torch.empty(micro_batch, seq_len, dtype=torch.long, device="meta") if first else hidden
    outputs = (
        torch.empty(micro_batch, seq_len, args.vocab_size, dtype=logits_dtype, device="meta", requires_grad=True)
        if last
        else hidden
    )
    return inputs, outputs


def make_schedule(
    stages: list[nn.Module],
    stage_ids: list[int],
    n_stages: int,
    *,
    pp_group,
    device: torch.device,
    schedule: str,
    microbatches: int,
    loss_fn: Callable,
    io: list[tuple[torch.Tensor, torch.Tensor]],
):
    """`io`: each stage's (example input, example output), see stage_io."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    pipeline_stages = [
        PipelineStage(module, sid, n_stages, device, input_args=inputs, output_args=outputs, group=pp_group)
        for module, sid, (inputs, outputs) in zip(stages, stage_ids, io)
    ]
    if schedule == "interleaved_1f1b":
        return ScheduleInterleaved1F1B(pipeline_stages, microbatches, loss_fn=loss_fn, scale_grads=False)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    return cls(pipeline_stages[0], microbatches, loss_fn=loss_fn, scale_grads=False)


class PipelineStep:
    """The pipeline's forward + backward of one (accumulation) micro-step: the inputs go
    in at the first stage, the targets at the last; returns this rank's loss share
    (zero on ranks without the last stage)."""

    def __init__(
        self,
        *,
        has_first: bool,
        has_last: bool,
        microbatches: int,
        accum: int,
        autocast,
        scaler,
        device: torch.device,
        tensor_parallel: bool = False,
    ):
        self.schedule = None  # made with this object's loss_fn (make_schedule)
        self.has_first, self.has_last = has_first, has_last
        self.tensor_parallel = tensor_parallel  # the last stage's logits are vocabulary-sharded
        self.autocast, self.scaler, self.device = autocast, scaler, device
        self.divisor = microbatches * accum

    def loss_fn(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = cross_entropy(logits, targets) / self.divisor
        return loss * self.scaler.scale if self.scaler.enabled else loss

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.has_first else ()
        kwargs = {"target": targets, "losses": losses} if self.has_last else {}
        # torch names each micro-batch's Forward i / Backward i
        with span("forward_backward"), self.autocast(), loss_context(self.tensor_parallel and self.has_last):
            # return_outputs=False: otherwise the last stage keeps every micro-batch's logits
            # until the step ends, to return them merged (the memory planner found this)
            self.schedule.step(*args, return_outputs=False, **kwargs)
        if not losses:
            return torch.zeros((), device=self.device)
        total = torch.stack([loss.detach() for loss in losses]).sum()
        return total / self.scaler.scale if self.scaler.enabled else total

    def evaluate(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward only (the schedule's eval: no backward, no gradients): this rank's mean
        loss over the micro-batches, zero on ranks without the last stage (validation.py)."""
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.has_first else ()
        kwargs = {"target": targets, "losses": losses} if self.has_last else {}
        with torch.no_grad(), self.autocast(), loss_context(self.tensor_parallel and self.has_last):
            self.schedule.eval(*args, return_outputs=False, **kwargs)
        if not losses:
            return torch.zeros((), device=self.device)
        total = torch.stack([loss.detach() for loss in losses]).sum() * self.divisor / len(losses)
        return total / self.scaler.scale if self.scaler.enabled else total
