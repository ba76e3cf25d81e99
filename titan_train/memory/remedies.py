"""Does a job fit, and if not, what to change: the verdict on an estimate and the remedies,
each re-estimated on the changed config and ranked by how much memory it saves.

torch-free like memory_estimate.py: the trainer's preflight names the top remedy in its
refusal, the doctor prints them all. A remedy is a config change (`--set` lines) or, for
"more cards", a larger world size; a change the trainer would refuse (config.validate) is
never proposed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from titan_train.config.job import ConfigError, JobConfig, validate
from titan_train.memory import estimate as me

FITS, TIGHT, OVER = "fits", "tight", "does not fit"


@dataclass(frozen=True)
class Verdict:
    status: str  # fits | tight (within the estimate's error) | does not fit
    peak_bytes: int
    memory_bytes: int
    stage: int  # the pipeline rank that peaks

    @property
    def headroom_bytes(self) -> int:
        """memory - peak: negative when over."""
        return self.memory_bytes - self.peak_bytes


def verdict(est: me.Estimate, memory_bytes: int, error: float = me.ERROR_MARGIN) -> Verdict:
    """Clearly over when even the low end of the estimate's error band exceeds the memory,
    clearly fitting when its high end does not; tight in between."""
    peak = est.peak_bytes
    if peak * (1 - error) > memory_bytes:
        status = OVER
    elif peak * (1 + error) <= memory_bytes:
        status = FITS
    else:
        status = TIGHT
    return Verdict(status, peak, memory_bytes, est.worst.stage)


@dataclass
class Remedy:
    title: str
    sets: list[str]  # `--set section.key=value` arguments
    flags: str  # other command-line changes ("--world-size 128"), "" if none
    estimate: me.Estimate
    verdict: Verdict
    saved_bytes: int
    note: str = ""

    @property
    def command(self) -> str:
        return " ".join([f"--set {s}" for s in self.sets] + ([self.flags] if self.flags else []))


@dataclass(frozen=True)
class Target:
    """Where the job runs: what the estimate needs besides the config."""

    world_size: int
    memory_bytes: int
    backend: str  # hccl | nccl | gloo
    accelerator: bool  # npu/cuda: cpu_offload possible, allocator margin counted
    hccl_buffsize_mb: int | None = None


def estimate_for(cfg: JobConfig, target: Target, world_size: int | None = None) -> me.Estimate:
    lay = me.layout(cfg, world_size or target.world_size, target.backend, target.hccl_buffsize_mb)
    return me.estimate(lay, accelerator=target.accelerator)


def remedies(cfg: JobConfig, target: Target, base: me.Estimate | None = None) -> list[Remedy]:
    """Every applicable remedy, re-estimated: config changes first, then more cards (new
    hardware is the costly way out); within each, most memory saved first. When nothing
    fits on its own, the best combination of config changes found greedily (up to three)
    comes first."""
    base = base or estimate_for(cfg, target)
    found = [r for r in (_try(cfg, target, base, c) for c in _candidates(cfg, target)) if r]
    found.sort(key=lambda r: (bool(r.flags), -r.saved_bytes, len(r.sets)))
    if found and not any(r.verdict.status == FITS for r in found):
        # first without changing what is trained (sequence length), then with it
        combo = _combine(cfg, target, base, same_training=True)
        if combo is None or combo.verdict.status != FITS:
            combo = _combine(cfg, target, base, same_training=False) or combo
        if combo:
            found.insert(0, combo)
    return found


@dataclass(frozen=True)
class _Change:
    title: str
    sets: tuple[tuple[str, str, object], ...]  # (section, key, value)
    world_size: int | None = None
    note: str = ""


def _candidates(cfg: JobConfig, target: Target) -> list[_Change]:
    d, t, m, world = cfg.distributed, cfg.training, cfg.model, target.world_size
    out: list[_Change] = []
    if t.activation_checkpoint == "none":
        out.append(
            _Change(
                "selective activation checkpointing (keep matmul/attention outputs)",
                (("training", "activation_checkpoint", "selective"), ("training", "ac_every", 1)),
            )
        )
    op_sac = t.activation_checkpoint == "selective" and t.selective_ac_option == "op" and t.ac_every == 1
    if t.activation_checkpoint != "full" and not op_sac:
        out.append(
            _Change(
                "op-level selective activation checkpointing (keep attention and every second matmul, as torchtitan)",
                (
                    ("training", "activation_checkpoint", "selective"),
                    ("training", "selective_ac_option", "op"),
                    ("training", "ac_every", 1),
                ),
            )
        )
    if t.activation_checkpoint != "full" or t.ac_every != 1:
        out.append(
            _Change(
                "full activation checkpointing (recompute every block)",
                (("training", "activation_checkpoint", "full"), ("training", "ac_every", 1)),
            )
        )
    tp_options = [
        k
        for k in range(d.tp_size + 1, world + 1)
        if world % (k * d.pp_size) == 0 and m.n_heads % k == 0 and m.kv_heads % k == 0
    ]
    for k in tp_options[:3]:
        # dp shrinks by k / tp: more accumulation steps keep each rank's micro-batch
        accum = t.grad_accum_steps * k // d.tp_size if k % d.tp_size == 0 else t.grad_accum_steps
        out.append(
            _Change(
                f"tensor parallel over {k} ranks (same micro-batch per rank)",
                (("distributed", "tp_size", k), ("training", "grad_accum_steps", accum)),
            )
        )
    pp_options = [k for k in range(d.pp_size + 1, world + 1) if world % (d.tp_size * k) == 0 and m.n_layers >= k]
    out += [
        _Change(
            f"pipeline parallel over {k} stages ({k} micro-batches)",
            (("distributed", "pp_size", k), ("distributed", "pp_microbatches", k)),
        )
        for k in pp_options[:3]
    ]
    if target.accelerator and not d.cpu_offload:
        out.append(
            _Change(
                "CPU offload of parameters, gradients and optimizer state",
                (("distributed", "cpu_offload", True),),
                note="the optimizer step runs on the host; expect a slower step",
            )
        )
    for accum in (t.grad_accum_steps * k for k in (2, 4, 8, 16)):
        out.append(
            _Change(
                f"smaller micro-batch: {accum} accumulation steps (same global batch)",
                (("training", "grad_accum_steps", accum),),
            )
        )
    seq = t.seq_len // 2
    while seq >= 128 and seq % max(d.tp_size, 1) == 0 and len([c for c in out if "seq_len" in c.title]) < 3:
        out.append(
            _Change(
                f"shorter sequences: seq_len {seq}", (("training", "seq_len", seq),), note="trains on shorter context"
            )
        )
        seq //= 2
    for k in (2, 4, 8):
        out.append(
            _Change(
                f"more cards: world size {world * k}",
                (),
                world_size=world * k,
                note="data parallel grows; the global batch may need to grow with it",
            )
        )
    return out


def _apply(cfg: JobConfig, sets) -> JobConfig:
    out = cfg
    for section, key, value in sets:
        out = dataclasses.replace(out, **{section: dataclasses.replace(getattr(out, section), **{key: value})})
    return out


def _try(cfg: JobConfig, target: Target, base: me.Estimate, change: _Change, prior: tuple = ()) -> Remedy | None:
    keys = {(sec, key) for sec, key, _ in change.sets}
    sets = tuple(x for x in prior if (x[0], x[1]) not in keys) + change.sets  # a later value replaces
    changed = _apply(cfg, sets)
    world = change.world_size or target.world_size
    try:
        validate(changed, world)
    except ConfigError:
        return None
    est = estimate_for(changed, target, world)
    saved = base.peak_bytes - est.peak_bytes
    if saved <= 0:
        return None
    return Remedy(
        title=change.title,
        sets=[_set_line(*s) for s in sets if _differs(cfg, s)],
        flags=f"--world-size {world}" if change.world_size else "",
        estimate=est,
        verdict=verdict(est, target.memory_bytes),
        saved_bytes=saved,
        note=change.note,
    )


def _combine(
    cfg: JobConfig, target: Target, base: me.Estimate, *, same_training: bool, depth: int = 3
) -> Remedy | None:
    """Greedy: take the config change that saves most, then the best next one on top, until
    it fits. `same_training` leaves the sequence length alone."""
    sets: tuple = ()
    titles: list[tuple[str, set]] = []
    current = cfg
    best = None
    for _ in range(depth):
        changes = [
            c
            for c in _candidates(current, target)
            if not c.world_size and not (same_training and any(k == "seq_len" for _, k, _ in c.sets))
        ]
        options = [(r, c) for r, c in ((_try(cfg, target, base, c, prior=sets), c) for c in changes) if r]
        if not options:
            break
        pick, change = max(options, key=lambda rc: rc[0].saved_bytes)
        keys = {(sec, key) for sec, key, _ in change.sets}
        sets = tuple(x for x in sets if (x[0], x[1]) not in keys) + change.sets
        titles = [(t, k) for t, k in titles if not (k & keys)]
        titles.append((pick.title, keys))
        current = _apply(cfg, sets)
        best = pick
        if pick.verdict.status == FITS:
            break
    if best is None or len(titles) < 2:
        return None
    names = [t for t, _ in titles]
    best.title = "combined: " + " + ".join(names)
    best.note = "; ".join(c.note for c in _candidates(cfg, target) if c.note and c.title in names)
    return best


def _differs(cfg: JobConfig, change) -> bool:
    section, key, value = change
    return getattr(getattr(cfg, section), key) != value


def _set_line(section: str, key: str, value) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = f'"{value}"'
    else:
        text = str(value)
    return f"{section}.{key}={text}"


def preflight(cfg: JobConfig, target: Target, memory_source: str) -> tuple[str, str]:
    """(verdict status, one line) for `titan-train run` before it starts any rank."""
    est = estimate_for(cfg, target)
    v = verdict(est, target.memory_bytes)
    gib = 2**30
    where = f" (pipeline stage {v.stage})" if est.layout.dims.pp > 1 else ""
    line = (
        f"{cfg.name} needs about {v.peak_bytes / gib:.1f} GiB per rank{where} (analytic estimate, "
        f"±{me.ERROR_MARGIN:.0%}) but each rank has {target.memory_bytes / gib:.1f} GiB ({memory_source})"
    )
    if v.status == FITS:
        return v.status, line
    best = next(iter(remedies(cfg, target, est)), None)
    if best:
        which = "top remedy" if best.verdict.status == FITS else "no change found fits here; the closest"
        line += f"; {which}: {best.command} ({best.title}: {best.estimate.peak_bytes / gib:.1f} GiB)"
    return v.status, line
