"""The trainer's precision names (`training.mixed_precision`, `export_dtype`, `--dtype`) and
what each stands for: the one table the config, the memory planner, MFU, parallelize, the
checkpoint formats and the torchtitan reader all read. Torch-free at import."""

from __future__ import annotations

# short name -> (torch dtype name, bytes per element)
PRECISIONS = {"fp32": ("float32", 4), "bf16": ("bfloat16", 2), "fp16": ("float16", 2)}

DTYPE_NAMES = {short: name for short, (name, _) in PRECISIONS.items()}  # "bf16" -> "bfloat16"
SHORT_NAMES = {name: short for short, name in DTYPE_NAMES.items()}  # "bfloat16" -> "bf16"
BYTES = {short: size for short, (_, size) in PRECISIONS.items()}  # "bf16" -> 2


def torch_dtype(precision: str):
    """torch.float32 / bfloat16 / float16 for a short name (torch imported late)."""
    import torch

    return getattr(torch, DTYPE_NAMES[precision])
