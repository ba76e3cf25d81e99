"""`[checkpoint] export_final`: the trained model as one consolidated torch.save state dict
(the FULL_STATE_DICT workflow: `model.load_state_dict(torch.load(path))`) or as HF
safetensors, written by rank 0 into `<checkpoint.folder>/export-step-N/`.

Parameters are gathered one at a time, in the whole model's order, so rank 0 holds at most
one full copy (torch) or one shard file (hf) of the weights. With pipeline parallel a
parameter lives on one pipeline rank only: the ranks of that stage gather it among
themselves (FSDP / TP shards) and the lowest of them sends it to rank 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from titan_train.checkpoint.formats import CheckpointError, writers
from titan_train.checkpoint.formats.dtypes import SHORT_NAMES, torch_dtype


def _whole_model(args) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter of the whole model, in its order (meta: no memory)."""
    from titan_train.models.llama import Transformer

    with torch.device("meta"):
        model = Transformer(args)
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def _holders(own: set[str], names: list[str]) -> dict[str, int]:
    """name -> the lowest global rank holding it (collective: every rank says what it holds)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return {name: 0 for name in names}
    held: list[list[str] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(held, sorted(own))
    holders: dict[str, int] = {}
    for rank, ranks_names in enumerate(held):
        for name in ranks_names or ():
            holders.setdefault(name, rank)
    missing = [n for n in names if n not in holders]
    if missing:
        raise RuntimeError(f"export: no rank holds {missing[:3]} (the pipeline stages do not cover the model)")
    return holders


def _comm_device() -> torch.device:
    """Where point-to-point transfers live: host memory for gloo, else the current accelerator."""
    if dist.get_backend() == "gloo":
        return torch.device("cpu")
    return torch.accelerator.current_accelerator()


def gather_full(model_parts, args, dtype: torch.dtype, names=None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, whole tensor on the host) per parameter of the whole model, yielded on rank 0
    only. Collective: every rank must exhaust it (on the others it yields nothing).
    `names`: _whole_model(args), when the caller has it already."""
    from torch.distributed.tensor import DTensor

    own = {name: p for part in model_parts for name, p in part.named_parameters()}
    names = names or _whole_model(args)
    holders = _holders(set(own), [n for n, _ in names])
    rank = dist.get_rank() if dist.is_initialized() else 0
    for name, shape in names:
        owner = holders[name]
        if name in own:
            param = own[name]
            full = (param.full_tensor() if isinstance(param, DTensor) else param.detach()).to(dtype)
            if rank == 0:
                yield name, full.cpu()
            elif rank == owner:
                dist.send(full.to(_comm_device()).contiguous(), dst=0)
        elif rank == 0:
            buf = torch.empty(shape, dtype=dtype, device=_comm_device())
            dist.recv(buf, src=owner)
            yield name, buf.cpu()


# The file each format's export always holds; writers.atomic_output makes it all-or-nothing.
_MAIN_FILE = {"torch": "model.pt", "hf": "config.json"}


def _holds(path: Path, fmt: str) -> bool:
    return (path / _MAIN_FILE[fmt]).is_file() and not writers.foreign_files(path, fmt)


def export_dir(folder: str | Path, step: int, fmt: str) -> Path:
    """Where step N's `fmt` export goes: export-step-N, unless that already holds something
    else (the other format's export from an earlier run, which is kept): then beside it,
    export-step-N-<fmt>."""
    plain = Path(folder) / f"export-step-{step}"
    if not plain.exists() or _holds(plain, fmt):
        return plain
    return plain.with_name(f"{plain.name}-{fmt}")


def existing_export(folder: str | Path, step: int, fmt: str) -> Path | None:
    """Step N's `fmt` export when one is already there (a rerun of a finished job)."""
    if fmt not in _MAIN_FILE:
        return None
    target = export_dir(folder, step, fmt)
    return target if _holds(target, fmt) else None


def _decide_target(folder: str | Path, step: int, fmt: str, rank: int) -> Path:
    """Rank 0 picks the folder (and refuses one that holds files an export does not write);
    every rank learns the outcome, so a refusal raises everywhere instead of leaving the
    other ranks waiting in the gather."""
    decision: list = [None]
    if rank == 0:
        target = export_dir(folder, step, fmt)
        try:
            if target.exists():
                writers.refuse_foreign(target, fmt, is_file_output=False)
            decision = [("ok", str(target))]
        except CheckpointError as e:
            decision = [("refused", str(e), e.fix)]
    if dist.is_initialized():
        dist.broadcast_object_list(decision, src=0)
    if decision[0][0] == "refused":
        raise CheckpointError(decision[0][1], fix=decision[0][2])
    return Path(decision[0][1])


def export_final(model_parts, folder: str | Path, fmt: str, *, args, step: int, dtype: str = "fp32") -> Path | None:
    """Collective. Returns the export folder (None for fmt "none")."""
    if fmt == "none":
        return None
    rank = dist.get_rank() if dist.is_initialized() else 0
    target = _decide_target(folder, step, fmt, rank)
    names, cast = _whole_model(args), torch_dtype(SHORT_NAMES[dtype])
    items = gather_full(list(model_parts), args, cast, names)
    if rank == 0:
        needed = sum(math.prod(shape) for _, shape in names) * cast.itemsize  # what a full disk's line says
        with writers.atomic_output(target, overwrite=True, needed=needed) as tmp:
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
