"""Rank program for the multi-rank checkpoint tests (started by torch.distributed.run).

    python -m torch.distributed.run --standalone --nproc-per-node N ckpt_worker.py MODE OUT [SRC]

fsdp1      FSDP1 saves of a tiny LLaMA with torch.save: FULL (rank 0), SHARDED and LOCAL parts
           (one file per rank), plus what a full-state-dict loader reports on a LOCAL part.
fsdp2      the trainer's build() on 2 FSDP ranks: one AdamW step, then the trainer's own save
           (OUT/trainer/step-1), per-rank torch.save of the DTensor state dict, export_final
           as torch and hf through the Checkpointer, the full weights and the next losses;
           then hf_logits.
resume     TP=2 env: dp x tp layout; a Checkpointer with initial_load_path = SRC and
           initial_load_model_only = false; the same losses and full weights to compare with
           fsdp2's; then hf_logits.
hf_logits  (with OUT/hf and OUT/native.pt present) the model loaded from OUT/hf via
           load_initial vs the same weights loaded natively (torch's set_model_state_dict):
           the logits of both, on this layout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from titan_train.build import build as build_parts
from titan_train.components.loss import cross_entropy, loss_context
from titan_train.config.job import JobConfig, OptimizerConfig, TrainingConfig
from titan_train.config.model_args import ModelArgs
from titan_train.config.parallel_dims import ParallelDims
from titan_train.models.llama import Transformer, TransformerBlock

ARGS = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=16, max_seq_len=16)
SEED = 7


def batch(i: int, world_dp: int, dp_rank: int):
    g = torch.Generator().manual_seed(1000 + i)
    tokens = torch.randint(0, ARGS.vocab_size, (4, 9), generator=g)
    per = tokens.shape[0] // world_dp
    mine = tokens[dp_rank * per : (dp_rank + 1) * per]
    return mine[:, :-1], mine[:, 1:]


def build(tp: int, seed: int = SEED):
    """The trainer's own build() (FSDP2 over dp, TP over tp, its OptimizerParts) of ARGS."""
    cfg = JobConfig(
        model=ARGS,
        optimizer=OptimizerConfig(lr=1e-2),
        training=TrainingConfig(batch_size=4, seq_len=8, warmup_steps=0, lr_schedule="constant", seed=seed),
    )
    return build_parts(cfg, ParallelDims.for_world(dist.get_world_size(), tp=tp), torch.device("cpu"))


def _loss(parts, inputs, targets, backward: bool = False) -> torch.Tensor:
    """The trainer's loss: under tp the logits are vocabulary-sharded, so it (and its backward)
    runs under loss_parallel, as titan_train.step does."""
    with loss_context(parts.mesh["tp"].size() > 1):
        loss = cross_entropy(parts.model_parts[0](inputs), targets)
        if backward:
            loss.backward()
    return loss


def global_loss(parts, i) -> float:
    mesh = parts.mesh
    inputs, targets = batch(i, mesh["dp"].size(), mesh["dp"].get_local_rank())
    with torch.no_grad():
        loss = _loss(parts, inputs, targets)
    loss = loss.detach().clone()
    dist.all_reduce(loss)
    return loss.item() / dist.get_world_size()


def train_step(parts, i) -> None:
    mesh = parts.mesh
    inputs, targets = batch(i, mesh["dp"].size(), mesh["dp"].get_local_rank())
    _loss(parts, inputs, targets, backward=True)
    parts.optimizers.step()
    parts.optimizers.zero_grad()


def full_weights(parts) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(parts.model_parts[0], options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def fsdp1(out: Path) -> None:
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    rank = dist.get_rank()
    model = Transformer(ARGS)
    model.init_weights(SEED)
    if rank == 0:
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, out / "reference.pt")
    fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({TransformerBlock}), device_id=torch.device("cpu"))
    with FSDP.state_dict_type(fsdp, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):
        sd = fsdp.state_dict()
        if rank == 0:
            torch.save(sd, out / "full.pt")
    with FSDP.state_dict_type(fsdp, StateDictType.SHARDED_STATE_DICT):
        torch.save(fsdp.state_dict(), out / f"sharded_rank{rank}.pt")
    with FSDP.state_dict_type(fsdp, StateDictType.LOCAL_STATE_DICT):
        torch.save(fsdp.state_dict(), out / f"local_rank{rank}.pt")
    dist.barrier()
    if rank == 0:  # what a conversion script that expects a full state dict gets from a part
        loaded = torch.load(out / "local_rank0.pt", weights_only=False)
        try:
            loaded["layers.0.attention.wq.weight"]
        except KeyError as e:
            (out / "keyerror.txt").write_text(f"KeyError: {e}\n")


def fsdp2(out: Path) -> None:
    """One step on 2 FSDP ranks, saved by the trainer's Checkpointer (its DCP layout) and
    exported by it (export_final torch and hf)."""
    from titan_train.checkpoint.manager import Checkpointer, save, train_states
    from titan_train.config.job import CheckpointConfig
    from titan_train.step import Progress

    parts = build(tp=1)
    train_step(parts, 0)
    progress = Progress(step=1, samples=4)
    states = train_states(parts, progress)
    save(out / "trainer", 1, states)
    torch.save(parts.model_parts[0].state_dict(), out / f"dtensor_rank{dist.get_rank()}.pt")
    for fmt in ("torch", "hf"):
        Checkpointer(
            CheckpointConfig(folder=str(out / f"export_{fmt}"), export_final=fmt), states, model_args=ARGS
        ).finish(1, complete=True)
    _record(parts, out, "fsdp2")
    hf_logits(out)


def _record(parts, out: Path, name: str) -> None:
    """Full weights now, the loss of the next step, then one more step and the loss after it
    (which depends on the optimizer state)."""
    weights = full_weights(parts)
    next_loss = global_loss(parts, 1)
    train_step(parts, 1)
    after = global_loss(parts, 2)
    if dist.get_rank() == 0:
        torch.save(weights, out / f"{name}_weights.pt")
        (out / f"{name}_losses.json").write_text(json.dumps({"next": next_loss, "after_step": after}))


def resume(out: Path, src: Path) -> None:
    """A new run (nothing to resume) that starts from SRC with initial_load_model_only = false,
    through the Checkpointer as the trainer calls it."""
    from titan_train.checkpoint.manager import Checkpointer, train_states
    from titan_train.config.job import CheckpointConfig
    from titan_train.step import Progress

    parts = build(tp=int(os.environ.get("TP", "1")), seed=SEED + 5)  # anything but the checkpoint's values
    messages = []
    cfg = CheckpointConfig(folder=str(out / "resume_run"), initial_load_path=str(src), initial_load_model_only=False)
    assert Checkpointer(cfg, train_states(parts, Progress()), model_args=ARGS, say=messages.append).resume() is None
    if dist.get_rank() == 0:
        (out / "resume_message.txt").write_text("\n".join(messages))
    _record(parts, out, f"resume_tp{parts.mesh['tp'].size()}")
    hf_logits(out)


def _whole(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def hf_logits(out: Path) -> None:
    """The model loaded from OUT/hf via load_initial vs the same weights (OUT/native.pt) set
    by torch's set_model_state_dict, on this layout."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from titan_train.checkpoint.initial_load import load_initial

    tp = int(os.environ.get("TP", "1"))
    tokens = torch.randint(0, ARGS.vocab_size, (2, 8), generator=torch.Generator().manual_seed(3))
    via_hf = build(tp, seed=SEED + 1).model_parts  # anything but the checkpoint's values
    load_initial(via_hf, out / "hf", args=ARGS)
    native = build(tp).model_parts[0]
    set_model_state_dict(
        native, torch.load(out / "native.pt", weights_only=True), options=StateDictOptions(full_state_dict=True)
    )
    with torch.no_grad():  # under tp the logits are vocabulary-sharded DTensors: gathered whole
        a, b = (_whole(m(tokens)) for m in (via_hf[0], native))
    if dist.get_rank() == 0:
        torch.save({"hf": a, "native": b}, out / f"logits_tp{tp}.pt")


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    try:
        if mode == "fsdp1":
            fsdp1(out)
        elif mode == "fsdp2":
            fsdp2(out)
        elif mode == "resume":
            resume(out, Path(sys.argv[3]))
        else:
            raise SystemExit(f"unknown mode {mode}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
