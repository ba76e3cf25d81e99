"""The loss in sequence pieces (training.loss_chunks): the same loss and gradients as the
whole-sequence loss, with no more than a piece of logits alive at any time."""

from __future__ import annotations

import pytest
import torch

from titan_train.build import build
from titan_train.config import job as config
from titan_train.config.parallel_dims import ParallelDims

from .conftest import REPO


def _loss_and_grads(chunks: int, tokens: torch.Tensor):
    cfg = config.load(REPO / "configs" / "llama_debug.toml", ["training.seq_len=64", "model.n_layers=2"])
    parts = build(cfg, ParallelDims(dp=1), torch.device("cpu"))
    model = parts.model_parts[0]
    loss = parts.forward_backward(tokens[:, :-1], tokens[:, 1:], loss_chunks=chunks)  # the step's own partial
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("chunks", [2, 8])
def test_chunked_loss_gives_the_whole_sequence_loss_and_gradients(chunks, world_of_one):
    tokens = torch.randint(0, 2048, (2, 65), generator=torch.Generator().manual_seed(0))
    whole, whole_grads = _loss_and_grads(1, tokens)
    chunked, chunked_grads = _loss_and_grads(chunks, tokens)
    assert chunked == pytest.approx(whole, abs=1e-6)
    for name, grad in whole_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-6, rtol=0, msg=name)


def test_no_more_than_a_piece_of_logits_is_ever_alive():
    """Peak memory of the loss alone (output projection + cross-entropy, forward and
    backward) on fake tensors: with 8 pieces it is a fraction of the whole-sequence peak."""
    from torch.distributed._tools.mem_tracker import MemTracker

    from titan_train.components.loss import chunked_cross_entropy, cross_entropy

    b, s, d, v = 2, 256, 64, 4096
    weight = torch.nn.Parameter(torch.randn(v, d) * d**-0.5)

    def output(h):  # the projection as a function: MemTracker refuses a module called per piece
        return torch.nn.functional.linear(h, weight)

    targets = torch.randint(0, v, (b, s))
    peaks = {}
    for chunks in (1, 8):
        hidden = torch.randn(b, s, d, requires_grad=True)
        tracker = MemTracker()
        tracker.track_external(weight, hidden)
        with tracker:
            loss = (
                cross_entropy(output(hidden), targets)
                if chunks == 1
                else chunked_cross_entropy(hidden, output, targets, chunks)
            )
            loss.backward()
        peaks[chunks] = max(tracker.get_tracker_snapshot("peak")[torch.device("cpu")].values())
        weight.grad = None
    logits = b * s * v * 4
    assert peaks[1] > 3 * logits  # the logits, the log-softmax and their gradients, all at once
    assert peaks[8] < peaks[1] / 3, peaks
