"""One optimizer step: forward + backward over the micro-batches, global grad norm, clip,
optimizer and LR schedule. Also where training stands (`Progress`, checkpointed).

`train_step` keeps everything on the device: it returns tensors, not floats, so nothing
waits for the host unless fp16 needs its overflow check. That is also what lets the memory
planner run it under FakeTensorMode. How forward + backward runs is the part's own
callable: eager here, the pipeline schedule with pipeline parallel (pipeline.py). The
phases are `span`s: named ranges in a profiler trace, and the phase the hang watchdog reports.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful

from titan_train.components.loss import chunked_cross_entropy, cross_entropy, loss_context
from titan_train.components.optim import clip_, global_grad_norm, reduce_partial_grads_
from titan_train.runtime.profiling import span


@dataclass
class StepStats:
    loss: torch.Tensor  # this rank's share of the step's mean loss, not yet reduced over ranks
    grad_norm: torch.Tensor  # global gradient norm (unscaled), already reduced over every mesh dim
    lr: float  # the learning rate this step used
    loss_scale: float | None  # the fp16 loss scale this step used (None without fp16)
    skipped: bool = False  # fp16 overflow: the optimizer did not step


@dataclass
class Progress(Stateful):
    """Where training stands; with the sample count, the data order resumes exactly."""

    step: int = 0
    samples: int = 0

    def advance(self, batch_size: int) -> None:
        self.step += 1
        self.samples += batch_size

    def state_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.step, self.samples = int(sd["step"]), int(sd["samples"])


def eager_forward_backward(
    model: nn.Module,
    autocast,
    accum: int,
    scaler,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    tp: int = 1,
    loss_chunks: int = 1,
) -> torch.Tensor:
    """One micro-batch through the whole model; returns its (detached) loss / accum.
    tp > 1: the logits are vocabulary-sharded (loss.loss_context). loss_chunks > 1: the
    output projection and the loss run a piece of the sequence at a time (loss.py)."""
    with loss_context(tp > 1):
        with span("forward"):
            with autocast():
                if loss_chunks > 1:
                    hidden = model(inputs, head=False)
                    loss = chunked_cross_entropy(hidden, model.output, targets, loss_chunks) / accum
                else:
                    logits = model(inputs)
                    loss = cross_entropy(logits, targets) / accum
                    # autograd keeps what the loss's backward needs (the log-softmax, not the
                    # logits): dropping our reference frees them before backward, as torchtitan does
                    del logits
        with span("backward"):
            (loss * scaler.scale if scaler.enabled else loss).backward()
    return loss.detach()


def train_step(parts, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> StepStats:
    """Accumulate gradients over `batches` (the micro-batches of one optimizer step), clip
    them by the global norm, step the optimizer and the LR schedule."""
    loss = torch.zeros((), device=parts.device)
    for inputs, targets in batches:
        loss += parts.forward_backward(inputs, targets)
    scale = parts.scaler.scale
    with span("optimizer"):  # global grad norm, clipping, the optimizer and LR schedule
        reduce_partial_grads_(parts.parameters())
        norm, local_grads = global_grad_norm(parts.parameters(), parts.mesh, parts.device)
        skipped = False
        if parts.scaler.enabled:  # fp16 must know on the host whether to step
            skipped = not math.isfinite(norm.item())
            parts.scaler.update(not skipped)
        if not skipped:
            clip_(local_grads, norm, parts.max_norm, scale)
            parts.optimizers.step()
        lr = parts.schedulers.last_lr
        parts.schedulers.step()
        parts.optimizers.zero_grad()
    return StepStats(
        loss=loss, grad_norm=norm / scale, lr=lr, loss_scale=scale if parts.scaler.enabled else None, skipped=skipped
    )
