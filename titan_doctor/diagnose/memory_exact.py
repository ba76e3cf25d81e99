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
- A scalar read of a fake value (`.item()`, `bool(t)`) has no answer: it returns a fixed
  value (_hallucinated_scalar) that takes the step's every-step path.
- The step runs twice and only the second is tracked: the optimizer state exists (as in
  every step but the first), and DTensor's sharding-propagation caches are warm. (On a cold
  cache DTensor propagates shapes with global-size fake tensors under the active fake
  mode, which the tracker would count as allocations.)

A fake step costs about as much Python as a real one, so a 70B model is not run layer by
layer: each phase of the step (PHASES) has a peak affine in the depth of a stage and in the
number of 1F1B micro-batches, and is extrapolated from small runs (`extrapolated`); tests
check it against running the config as it is. One rank runs per pipeline stage (every rank
of a stage holds the same bytes), each in its own process when there are several.

Only torch and titan_train are imported; the doctor calls this through a subprocess
(_exact_worker.py) so that `titan-doctor` itself never imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

# The phases of a step whose peaks are each affine in the number of layers per stage
# (fixed widths, fixed layout): see `extrapolated`. Backward is cut at each block;
# the three blocks at either end of the stage are phases of their own (backward starts
# without a prefetched block or a pending reduce-scatter, and ends without a block to
# prefetch); the blocks between behave alike.
EDGE = 3
FORWARD, OPTIMIZER, INTERIOR = "forward and loss", "optimizer step", "backward of an interior layer"
TOP = tuple(f"backward of the stage's {n} layer" for n in ("last", "2nd-last", "3rd-last"))
BOTTOM = tuple(f"backward of the stage's {n} layer" for n in ("first", "2nd", "3rd"))
PHASES = (FORWARD, *TOP, INTERIOR, *reversed(BOTTOM), OPTIMIZER)


@dataclass
class StepMemory:
    """The tracked step's peak on one rank: total bytes, torch's categories at that moment,
    and the peak of each phase."""

    peak_bytes: int
    categories: dict[str, int] = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)


@dataclass
class RankPeak:
    rank: int
    stage: int  # pipeline rank (0 without pp)
    peak_bytes: int
    categories: dict[str, int] = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)
    method: str = "full depth"  # or how it was extrapolated


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
                return _hallucinated_scalar(args[0].dtype)
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if any(isinstance(t, FakeTensor) for t in tensors):
            return func(*args, **kwargs)
        device = kwargs.get("device")
        to_meta = device is not None and torch.device(device).type == "meta"
        stays_real = to_meta if not tensors else (all(not t.is_meta for t in tensors) or device is None or to_meta)
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


def _hallucinated_scalar(dtype: torch.dtype):
    """What a scalar read of a fake value returns: False for booleans (rejection loops in
    init end), 1 for integers (the pipeline's warm-up vote, a product over stages of 1 for
    "shapes given statically", which the trainer does for every stage), 0.0 for floats (a
    finite gradient norm: the optimizer steps)."""
    if dtype == torch.bool:
        return False
    return 0.0 if dtype.is_floating_point else 1


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


def _step_tracker(parts):
    """torch's MemTracker with two additions. It may see the model run forward several times
    in one step (gradient accumulation, pipeline micro-batches): a root's per-module statistics
    restart at each of its forwards; the peak is kept. And it cuts the step into PHASES at the
    backward of each block and at the optimizer step, keeping each phase's peak."""
    from torch.distributed._tools.mem_tracker import MemTracker

    roots = list(parts.model_parts)
    order = sorted(int(name) for part in roots for name in part.layers)
    position = {id(block): order.index(int(name)) for part in roots for name, block in part.layers.items()}

    def labels(i: int) -> tuple[str, ...]:
        from_top, from_bottom = len(order) - 1 - i, i
        out = tuple(TOP[from_top] for _ in [0] if from_top < EDGE) + tuple(
            BOTTOM[from_bottom] for _ in [0] if from_bottom < EDGE
        )
        return out or (INTERIOR,)

    class StepTracker(MemTracker):
        phase: tuple[str, ...] = (FORWARD,)
        phases: dict[str, int] = {}
        paused = 0  # > 0 while DTensor propagates metadata (_untracked_propagation)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.paused:
                return func(*args, **(kwargs or {}))
            return super().__torch_dispatch__(func, types, args, kwargs)

        def cut(self, phase: tuple[str, ...]) -> None:
            peak = sum(self._peak_mem.values())
            for label in self.phase:
                self.phases[label] = max(self.phases.get(label, 0), peak)
            self.phase = phase
            self._peak_mem = {dev: snap["Total"] for dev, snap in self._curr_mem_snap.items()}

        def _pre_fw_hook(self, module, inputs):
            # only this root's statistics restart: with interleaved pipeline stages another
            # root (this rank's other stage) still has backwards to run on its own
            if not self._mod_tracker.is_bw and any(module is r for r in roots):
                for sub in module.modules():
                    self.memory_tracking.pop(sub, None)
            # training.loss_chunks: the loss calls the output projection once per piece, outside
            # the root's forward, which MemTracker refuses for a module it has seen (totals stay)
            if not self._mod_tracker.is_bw and any(module is getattr(r, "output", None) for r in roots):
                self.memory_tracking.pop(module, None)
            super()._pre_fw_hook(module, inputs)

        def _pre_bw_hook(self, module, args):
            if id(module) in position:
                self.cut(labels(position[id(module)]))
            super()._pre_bw_hook(module, args)

    tracker = StepTracker()
    tracker.phases = {}
    return tracker


def tracked_step(parts, step_fn: Callable, make_batches: Callable[[], list]) -> StepMemory:
    """Run `step_fn(parts, batches)` once to warm up, then once more under MemTracker.
    Works on fake and on real tensors."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    step_fn(parts, make_batches())
    tracker = _step_tracker(parts)
    tracker.track_external(*parts.model_parts, *parts.optimizers.optimizers)
    overall = {"peak": 0, "snapshot": {}}

    def remember_peak():  # the overall peak survives the per-phase resets
        total = sum(tracker._peak_mem.values())
        if total > overall["peak"]:
            overall["peak"], overall["snapshot"] = total, tracker.get_tracker_snapshot("peak")

    original_cut = tracker.cut

    def cut(phase):
        remember_peak()
        original_cut(phase)

    tracker.cut = cut
    hook = register_optimizer_step_pre_hook(
        lambda *_: tracker.cut((OPTIMIZER,)) if tracker.phase != (OPTIMIZER,) else None
    )
    try:
        with tracker, _untracked_propagation(tracker):
            step_fn(parts, make_batches())
    finally:
        hook.remove()
    tracker.cut(())
    categories = {}
    for snapshot in overall["snapshot"].values():  # one device here
        for key, value in snapshot.items():
            if key != "Total":
                categories[key.value.lower()] = categories.get(key.value.lower(), 0) + value
    phases = {k: v for k, v in tracker.phases.items() if k in PHASES}
    return StepMemory(peak_bytes=overall["peak"], categories=categories, phases=phases)


@contextlib.contextmanager
def _untracked_propagation(tracker):
    """Pause `tracker` while DTensor computes an op's output metadata by running it on
    global-shape fake tensors (ShardingPropagator._propagate_tensor_meta_non_cached; the
    loss_parallel handlers call it uncached whenever a fake mode is active). On real ranks that
    runs under a fake mode of its own, which MemTracker skips; under --exact's FakeTensorMode
    it is the tracker's own mode, so a full-vocabulary fp32 copy of the logits that no rank
    allocates was counted at the loss (--exact +3.7% to +4.0% on the loss-parallel rows of
    benchmarks/memory_accuracy.py)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def untracked(self, op_schema):
        tracker.paused += 1
        try:
            return original(self, op_schema)
        finally:
            tracker.paused -= 1

    ShardingPropagator._propagate_tensor_meta_non_cached = untracked
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original


def random_batches(cfg, dims, device: torch.device) -> Callable[[], list]:
    """The micro-batches of one step for one data-parallel rank (token ids, any values)."""
    t = cfg.training
    micro = t.batch_size // (dims.dp * t.grad_accum_steps)

    def make() -> list:
        shape = (micro, t.seq_len)
        return [
            (
                torch.randint(0, cfg.model.vocab_size, shape, device=device),
                torch.randint(0, cfg.model.vocab_size, shape, device=device),
            )
            for _ in range(t.grad_accum_steps)
        ]

    return make


def trainer_seams() -> tuple[Callable, Callable]:
    """The trainer's own build and step: the same functions `titan-train run` calls."""
    from titan_train import build, step

    return build.build, step.train_step


def stage_ranks(dims) -> list[int]:
    """One global rank per pipeline rank (dp 0, tp 0): FSDP pads shards to equal size and TP
    splits evenly, so every rank of a stage holds the same bytes; stages differ."""
    return [p * dims.tp for p in range(dims.pp)]


def exact_peaks(cfg, world_size: int, *, extrapolate: bool = True) -> list[RankPeak]:
    """The tracked peak of each pipeline stage's rank (one rank without pp). Deep models, and
    1F1B pipelines with many micro-batches, run small and are extrapolated (`extrapolated`);
    `extrapolate=False` runs the config as it is."""
    from titan_train.config.job import pipeline_microbatches, pipeline_stages, validate
    from titan_train.config.parallel_dims import ParallelDims

    validate(cfg, world_size)
    d = cfg.distributed
    dims = ParallelDims.of(d, world_size)
    n_stages = pipeline_stages(d)
    depths = SMALL_DEPTHS if extrapolate and can_extrapolate(cfg, n_stages) else None
    micro = (dims.pp + 1, dims.pp + 2) if extrapolate and _many_microbatches(cfg, dims) else None
    if not depths and not micro:
        return _run_ranks([cfg], world_size, dims)[0]

    def small(depth: int | None, n: int | None):
        out = _with_layers(cfg, depth * n_stages) if depth else cfg
        return _with_microbatches(out, dims, n) if n else out

    d0, n0 = (depths or (None,))[0], (micro or (None,))[0]
    plan = [small(d0, n0)] + ([small(depths[1], n0)] if depths else []) + ([small(d0, micro[1])] if micro else [])
    base, *further = _run_ranks(plan, world_size, dims)
    steps = []  # how many steps along each axis the real config is from the base run
    if depths:
        steps.append([t - d0 for t in _stage_depths(cfg.model.n_layers, n_stages, dims.pp)])
    if micro:
        steps.append([pipeline_microbatches(d) - n0] * dims.pp)
    what = []
    if depths:
        what.append(f"{depths[0]} and {depths[1]} layers per stage")
    if micro:
        what.append(f"{micro[0]} and {micro[1]} of {pipeline_microbatches(d)} pipeline micro-batches")
    return [
        extrapolated(b, [(runs[i], k[i]) for runs, k in zip(further, steps)], "runs with " + ", ".join(what))
        for i, b in enumerate(base)
    ]


def extrapolated(base: RankPeak, along: list[tuple[RankPeak, int]], runs: str) -> RankPeak:
    """Each phase's peak is affine in the stage's depth and in the number of 1F1B micro-
    batches, with no cross term: every block adds the same saved activations (forward, the
    first backward blocks), the same finished gradients (the last backward blocks), the same
    parameter and optimizer shards (every phase); every micro-batch past the warm-up adds
    the same pending send buffers, whatever the depth. Their maximum is not affine (which
    phase peaks can change), so each phase is extrapolated on its own and the largest is the
    peak. Interior blocks are affine in their position, so bounded by the interior blocks
    next to the edges, which are phases of their own (TOP[-1], BOTTOM[-1]).
    tests/diagnose/test_memory_exact.py checks this against running the config as it is."""
    names = [p for p in PHASES if p != INTERIOR and p in base.phases]
    phases = {p: base.phases[p] + sum((o.phases.get(p, 0) - base.phases[p]) * k for o, k in along) for p in names}
    categories = {
        c: base.categories[c] + sum((o.categories.get(c, 0) - base.categories[c]) * k for o, k in along)
        for c in base.categories
    }
    return RankPeak(
        rank=base.rank,
        stage=base.stage,
        peak_bytes=max(phases.values()),
        categories=categories,
        phases=phases,
        method=f"extrapolated from {runs}",
    )


def _many_microbatches(cfg, dims) -> bool:
    """1F1B past its warm-up: every micro-batch past pp + 1 repeats the same pattern."""
    from titan_train.config.job import pipeline_microbatches

    d = cfg.distributed
    return dims.pp > 1 and d.pp_schedule == "1f1b" and pipeline_microbatches(d) > dims.pp + 2


def _with_microbatches(cfg, dims, n: int):
    """The same micro-batch size, n of them (the global batch cut to match)."""
    from titan_train.config.job import pipeline_microbatches

    d, t = cfg.distributed, cfg.training
    micro = t.batch_size // (dims.dp * t.grad_accum_steps * pipeline_microbatches(d))
    return dataclasses.replace(
        cfg,
        distributed=dataclasses.replace(d, pp_microbatches=n),
        training=dataclasses.replace(t, batch_size=micro * n * dims.dp * t.grad_accum_steps),
    )


# Per-stage depths of the two small runs: with 2 * EDGE - 1 layers every edge phase is a
# block of its own kind, and one interior block exists (more in the deeper run).
SMALL_DEPTHS = (2 * EDGE - 1, 2 * EDGE)


def can_extrapolate(cfg, n_stages: int) -> bool:
    """Worth it and valid: every stage is deeper than the small runs, and which blocks are
    checkpointed does not depend on the depth (every block, or none)."""
    t = cfg.training
    return cfg.model.n_layers // n_stages > SMALL_DEPTHS[1] and (t.activation_checkpoint == "none" or t.ac_every == 1)


def _with_layers(cfg, n_layers: int):
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, n_layers=n_layers))


def _stage_depths(n_layers: int, n_stages: int, pp: int) -> list[int]:
    """Layers held by each pipeline rank (its stages summed); titan_train.distributed.pipeline's split."""
    from titan_train.config.parallel_dims import stage_layers

    layers = stage_layers(n_layers, n_stages)
    return [sum(len(layers[s]) for s in range(n_stages) if s % pp == p) for p in range(pp)]


def _run_ranks(cfgs: list, world_size: int, dims) -> list[list[RankPeak]]:
    """For each config, one rank per pipeline stage. Several ranks each run in a fresh process
    (all configs in it): DTensor caches sharding decisions by mesh shape, and another rank's
    mesh (other process groups) would reuse decisions naming groups of a fake world that no
    longer exists."""
    ranks = stage_ranks(dims)
    if len(ranks) == 1:
        per_rank = [_run_configs(cfgs, world_size, dims, ranks[0])]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
            per_rank = [pool.apply(_run_configs, (cfgs, world_size, dims, rank)) for rank in ranks]
    return [[peaks[i] for peaks in per_rank] for i in range(len(cfgs))]


def _run_configs(cfgs: list, world_size: int, dims, rank: int) -> list[RankPeak]:
    return [_run_rank(cfg, world_size, dims, rank) for cfg in cfgs]


def _run_rank(cfg, world_size: int, dims, rank: int) -> RankPeak:
    build, step_fn = trainer_seams()
    cpu = torch.device("cpu")
    with fake_world(world_size, rank):
        mesh = dims.build_mesh("cpu")  # real: its rank tables are computed before the fake mode
        with fake_tensors():
            parts = build(cfg, dims, cpu, mesh=mesh)
            mem = tracked_step(parts, step_fn, random_batches(cfg, dims, cpu))
    return RankPeak(
        rank=rank,
        stage=rank // dims.tp % dims.pp,
        peak_bytes=mem.peak_bytes,
        categories=mem.categories,
        phases=mem.phases,
    )


def to_json(peaks: list[RankPeak]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(p) for p in peaks]


def measured_peaks(cfg, world_size: int) -> list[RankPeak]:
    """The truth `exact_peaks` is checked against: the same `tracked_step` with real tensors,
    on `world_size` real gloo ranks on this host (tests, benchmarks/memory_accuracy.py).
    Every rank reports; the worst rank of each pipeline stage is kept."""
    import tempfile

    import torch.multiprocessing as mp

    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.runtime.launch import free_port

    d = cfg.distributed
    dims = ParallelDims.of(d, world_size)
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_measure_rank, args=(world_size, cfg, free_port(), out), nprocs=world_size, join=True)
        ranks = [json.loads((Path(out) / f"{r}.json").read_text()) for r in range(world_size)]
    worst = {}
    for r, mem in enumerate(ranks):
        stage = r // dims.tp % dims.pp
        if stage not in worst or mem["peak_bytes"] > worst[stage].peak_bytes:
            worst[stage] = RankPeak(
                rank=r,
                stage=stage,
                peak_bytes=mem["peak_bytes"],
                categories=mem["categories"],
                phases=mem["phases"],
                method=f"measured, worst of {world_size} gloo ranks",
            )
    return [worst[s] for s in sorted(worst)]


def _measure_rank(rank: int, world_size: int, cfg, port: int, out: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from titan_train.config.parallel_dims import ParallelDims

    d = cfg.distributed
    dims = ParallelDims.of(d, world_size)
    build, step_fn = trainer_seams()
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        cpu = torch.device("cpu")
        parts = build(cfg, dims, cpu)
        torch.manual_seed(rank // dims.tp)  # ranks of one tp group read the same tokens
        mem = tracked_step(parts, step_fn, random_batches(cfg, dims, cpu))
    finally:
        dist.destroy_process_group()
    (Path(out) / f"{rank}.json").write_text(json.dumps(dataclasses.asdict(mem)))
