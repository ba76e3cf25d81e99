"""Every rank runs the same job: checked over the process group before the first step.

Two static nodes started with different configs (another optimizer.lr), or reading data
or a tokenizer that differ in content at the same path (a copy per node), would otherwise
train together and exit 0 with a loss that belongs to no config. Each rank describes its
job (the resolved config, the layout, the content of its data and tokenizer) and every
rank compares all of them, so each one refuses with the same line, naming the rank and the
field.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch.distributed as dist

from titan_train.config.job import ConfigError, JobConfig, to_dict
from titan_train.config.parallel_dims import ParallelDims


def describe(cfg: JobConfig, dims: ParallelDims, data_identity: dict[str, Any]) -> dict[str, str]:
    """field -> value (as text): what must be equal on every rank."""
    out = {
        f"{section}.{key}": json.dumps(value, sort_keys=True)
        for section, values in to_dict(cfg).items()
        if isinstance(values, dict)
        for key, value in values.items()
    }
    out["layout"] = dims.describe()
    out.update({f"data content ({k})": str(v) for k, v in data_identity.items()})
    return out


def digest(described: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def first_difference(everyone: list[dict[str, str]]) -> str | None:
    """The line naming the first rank whose job differs from rank 0's, and how."""
    base = everyone[0]
    for rank, other in enumerate(everyone[1:], start=1):
        for field in sorted(set(base) | set(other)):
            if base.get(field) != other.get(field):
                return (
                    f"rank {rank} runs another job than rank 0: {field} is {other.get(field)} there and "
                    f"{base.get(field)} on rank 0; start every node with the same config, data and tokenizer"
                )
    return None


def check(cfg: JobConfig, dims: ParallelDims, data_identity: dict[str, Any]) -> None:
    """Collective. Only digests cross the network unless they differ; then the full
    descriptions, so the refusal can name the field."""
    mine = describe(cfg, dims, data_identity)
    digests: list = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest(mine))
    if len(set(digests)) == 1:
        return
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    raise ConfigError(first_difference(everyone) or "ranks describe different jobs")
