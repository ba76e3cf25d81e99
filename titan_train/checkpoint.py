"""DCP checkpoints: model + optimizer + scheduler + progress in `step-N/` folders.

A checkpoint is written into `step-N.tmp/` and renamed to `step-N/` only after every rank
finished, so a folder named `step-N` is always complete; resume takes the newest one.
Retention (`keep_last_n`) deletes only complete, older folders.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

_STEP_DIR = re.compile(r"^step-(\d+)$")


class TrainState(Stateful):
    """Everything a resumed run needs, as one DCP Stateful (sharded where the model is)."""

    def __init__(self, model, optimizer, scheduler, progress: dict[str, int]):
        self.model, self.optimizer, self.scheduler, self.progress = model, optimizer, scheduler, progress

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd,
                "scheduler": self.scheduler.state_dict(), "progress": dict(self.progress)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        self.scheduler.load_state_dict(sd["scheduler"])
        self.progress.update(sd["progress"])


def complete_steps(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / ".metadata").is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest(folder: str | Path) -> tuple[int, Path] | None:
    steps = complete_steps(folder)
    return steps[-1] if steps else None


def _begin(folder: str | Path, step: int) -> tuple[Path, Path]:
    """(step-N.tmp, step-N): an empty tmp folder every rank can write into."""
    folder = Path(folder)
    final, tmp = folder / f"step-{step}", folder / f"step-{step}.tmp"
    if dist.get_rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    return tmp, final


def _commit(tmp: Path, final: Path) -> Path:
    """Every rank's write is done: only now does the folder get its resumable name."""
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    dist.barrier()
    return final


def save(folder: str | Path, step: int, state: TrainState) -> Path:
    """Collective: every rank calls it. Returns the final `step-N` path."""
    tmp, final = _begin(folder, step)
    dcp.save({"train": state}, checkpoint_id=str(tmp))
    return _commit(tmp, final)


# ---- [checkpoint] async_save: the write runs in the background while training goes on ----

@dataclass
class PendingSave:
    step: int
    tmp: Path
    final: Path
    future: Any        # concurrent.futures.Future from dcp.async_save

    def done(self) -> bool:
        return self.future.done()


def async_group():
    """Collective, once per run: a gloo group of its own for the background writer, whose
    plan exchange must never interleave with the training step's collectives (torchtitan
    does the same). gloo works for every device: async_save stages to host memory first."""
    return dist.new_group(backend="gloo")


def start_async_save(folder: str | Path, step: int, state: TrainState, group) -> PendingSave:
    """Collective. Stages the state to host memory (training may change it right after this
    returns) and writes step-N.tmp in a background thread."""
    tmp, final = _begin(folder, step)
    future = dcp.async_save({"train": state}, checkpoint_id=str(tmp), process_group=group)
    return PendingSave(step, tmp, final, future)


def finish_async_save(pending: PendingSave) -> Path:
    """Collective. Waits for this rank's write, then renames step-N.tmp -> step-N once every
    rank's write is done. Call before the next save, and before exit."""
    pending.future.result()
    return _commit(pending.tmp, pending.final)


def load(path: str | Path, state: TrainState) -> None:
    dcp.load({"train": state}, checkpoint_id=str(path))


def prune(folder: str | Path, keep_last_n: int) -> list[Path]:
    """Delete all but the newest `keep_last_n` complete checkpoints (rank 0 only)."""
    if keep_last_n <= 0:
        return []
    doomed = [path for _, path in complete_steps(folder)[:-keep_last_n]]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def remove_partial(folder: str | Path) -> None:
    """Leftover `step-N.tmp` folders from a crashed save are never resumed from; clear them."""
    folder = Path(folder)
    if folder.is_dir():
        for child in folder.glob("step-*.tmp"):
            shutil.rmtree(child, ignore_errors=True)
