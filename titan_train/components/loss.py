"""The training loss, in one place for the eager step and the pipeline's last stage.

Under tensor parallel the output projection leaves the logits sharded over the vocabulary
(a DTensor, parallelize.apply_tp) and the cross-entropy runs under torch's loss_parallel,
so no rank ever holds full-vocabulary logits: each computes its shard's log-softmax with
two small all-reduces (max and sum over the vocabulary). `loss_context` must cover the
backward too, where the same context computes the sharded gradient.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn


def loss_context(tensor_parallel: bool):
    """torch's loss_parallel when the logits are vocabulary-sharded DTensors, else nothing."""
    if not tensor_parallel:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token loss, computed in fp32 whatever the compute dtype; a plain tensor even for
    vocabulary-sharded logits (the loss is then replicated: every tp rank has the mean)."""
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
    return loss.to_local() if hasattr(loss, "to_local") else loss


def chunked_cross_entropy(hidden: torch.Tensor, output: nn.Module, targets: torch.Tensor, chunks: int) -> torch.Tensor:
    """The mean token loss of `output(hidden)`, computed `chunks` sequence pieces at a time,
    each piece under activation checkpointing: forward keeps only the loss of a piece, and
    backward recomputes its logits one piece at a time, so no more than one piece of logits
    (and of their fp32 temporaries and gradients) ever exists. The result and the gradients
    are those of cross_entropy(output(hidden), targets), up to float summation order.

    Under tp, hidden is sequence-sharded (a DTensor from the sequence-parallel norm): each
    rank cuts its own shard (b, s/tp, d), the output projection all-gathers piece c of every
    rank's shard in rank order, so the targets are cut the same way."""
    from torch.utils.checkpoint import checkpoint

    hidden = hidden.to_local() if hasattr(hidden, "to_local") else hidden
    tp = targets.shape[1] // hidden.shape[1]
    pieces = targets.unflatten(1, (tp, -1)).chunk(chunks, dim=2)
    total = None
    for h, y in zip(hidden.chunk(chunks, dim=1), pieces):
        piece = checkpoint(_summed_loss, output, h, y.flatten(1), use_reentrant=False)
        total = piece if total is None else total + piece
    return total / targets.numel()


def _summed_loss(output: nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(output(hidden).flatten(0, 1).float(), targets.flatten(), reduction="sum")
    return loss.to_local() if hasattr(loss, "to_local") else loss
