"""Optimizer-side helpers: AdamW per model part, the LR schedule, fp16 loss scaling, and
the global gradient norm + clipping computed from local shards.

The grad norm is NPU-friendly: each rank sums the squares of its local gradient shards
(weighting a gradient replicated over k ranks by 1/k), then one explicit all-reduce per
mesh dim that has more than one rank adds the partial sums. No DTensor op runs (DTensor
dispatch is slow on NPU and costs extra all-reduces), clipping stays on the device, and
the norm reaches the host only when a caller asks for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict, set_optimizer_state_dict
from torch.distributed.checkpoint.stateful import Stateful

_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def lr_lambda(warmup: int, total: int, schedule: str, floor: float) -> Callable[[int], float]:
    """Linear warmup to 1, then cosine / linear decay to `floor` at the last step."""

    def factor(step: int) -> float:  # `step` = optimizer steps already taken
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant" or total <= warmup:
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        decay = 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1 - progress
        return floor + (1 - floor) * decay

    return factor


@dataclass
class LossScaler(Stateful):
    """Dynamic loss scaling for fp16 (disabled: scale stays 1). The overflow check uses the
    global gradient norm, which is already reduced over every shard, so all ranks skip or
    step together. Checkpointed, so a resumed run continues with the scale it had."""

    enabled: bool = False
    scale: float = 2.0**16
    good_steps: int = 0
    growth_interval: int = 1000

    def __post_init__(self):
        if not self.enabled:
            self.scale = 1.0

    def update(self, finite: bool) -> None:
        if not self.enabled:
            return
        if not finite:
            self.scale, self.good_steps = max(self.scale / 2, 1.0), 0
            return
        self.good_steps += 1
        if self.good_steps % self.growth_interval == 0:
            self.scale *= 2

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        if self.enabled:
            self.scale, self.good_steps = float(sd["scale"]), int(sd["good_steps"])


def reduce_partial_grads_(params) -> None:
    """Finish the gradients that tensor parallel leaves as pending sums (Partial placement:
    the weights of sequence-parallel norms when no FSDP reduces them), with one explicit
    all-reduce per mesh dim over all of them flattened together."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
    from torch.distributed.tensor import DTensor, Replicate

    pending: dict[tuple, list[torch.nn.Parameter]] = {}
    for p in params:
        if isinstance(p.grad, DTensor) and any(pl.is_partial() for pl in p.grad.placements):
            pending.setdefault((id(p.grad.device_mesh), tuple(p.grad.placements)), []).append(p)
    for group in pending.values():
        mesh, placements = group[0].grad.device_mesh, group[0].grad.placements
        locals_ = [p.grad.to_local() for p in group]
        flat = _flatten_dense_tensors(locals_)
        for dim, pl in enumerate(placements):
            if pl.is_partial():
                dist.all_reduce(flat, group=mesh.get_group(dim))
        done = [Replicate() if pl.is_partial() else pl for pl in placements]
        for p, value in zip(group, _unflatten_dense_tensors(flat, locals_)):
            p.grad = DTensor.from_local(value, mesh, done, run_check=False, shape=p.grad.shape, stride=p.grad.stride())


def _local_and_replication(grad: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The rank's own piece of a gradient, and on how many ranks that same piece lives."""
    from torch.distributed.tensor import DTensor

    if not isinstance(grad, DTensor):
        return grad, 1
    copies = 1
    for dim, placement in enumerate(grad.placements):
        if placement.is_partial():
            raise RuntimeError(f"gradient with a pending reduction {grad.placements}: cannot take its norm locally")
        if placement.is_replicate():
            copies *= grad.device_mesh.size(dim)
    return grad.to_local(), copies


def global_grad_norm(params, mesh, device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(L2 norm of all gradients of the whole model, on `device`; this rank's local gradient
    tensors). `mesh` is the full (dp, pp, tp) mesh; one all-reduce per dim with more than
    one rank. `device` is the collective's device (gradients may be offloaded to the host)."""
    by_copies: dict[int, list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            local, copies = _local_and_replication(p.grad)
            by_copies.setdefault(copies, []).append(local)
    sumsq = torch.zeros((), device=device, dtype=torch.float32)
    for copies, grads in by_copies.items():
        sumsq += torch.nn.utils.get_total_norm(grads, norm_type=2.0).to(device, torch.float32).square() / copies
    for name in mesh.mesh_dim_names:
        if mesh[name].size() > 1:
            dist.all_reduce(sumsq, group=mesh[name].get_group())
    return sumsq.sqrt(), [g for group in by_copies.values() for g in group]


def clip_(local_grads: list[torch.Tensor], norm: torch.Tensor, max_norm: float, scale: float = 1.0) -> None:
    """Scale gradients by 1/scale and clip them to max_norm (0 = no clipping), on the device.
    `norm` is the global norm of the scaled gradients."""
    if not local_grads:
        return
    coef = torch.full((), 1.0 / scale, device=norm.device)
    if max_norm > 0:
        coef = coef * (max_norm / (norm / scale + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(local_grads, coef.to(local_grads[0].device, local_grads[0].dtype))


class OptimizerParts(Stateful):
    """One AdamW per model part (a rank holds several pipeline stages with interleaved
    schedules), stepped together. Checkpointed flat by parameter FQN
    (`state.<fqn>.exp_avg`, `param_groups.<fqn>.lr`), so the keys do not depend on which
    stage or rank held a parameter, and a checkpoint resumes on another layout."""

    def __init__(self, model_parts, make: Callable[[Any], torch.optim.Optimizer]):
        self.parts = list(model_parts)
        self.optimizers = [make(part.parameters()) for part in self.parts]

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part, opt in zip(self.parts, self.optimizers):
            out.update(get_optimizer_state_dict(part, opt, options=_FLAT))
        return out

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        for part, opt in zip(self.parts, self.optimizers):
            own = get_optimizer_state_dict(part, opt, options=_FLAT).keys()
            set_optimizer_state_dict(part, opt, {k: sd[k] for k in own}, options=_FLAT)


class Schedulers(Stateful):
    """The LR schedule of each part's optimizer (all identical); saved once."""

    def __init__(self, optimizers: OptimizerParts, factor: Callable[[int], float]):
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in optimizers.optimizers]

    def step(self) -> None:
        for s in self.schedulers:
            s.step()

    @property
    def last_lr(self) -> float:
        return self.schedulers[0].get_last_lr()[0]

    def state_dict(self) -> dict[str, Any]:
        return self.schedulers[0].state_dict()

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        for s in self.schedulers:
            s.load_state_dict(dict(sd))
