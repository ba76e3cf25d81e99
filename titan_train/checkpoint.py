"""DCP checkpoints: model + optimizer + scheduler + progress in `step-N/` folders.

Keys are flat at the top level: `model.<fqn>` (for example
`model.layers.0.attention.wq.weight`), `optim.*` flattened by parameter FQN, `scheduler.*`,
`progress.*`, `loss_scaler.*`. FQNs are those of the unwrapped model on every layout and
pipeline stage, so DCP reshards a checkpoint onto any other mesh.

A checkpoint is written into `step-N.tmp/` and renamed to `step-N/` only after every rank
finished, so a folder named `step-N` is always complete; resume takes the newest one.
Retention (`keep_last_n`) deletes only complete, older folders.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.checkpoint.stateful import Stateful

_STEP_DIR = re.compile(r"^step-(\d+)$")


class CheckpointError(Exception):
    """A checkpoint this trainer cannot resume from (a user error, one line)."""


class ModelState(Stateful):
    """The model's parameters as flat FQN keys, merged over this rank's pipeline stages."""

    def __init__(self, model_parts):
        self.parts = list(model_parts)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for part in self.parts for k, v in get_model_state_dict(part).items()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        for part in self.parts:
            own = get_model_state_dict(part).keys()
            set_model_state_dict(part, {k: sd[k] for k in own})


def train_states(parts, progress) -> dict[str, Stateful]:
    """The top-level checkpoint keys (the converter and the checkpoint doctor rely on them):
    model.<fqn>, optim.state.<fqn>.<name> / optim.param_groups.<fqn>.<name>, scheduler.*,
    progress.*, loss_scaler.*."""
    return {"model": ModelState(parts.model_parts), "optim": parts.optimizers, "scheduler": parts.schedulers,
            "progress": progress, "loss_scaler": parts.scaler}


class Checkpointer:
    """Resume at start, save on the configured steps, wait at the end: the loop's three calls.
    Every method is collective (all ranks call it)."""

    def __init__(self, cfg, states: dict[str, Stateful], *, say=print):
        self.cfg, self.states, self.say = cfg, states, say

    def resume(self) -> int | None:
        """Load the newest complete checkpoint, if resuming; returns its step."""
        if dist.get_rank() == 0:
            remove_partial(self.cfg.folder)
        dist.barrier()
        found = latest(self.cfg.folder) if self.cfg.resume else None
        if not found:
            return None
        step, path = found
        load(path, self.states)
        self.say(f"[titan-train] resumed from {path} (step {step})")
        return step

    def maybe_save(self, step: int, *, last: bool = False) -> Path | None:
        """Save at every save_interval-th step and at the run's last step (when saving at all)."""
        interval = self.cfg.save_interval
        if not interval or (step % interval and not last):
            return None
        saved = save(self.cfg.folder, step, self.states)
        if dist.get_rank() == 0:
            pruned = prune(self.cfg.folder, self.cfg.keep_last_n)
            self.say(f"[titan-train] saved {saved}" + (f" (removed {len(pruned)} older)" if pruned else ""))
        dist.barrier()
        return saved

    def wait(self) -> None:
        """Return when every rank has finished its last save. Saves are synchronous today, so
        this is a barrier; an asynchronous save would be completed and renamed here."""
        dist.barrier()


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


def save(folder: str | Path, step: int, states: dict[str, Stateful]) -> Path:
    """Collective: every rank calls it. Returns the final `step-N` path."""
    folder = Path(folder)
    final, tmp = folder / f"step-{step}", folder / f"step-{step}.tmp"
    if dist.get_rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    dcp.save(states, checkpoint_id=str(tmp))
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    dist.barrier()
    return final


def load(path: str | Path, states: dict[str, Stateful]) -> None:
    keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    if any(k.startswith("train.") for k in keys):
        raise CheckpointError(f"{path} uses the old layout (train.model.*); the trainer now writes flat model.* keys: "
                              "resume it with the titan-npu version that wrote it, or start in a new checkpoint.folder")
    dcp.load(states, checkpoint_id=str(path))


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
