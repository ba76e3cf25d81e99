"""The training loss, in one place for the eager step and the pipeline's last stage."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token loss, computed in fp32 whatever the compute dtype."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
