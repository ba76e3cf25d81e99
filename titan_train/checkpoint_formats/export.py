"""`[checkpoint] export_final`: the trained model as one consolidated torch.save state dict
(the FULL_STATE_DICT workflow: `model.load_state_dict(torch.load(path))`) or as HF
safetensors, written by rank 0 into `<checkpoint.folder>/export-step-N/`.

Parameters are gathered one at a time, so rank 0 holds at most one full copy (torch) or one
shard file (hf) of the weights.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from titan_train.checkpoint_formats import writers
from titan_train.checkpoint_formats.dtypes import SHORT_NAMES, torch_dtype

FORMATS = ("none", "torch", "hf")


def gather_full(model: torch.nn.Module, keep: bool, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, whole tensor) per parameter, gathered from its shards (a collective on every
    rank: every rank must exhaust this); only where `keep` are tensors yielded."""
    from torch.distributed.tensor import DTensor

    for name, param in model.named_parameters():
        full = param.full_tensor() if isinstance(param, DTensor) else param.detach()
        if keep:
            yield name, full.to(device="cpu", dtype=dtype)


def export_final(model: torch.nn.Module, folder: str | Path, fmt: str, *, args, step: int,
                 dtype: str = "fp32") -> Path | None:
    """Collective. Returns the export folder (None for fmt "none")."""
    if fmt == "none":
        return None
    rank = dist.get_rank() if dist.is_initialized() else 0
    target = Path(folder) / f"export-step-{step}"
    items = gather_full(model, rank == 0, torch_dtype(SHORT_NAMES[dtype]))
    if rank == 0:
        with writers.atomic_output(target, overwrite=True) as tmp:
            if fmt == "torch":
                tmp.mkdir()
                writers.write_torch(dict(items), tmp / "model.pt")
            else:
                writers.write_hf(items, tmp, args, dtype=SHORT_NAMES[dtype])
    else:
        for _ in items:
            pass
    if dist.is_initialized():
        dist.barrier()
    return target
