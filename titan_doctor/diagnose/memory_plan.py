"""`titan-doctor diagnose --config X --world-size N --device 910B2`: will this job fit, per
rank, before any card is touched; if not, what to change.

The estimate is titan_train.memory.estimate (analytic, milliseconds) and optionally
`--exact`: the trainer's own build + step under FakeTensorMode (memory_exact.py, run in a
subprocess so the doctor itself never imports torch). The remedies come from
titan_train.memory.remedies, each re-estimated. Findings only; printing is findings.py's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from titan_doctor.findings import Finding, Status

GiB = 2**30
_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "kb": 10**3,
    "m": 2**20,
    "mib": 2**20,
    "mb": 10**6,
    "g": GiB,
    "gib": GiB,
    "gb": 10**9,
    "t": 2**40,
    "tib": 2**40,
    "tb": 10**12,
}


class PlanError(Exception):
    """Bad input to the memory planner (one line, exit 2)."""


@dataclass
class MemoryRequest:
    """What the user asked for on the command line."""

    config: str
    world_size: int
    overrides: list[str] = field(default_factory=list)
    device: str | None = None  # a devices.toml name, e.g. 910B2, H100
    device_memory: str | None = None  # e.g. 64GiB (wins over --device's figure)
    backend: str = "auto"
    exact: bool = False
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))


def parse_size(text: str) -> int:
    """'64GiB', '60.96 GiB', '64G' (binary), '64GB' (decimal), '68719476736' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise PlanError(f"--device-memory {text!r}: expected a size like 64GiB, 32GB or 61.0G")
    return int(float(m.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class Card:
    name: str
    memory_bytes: int
    source: str
    backend: str  # the collective backend such a card runs: hccl | nccl


def resolve_card(req: MemoryRequest) -> Card:
    """The card's usable memory from rules/devices.toml (usable_gib, else memory_gib), or
    --device-memory; its backend from the vendor, or the config / --backend."""
    import titan_knowledge as knowledge

    entry = None
    if req.device:
        entry = knowledge.lookup_device(req.device)
        if entry is None:
            names = ", ".join(e["name"] for e in knowledge.devices())
            raise PlanError(
                f"--device {req.device!r} is not in rules/devices.toml (known: {names}); or give --device-memory 64GiB"
            )
    if req.device_memory:
        memory, source = parse_size(req.device_memory), "--device-memory"
    elif entry:
        usable = entry.get("usable_gib")
        memory = int((usable or entry["memory_gib"]) * GiB)
        source = f"rules/devices.toml {entry['name']}: " + (
            f"{usable} GiB usable ({entry['usable_source']})"
            if usable
            else f"{entry['memory_gib']} GiB nominal (no usable figure recorded; the runtime keeps some)"
        )
    else:
        raise PlanError("--config needs --device NAME (e.g. 910B2) or --device-memory SIZE (e.g. 64GiB)")
    name = entry["name"] if entry else "card"
    vendor = "hccl" if entry and entry["name"].startswith("Ascend") else "nccl" if entry else "hccl"
    return Card(name, memory, source, vendor)


def check_memory(req: MemoryRequest) -> list[Finding]:
    """The estimate, its verdict and the ranked remedies (and the exact run, if asked)."""
    from titan_train.config.job import ConfigError, validate
    from titan_train.config.paths import resolve_config
    from titan_train.config.torchtitan import load_either
    from titan_train.memory import remedies as mr
    from titan_train.memory.estimate import hccl_buffsize_mb

    card = resolve_card(req)
    try:  # a trainer TOML or a torchtitan one, as titan-train run takes
        cfg, _ = load_either(resolve_config(req.config), list(req.overrides), req.world_size)
        validate(cfg, req.world_size)
    except ConfigError as e:
        raise PlanError(str(e)) from None
    backend = _backend(req, cfg, card)
    target = mr.Target(
        req.world_size, card.memory_bytes, backend, accelerator=True, hccl_buffsize_mb=hccl_buffsize_mb(req.env)
    )
    est = mr.estimate_for(cfg, target)
    found = [plan_finding(cfg, card, target, est, req.config)]
    if mr.verdict(est, card.memory_bytes).status != mr.FITS:
        found.append(remedies_finding(cfg, req, target, est))
    if req.exact:
        found.append(exact_finding(req, cfg, target, est))
    return found


def _backend(req: MemoryRequest, cfg, card: Card) -> str:
    if req.backend != "auto":
        return req.backend
    return cfg.distributed.backend if cfg.distributed.backend != "auto" else card.backend


def _gib(n: int) -> str:
    return f"{n / GiB:,.2f} GiB"


def plan_finding(cfg, card: Card, target, est, config_spec: str) -> Finding:
    from titan_train.memory import estimate as me
    from titan_train.memory import remedies as mr

    lay, worst = est.layout, est.worst
    v = mr.verdict(est, card.memory_bytes)
    where = f"(pipeline stage {worst.stage}) " if lay.dims.pp > 1 else ""
    what = (
        f"{cfg.name} on {target.world_size} x {card.name} ({lay.dims.describe()}, {lay.precision}, "
        f"AC {lay.ac}, micro-batch {lay.micro_batch} x {lay.seq_len})"
    )
    amount = {
        mr.FITS: f"fits, {_gib(v.headroom_bytes)} spare",
        mr.TIGHT: f"tight: within the estimate's ±{me.ERROR_MARGIN:.0%} error "
        f"({_gib(abs(v.headroom_bytes))} {'spare' if v.headroom_bytes >= 0 else 'over'})",
        mr.OVER: f"does not fit by {_gib(-v.headroom_bytes)}",
    }[v.status]
    message = f"memory: {what}: peak {_gib(v.peak_bytes)} per rank {where}of {_gib(card.memory_bytes)} — {amount}"
    status = {mr.FITS: Status.OK, mr.TIGHT: Status.WARN, mr.OVER: Status.FAIL}[v.status]
    detail = breakdown_text(est, card, worst) + "\n" + "\n".join(reference_lines(est, card))
    fix = ""
    if v.status != mr.FITS:
        best = next(iter(mr.remedies(cfg, target, est)), None)
        fix = f"titan-train run --config {config_spec} {best.command}  ({best.title})" if best else ""
    return Finding(
        "memory.plan",
        status,
        message,
        detail=detail,
        fix=fix,
        data={
            "config": cfg.name,
            "world_size": target.world_size,
            "layout": lay.dims.describe(),
            "device": asdict(card),
            "backend": target.backend,
            "verdict": v.status,
            "peak_bytes": v.peak_bytes,
            "memory_bytes": card.memory_bytes,
            "headroom_bytes": v.headroom_bytes,
            "worst_stage": worst.stage,
            "error_margin": me.ERROR_MARGIN,
            "weights_bytes": est.weights_bytes,
            "params": est.params,
            "stages": [_stage_json(s) for s in est.stages],
        },
    )


def _stage_json(s) -> dict:
    return {
        "stage": s.stage,
        "layers": s.layers,
        "phase": s.phase,
        "peak_bytes": s.peak_bytes,
        "tensor_bytes": s.tensor_bytes,
        "comm_bytes": s.comm_bytes,
        "margin_bytes": s.margin_bytes,
        "host_bytes": s.host_bytes,
        "terms": [asdict(t) for t in s.terms],
    }


def breakdown_text(est, card: Card, stage) -> str:
    from tabulate import tabulate

    rows = [[t.name, _gib(t.bytes), t.detail] for t in stage.terms]
    rows.append(["communication buffers", _gib(stage.comm_bytes), _comm_detail(est)])
    rows.append(["allocator margin", _gib(stage.margin_bytes), "rounding, fragmentation, workspaces"])
    rows.append(["peak", _gib(stage.peak_bytes), f"at: {stage.phase}"])
    head = f"per-rank breakdown ({f'stage {stage.stage}, ' if est.layout.dims.pp > 1 else ''}the worst rank):"
    lines = [head, tabulate(rows, tablefmt="plain")]
    if len(est.stages) > 1:
        lines.append("stages: " + ", ".join(f"{s.stage}: {_gib(s.peak_bytes)}" for s in est.stages))
    if stage.host_bytes:
        lines.append(f"host memory for offloaded state: {_gib(stage.host_bytes)} per rank")
    lines.append(f"device memory: {card.source}")
    return "\n".join(lines)


def _comm_detail(est) -> str:
    from titan_train.memory import estimate as me

    lay = est.layout
    if lay.dims.world_size == 1:
        return "one rank: no communicator"
    if lay.backend != "hccl":
        return f"{lay.backend}: not counted"
    return f"{me.communicators(lay)} HCCL communicators x 2 x HCCL_BUFFSIZE {lay.hccl_buffsize_mb} MB"


def reference_lines(est, card: Card) -> list[str]:
    """The figures people check first: the weights alone, and the training state."""
    from titan_train.memory import estimate as me

    lay = est.layout
    cards = lay.dims.tp * lay.dims.pp
    per_card = est.weights_bytes / cards
    fits = "fits" if per_card <= card.memory_bytes else "does not fit"
    state = 16 * est.params / (lay.dims.world_size if lay.fsdp else cards)
    out = [
        f"weights in {lay.precision}: {est.weights_bytes / 1e9:,.1f} GB ({_gib(est.weights_bytes)}); "
        f"{per_card / 1e9:,.1f} GB per card split over tp {lay.dims.tp} x pp {lay.dims.pp} — {fits} one card",
        f"training state (fp32 params + grads + AdamW, 16 B per parameter): {_gib(int(state))} per rank "
        f"{'sharded over ' + str(lay.dims.world_size) + ' ranks' if lay.fsdp else 'without FSDP sharding'}"
        f" — {'fits' if state <= card.memory_bytes else 'does not fit'} before any activation",
    ]
    if lay.dims.world_size > 1 and lay.backend == "hccl":
        out.append(
            f"HCCL: {me.communicators(lay)} communicators on this rank "
            "(world, and each mesh dim or pipeline link smaller than it)"
        )
    return out


def remedies_finding(cfg, req: MemoryRequest, target, est) -> Finding:
    from tabulate import tabulate

    from titan_train.memory import remedies as mr

    found = mr.remedies(cfg, target, est)
    if not found:
        return Finding("memory.remedies", Status.INFO, "memory: no single change to the config helps")
    rows = [
        [
            i + 1,
            r.title,
            _gib(r.estimate.peak_bytes),
            "-" + _gib(r.saved_bytes),
            r.verdict.status,
            r.command + (f"   ({r.note})" if r.note else ""),
        ]
        for i, r in enumerate(found)
    ]
    fitting = [r for r in found if r.verdict.status == mr.FITS]
    message = f"memory: {len(found)} remedies, re-estimated, most memory saved first; {len(fitting)} fit" + (
        f" — best: {found[0].title}" if found else ""
    )
    detail = tabulate(rows, headers=["#", "remedy", "peak", "saves", "verdict", "command"], tablefmt="plain")
    data = {
        "remedies": [
            {
                "rank": i + 1,
                "title": r.title,
                "set": r.sets,
                "flags": r.flags,
                "command": r.command,
                "peak_bytes": r.estimate.peak_bytes,
                "saved_bytes": r.saved_bytes,
                "verdict": r.verdict.status,
                "note": r.note,
            }
            for i, r in enumerate(found)
        ]
    }
    return Finding("memory.remedies", Status.INFO, message, detail=detail, data=data)


def exact_finding(req: MemoryRequest, cfg, target, est) -> Finding:
    """The trainer's own step under FakeTensorMode; allocator margin and communication
    buffers added as in the analytic estimate, which cannot be traced."""
    from titan_train.memory import estimate as me
    from titan_train.memory import remedies as mr

    peaks = run_exact(req)
    worst = max(peaks, key=lambda p: p["peak_bytes"])
    tensors = worst["peak_bytes"]
    analytic = next(s for s in est.stages if s.stage == worst["stage"])
    total = tensors + int(me.ALLOCATOR_MARGIN * tensors) + analytic.comm_bytes
    memory = target.memory_bytes
    status = Status.FAIL if total > memory else Status.OK
    diff = (analytic.tensor_bytes - tensors) / tensors if tensors else 0.0
    message = (
        f"memory --exact: the trainer's build + step under FakeTensorMode: tensors {_gib(tensors)} "
        f"(analytic {_gib(analytic.tensor_bytes)}, {diff:+.1%}); with allocator margin and "
        f"communication buffers {_gib(total)} of {_gib(memory)} — "
        + ("fits" if total <= memory else f"does not fit by {_gib(total - memory)}")
    )
    lines = [f"stage {p['stage']} (rank {p['rank']}): {_gib(p['peak_bytes'])}; {p['method']}" for p in peaks]
    for phase, value in worst["phases"].items():
        lines.append(f"  {phase}: {_gib(value)}")
    lines.append("at the peak: " + ", ".join(f"{k} {_gib(v)}" for k, v in worst["categories"].items() if v))
    return Finding(
        "memory.exact",
        status,
        message,
        detail="\n".join(lines),
        data={
            "ranks": peaks,
            "peak_bytes": total,
            "tensor_bytes": tensors,
            "verdict": mr.FITS if total <= memory else mr.OVER,
        },
    )


def run_exact(req: MemoryRequest) -> list[dict]:
    """memory_exact in a subprocess (torch stays out of the doctor's process)."""
    argv = [
        req.python,
        "-m",
        "titan_doctor.diagnose._exact_worker",
        "--config",
        str(req.config),
        "--world-size",
        str(req.world_size),
    ] + [a for o in req.overrides for a in ("--set", o)]
    env = dict(req.env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    print(
        "titan-doctor: --exact: running the trainer's step under FakeTensorMode (about a minute for a 70B model)...",
        file=sys.stderr,
        flush=True,
    )
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(Path.cwd()))
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        raise PlanError(f"--exact failed: {tail}")
    return json.loads(p.stdout.strip().splitlines()[-1])
