"""`diagnose --config ... --exact`: the trainer's own `build` and `train_step`, run for one
rank under FakeTensorMode on a fake process group of the target world size, with torch's
memory tracker counting every tensor the step allocates. No real memory is allocated.

What runs is exactly what `titan-train run` runs (titan_train.build.build and
titan_train.step.train_step; a test swaps them and sees the result change), so a trainer
change cannot drift from the planner. The measured truth in benchmarks/memory_accuracy.py
is the same `tracked_step` with real tensors on real gloo ranks.

Three things make a fake world work on a CPU:
- `_FakeWorldMode` sits above FakeTensorMode. DeviceMesh bookkeeping (small integer rank
  tensors, real before the fake mode starts) stays real, so `nonzero` / `.tolist()` on
  them work; meta tensors stay meta (the model is built on meta); everything created for
  a real device becomes fake.
- A scalar read of a fake value (`.item()`, `bool(t)`) has no answer: it returns 0 /
  False. The step then takes its every-step path (finite grad norm, optimizer steps).
- The step runs twice and only the second is tracked: the optimizer state exists (as in
  every step but the first), and DTensor's sharding-propagation caches are warm. (On a cold
  cache DTensor propagates shapes with global-size fake tensors under the active fake
  mode, which the tracker would count as allocations.)

Only torch and titan_train are imported; the doctor calls this through a subprocess
(_exact_worker.py) so that `titan-doctor` itself never imports torch.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass
class RankPeak:
    """The tracked step's peak on one rank: total bytes and torch's categories at that moment."""

    rank: int
    stage: int                      # pipeline rank (0 without pp)
    peak_bytes: int
    categories: dict[str, int] = field(default_factory=dict)


class _FakeWorldMode(TorchDispatchMode):
    """Decides, op by op, what stays real inside FakeTensorMode (see the module docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor, unset_fake_temporarily

        kwargs = kwargs or {}
        if any(t not in (torch.Tensor, FakeTensor, torch.nn.Parameter) for t in types):
            return NotImplemented  # a tensor subclass (DTensor) desugars to plain ops first
        if func is torch.ops.aten._local_scalar_dense.default and isinstance(args[0], FakeTensor):
            try:  # fake mode knows constants (e.g. the optimizer's step count)
                return func(*args, **kwargs)
            except DataDependentOutputException:
                return False if args[0].dtype == torch.bool else 0
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if any(isinstance(t, FakeTensor) for t in tensors):
            return func(*args, **kwargs)
        device = kwargs.get("device")
        to_meta = device is not None and torch.device(device).type == "meta"
        stays_real = to_meta if not tensors else (
            all(not t.is_meta for t in tensors) or device is None or to_meta)
        if stays_real:
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        if func is torch.ops.aten.empty_like.default:
            # meta -> device (to_empty): a fresh fake tensor, without converting the meta
            # parameter (whose identity the module swap needs)
            meta = args[0]
            options = {k: v for k, v in kwargs.items() if k != "memory_format"}
            options.setdefault("dtype", meta.dtype)
            return torch.empty_strided(meta.shape, meta.stride(), **options)
        return func(*args, **kwargs)


@contextlib.contextmanager
def fake_world(world_size: int, rank: int):
    """A fake process group: collectives return at once and move no data."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), _FakeWorldMode():
        yield


def _step_tracker(roots: list):
    """torch's MemTracker, allowed to see the model run forward several times in one step
    (gradient accumulation, pipeline micro-batches): its per-module statistics restart at
    each root forward; the peak it tracks is kept."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class StepTracker(MemTracker):
        def _pre_fw_hook(self, module, inputs):
            if not self._mod_tracker.is_bw and any(module is r for r in roots):
                self.reset_mod_stats()
            super()._pre_fw_hook(module, inputs)

    return StepTracker()


def tracked_step(parts, step_fn: Callable, make_batches: Callable[[], list]) -> tuple[int, dict[str, int]]:
    """Run `step_fn(parts, batches)` once to warm up, then once more under MemTracker.
    Returns (peak bytes, {category: bytes at the peak}). Works on fake and on real tensors."""
    step_fn(parts, make_batches())
    tracker = _step_tracker(parts.model_parts)
    tracker.track_external(*parts.model_parts, *parts.optimizers.optimizers)
    with tracker:
        step_fn(parts, make_batches())
    peak = {}
    for snapshot in tracker.get_tracker_snapshot("peak").values():  # one device here
        for key, value in snapshot.items():
            name = "total" if key == "Total" else key.value.lower()
            peak[name] = peak.get(name, 0) + value
    return peak.pop("total", 0), peak


def random_batches(cfg, dims, device: torch.device) -> Callable[[], list]:
    """The micro-batches of one step for one data-parallel rank (token ids, any values)."""
    t = cfg.training
    micro = t.batch_size // (dims.dp * t.grad_accum_steps)

    def make() -> list:
        shape = (micro, t.seq_len)
        return [(torch.randint(0, cfg.model.vocab_size, shape, device=device),
                 torch.randint(0, cfg.model.vocab_size, shape, device=device)) for _ in range(t.grad_accum_steps)]

    return make


def trainer_seams() -> tuple[Callable, Callable]:
    """The trainer's own build and step: the same functions `titan-train run` calls."""
    from titan_train import build, step

    return build.build, step.train_step


def stage_ranks(dims) -> list[int]:
    """One global rank per pipeline rank (dp 0, tp 0): FSDP pads shards to equal size and TP
    splits evenly, so every rank of a stage holds the same bytes; stages differ."""
    return [p * dims.tp for p in range(dims.pp)]


def exact_peaks(cfg, world_size: int) -> list[RankPeak]:
    """The tracked peak of each pipeline stage's rank (one rank without pp)."""
    from titan_train.config import validate
    from titan_train.parallel_dims import ParallelDims

    validate(cfg, world_size)
    d = cfg.distributed
    dims = ParallelDims.for_world(world_size, tp=d.tp_size, pp=d.pp_size)
    build, step_fn = trainer_seams()
    cpu = torch.device("cpu")
    out = []
    for rank in stage_ranks(dims):
        with fake_world(world_size, rank):
            mesh = dims.build_mesh("cpu")  # real: its rank tables are computed before the fake mode
            with fake_tensors():
                parts = build(cfg, dims, cpu, mesh=mesh)
                peak, categories = tracked_step(parts, step_fn, random_batches(cfg, dims, cpu))
        out.append(RankPeak(rank=rank, stage=rank // dims.tp % dims.pp, peak_bytes=peak, categories=categories))
    return out


def to_json(peaks: list[RankPeak]) -> list[dict[str, Any]]:
    return [{"rank": p.rank, "stage": p.stage, "peak_bytes": p.peak_bytes, "categories": p.categories}
            for p in peaks]
