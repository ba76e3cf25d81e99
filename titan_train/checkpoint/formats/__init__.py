"""Checkpoint formats other tools write, read safely: DCP folders, torch.save files (full,
FSDP1 sharded / local parts), HuggingFace safetensors, Meta consolidated.NN.pth, DeepSpeed.

The trainer uses this package to start from a foreign checkpoint (`initial_load.py`) and to
export its result (`export.py`); `titan-doctor diagnose --checkpoint` and `convert` use the
same readers. Nothing here executes code from a checkpoint: pickles are read inertly or
through an allow-list (`pickles.py`), safetensors headers are parsed as JSON.

Importing the package (and `detect`, `naming`, `pickles`, `safetensors_io`) does not import
torch, so the doctor can describe a checkpoint in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass


class CheckpointError(Exception):
    """A checkpoint cannot be read or does not fit: one line saying what is wrong, and
    optionally the fix (the doctor shows it on its own line)."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__(message)
        self.fix = fix


class UnsafeCheckpoint(CheckpointError):
    """The checkpoint would run code (or build objects outside the allow-list) if loaded."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as a checkpoint describes it, without its data."""

    shape: tuple[int, ...]
    dtype: str  # torch dtype name: "float32", "bfloat16", ...

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n
