"""Rank program for the multi-rank checkpoint tests (started by torch.distributed.run).

    python -m torch.distributed.run --standalone --nproc-per-node N ckpt_worker.py MODE OUT [SRC]

fsdp1      FSDP1 saves of a tiny LLaMA with torch.save: FULL (rank 0), SHARDED and LOCAL parts
           (one file per rank), plus what a full-state-dict loader reports on a LOCAL part.
fsdp2      FSDP2 over 2 ranks: one AdamW step, then a DCP save in the trainer's layout
           ({"model", "optim"}), per-rank torch.save of the DTensor state dict, export_final
           as torch and hf, the full weights and the next losses; then hf_logits.
resume     TP=2 env: dp x tp layout; load_initial(model_only=False) from SRC, the same
           losses and full weights to compare with fsdp2's; then hf_logits.
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
import torch.nn.functional as F

from titan_train.checkpoint_formats.export import export_final
from titan_train.model import ModelArgs, Transformer, TransformerBlock
from titan_train.parallel import ParallelDims, build_mesh, parallelize

ARGS = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=16, max_seq_len=16)
SEED = 7


def batch(i: int, world_dp: int, dp_rank: int):
    g = torch.Generator().manual_seed(1000 + i)
    tokens = torch.randint(0, ARGS.vocab_size, (4, 9), generator=g)
    per = tokens.shape[0] // world_dp
    mine = tokens[dp_rank * per:(dp_rank + 1) * per]
    return mine[:, :-1], mine[:, 1:]


def build(tp: int):
    world = dist.get_world_size()
    dims = ParallelDims.for_world(world, tp)
    mesh = build_mesh("cpu", dims)
    with torch.device("meta"):
        model = Transformer(ARGS)
    parallelize(model, mesh, fsdp=dims.dp > 1, param_dtype=torch.float32, cpu_offload=False,
                sum_reductions_only=True)
    model.to_empty(device="cpu")
    model.init_weights(SEED)
    return model, mesh


def global_loss(model, i, mesh) -> float:
    inputs, targets = batch(i, mesh["dp"].size(), mesh["dp"].get_local_rank())
    with torch.no_grad():
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss = loss.detach().clone()
    dist.all_reduce(loss)
    return loss.item() / dist.get_world_size()


def train_step(model, opt, i, mesh) -> None:
    inputs, targets = batch(i, mesh["dp"].size(), mesh["dp"].get_local_rank())
    F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def full_weights(model) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def fsdp1(out: Path) -> None:
    from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel as FSDP, StateDictType
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
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, mesh = build(tp=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train_step(model, opt, 0, mesh)
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(out / "dcp"))
    torch.save(model.state_dict(), out / f"dtensor_rank{dist.get_rank()}.pt")
    for fmt in ("torch", "hf"):
        export_final(model, out / f"export_{fmt}", fmt, args=ARGS, step=1)
    _record(model, opt, mesh, out, "fsdp2")
    hf_logits(out)


def _record(model, opt, mesh, out: Path, name: str) -> None:
    """Full weights now, the loss of the next step, then one more step and the loss after it
    (which depends on the optimizer state)."""
    weights = full_weights(model)
    next_loss = global_loss(model, 1, mesh)
    train_step(model, opt, 1, mesh)
    after = global_loss(model, 2, mesh)
    if dist.get_rank() == 0:
        torch.save(weights, out / f"{name}_weights.pt")
        (out / f"{name}_losses.json").write_text(json.dumps({"next": next_loss, "after_step": after}))


def resume(out: Path, src: Path) -> None:
    from titan_train.checkpoint_formats.initial_load import load_initial

    model, mesh = build(tp=int(os.environ.get("TP", "1")))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    message = load_initial(model, src, args=ARGS, model_only=False, optimizer=opt)
    if dist.get_rank() == 0:
        (out / "resume_message.txt").write_text(message)
    _record(model, opt, mesh, out, f"resume_tp{mesh['tp'].size()}")
    hf_logits(out)


def hf_logits(out: Path) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from titan_train.checkpoint_formats.initial_load import load_initial

    tp = int(os.environ.get("TP", "1"))
    tokens = torch.randint(0, ARGS.vocab_size, (2, 8), generator=torch.Generator().manual_seed(3))
    via_hf, _ = build(tp)
    via_hf.init_weights(SEED + 1)   # anything but the checkpoint's values
    load_initial(via_hf, out / "hf", args=ARGS)
    native, _ = build(tp)
    set_model_state_dict(native, torch.load(out / "native.pt", weights_only=True),
                         options=StateDictOptions(full_state_dict=True))
    with torch.no_grad():
        a, b = via_hf(tokens), native(tokens)
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
