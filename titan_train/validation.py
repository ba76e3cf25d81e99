"""The held-out loss ([validation]): every `every` steps, `batches` batches of the validation
dataset go forward only through the model as it is trained, and the mean token loss and its
perplexity go to the rank-0 line and to every metrics sink (metrics.jsonl, TensorBoard).

A validation batch is a training batch's shape (training.batch_size sequences of seq_len,
cut into the same micro-batches over the same dp ranks), read in order from the start of the
dataset, so every evaluation scores the same samples and the figure is comparable across
steps and layouts: one rank, FSDP, TP and the pipeline (its schedule's forward-only `eval`)
give the same loss. Each rank's mean over its micro-batches is summed over the world and
divided by dp x tp (pipeline ranks without the last stage add zero; tp ranks hold copies).
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from titan_train.components.loss import chunked_cross_entropy, cross_entropy, loss_context
from titan_train.data import samples
from titan_train.data import stream as data
from titan_train.distributed.pipeline import PipelineStep
from titan_train.runtime.profiling import span


class Validator:
    """Built once before the loop; `maybe_run(step, sinks)` after each step does the rest."""

    def __init__(self, cfg, parts, dp_rank: int, torch_dev, say=print):
        v, t = cfg.validation, cfg.training
        self.enabled, self.every, self.batches = bool(v.dataset), v.every, v.batches
        self.parts, self.dp_rank, self.torch_dev, self.say = parts, dp_rank, torch_dev, say
        self.seq_len, self.batch_size, self.loss_chunks = t.seq_len, t.batch_size, t.loss_chunks
        self.layout = data.BatchLayout(t.batch_size, t.grad_accum_steps, parts.dims.dp)
        if self.enabled:
            self.stream = samples.open_held_out(cfg.data, v.dataset, cfg.model.vocab_size, t.seq_len, log=say)
            say(f"[titan-train] validation every {v.every} steps: {v.batches} batch(es) of {self.stream.description}")

    def due(self, step: int) -> bool:
        return self.enabled and step % self.every == 0

    def maybe_run(self, step: int, sinks: list) -> dict | None:
        """At a due step: evaluate, print one line, write the record to every sink."""
        if not self.due(step):
            return None
        start = time.perf_counter()
        with span("validation"):
            loss = self.loss()
        record = {
            "step": step,
            "event": "validation",
            "validation_loss": loss,
            "validation_perplexity": math.exp(min(loss, 700.0)),  # exp overflows a float past ~709
            "validation_tokens": self.batches * self.batch_size * self.seq_len,
        }
        self.say(
            f"[titan-train] validation step {step} | loss {loss:.4f} | perplexity {record['validation_perplexity']:.2f} "
            f"| {record['validation_tokens']:,} tokens in {time.perf_counter() - start:.1f} s",
            flush=True,
        )
        for sink in sinks:
            sink.write(record)
        return record

    def loss(self) -> float:
        """The mean token loss over the validation batches, the same number on every rank."""
        total = torch.zeros((), device=self.torch_dev)
        for b in range(self.batches):
            for micro in range(self.layout.accum):
                indices = data.sample_indices(b * self.batch_size, self.layout, micro, self.dp_rank)
                inputs, targets = (
                    torch.from_numpy(a).to(self.torch_dev) for a in self.stream.batch(indices, self.seq_len)
                )
                total += self._micro_loss(inputs, targets)
        dist.all_reduce(total)
        dims = self.parts.dims
        return total.item() / (dims.dp * dims.tp * self.batches * self.layout.accum)

    def _micro_loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """This rank's mean token loss of one micro-batch, forward only."""
        parts = self.parts
        if isinstance(parts.forward_backward, PipelineStep):
            return parts.forward_backward.evaluate(inputs, targets)
        model = parts.model_parts[0]
        with torch.no_grad(), loss_context(parts.dims.tp > 1), parts.precision.autocast(parts.device.type):
            if self.loss_chunks > 1:
                return chunked_cross_entropy(model(inputs, head=False), model.output, targets, self.loss_chunks)
            return cross_entropy(model(inputs), targets)
