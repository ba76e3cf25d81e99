"""Which accelerators this host offers: npu-smi, /dev/davinci* nodes,
ASCEND_RT_VISIBLE_DEVICES against the requested --nproc, and what the trainer would
pick (titan_train.runtime.device.select, the project's one selection rule)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_doctor.findings import Finding, Status
from titan_train.runtime import device as tdevice

# `| 0     910B3               | OK            | 93.6   40   0 / 0 |`
_ROW = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*([A-Za-z]+)\s*\|")
# `| 0                         | 0000:C1:00.0  | 0   0 / 0   3389 / 65536 |`
_MEM = re.compile(r"^\|\s*\d+(?:\s+\d+)?\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f:.]+\s*\|.*?(\d+)\s*/\s*(\d+)\s*\|\s*$")


@dataclass
class NpuSmi:
    found: bool
    npus: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def parse_npu_smi(text: str) -> list[dict[str, Any]]:
    """NPUs from the `npu-smi info` table: id, name, health, HBM used/total (MB)."""
    npus: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m.group(2).lower() not in ("name",):
            npus.append({"id": int(m.group(1)), "name": m.group(2), "health": m.group(3)})
            continue
        m = _MEM.match(line)
        if m and npus and "hbm_total_mb" not in npus[-1]:
            npus[-1].update(hbm_used_mb=int(m.group(1)), hbm_total_mb=int(m.group(2)))
    return npus


def run_npu_smi(env: Mapping[str, str], timeout: float = 10.0) -> NpuSmi:
    exe = shutil.which("npu-smi", path=env.get("PATH"))
    if not exe:
        return NpuSmi(False)
    try:
        p = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=timeout, env=dict(env))
    except subprocess.TimeoutExpired:
        return NpuSmi(True, error=f"npu-smi info did not answer within {timeout:.0f} s (driver hung?)")
    except OSError as e:
        return NpuSmi(True, error=f"npu-smi cannot run: {e.strerror}")
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        return NpuSmi(True, error=f"npu-smi info failed: {tail[0]}")
    return NpuSmi(True, parse_npu_smi(p.stdout))


def davinci_nodes(dev_dir: Path) -> list[int]:
    try:
        return sorted(int(p.name[7:]) for p in dev_dir.glob("davinci*") if p.name[7:].isdigit())
    except OSError:
        return []


def check_npus(smi: NpuSmi, nodes: list[int]) -> list[Finding]:
    if not smi.found and not nodes:
        return [Finding("devices.npu", Status.INFO, "no Ascend NPU on this host (no npu-smi, no /dev/davinci*)")]
    if smi.error:
        return [
            Finding(
                "devices.npu",
                Status.FAIL,
                smi.error,
                fix="Check the driver: dmesg | grep -i davinci; reinstall/restart the Ascend driver",
            )
        ]
    if not smi.found:
        return [
            Finding(
                "devices.npu",
                Status.WARN,
                f"{len(nodes)} /dev/davinci node(s) but npu-smi not on PATH",
                fix="export PATH=/usr/local/Ascend/driver/tools:$PATH (or mount it into the container)",
                data={"davinci": nodes},
            )
        ]
    bad = [n for n in smi.npus if n["health"].upper() != "OK"]
    lines = [
        f"NPU {n['id']} {n['name']}: {n['health']}"
        + (f", HBM {n['hbm_used_mb']}/{n['hbm_total_mb']} MB" if "hbm_total_mb" in n else "")
        for n in smi.npus
    ]
    data = {"npus": smi.npus, "davinci": nodes}
    if not smi.npus:
        return [Finding("devices.npu", Status.FAIL, "npu-smi lists no NPU", fix="Check the driver install", data=data)]
    if bad:
        return [
            Finding(
                "devices.npu",
                Status.FAIL,
                f"{len(bad)} of {len(smi.npus)} NPU(s) not healthy",
                detail="\n".join(lines),
                fix="npu-smi info -t health -i <id> for the reason; "
                "reset the card (npu-smi set -t reset -i <id> -c 0) or report it",
                data=data,
            )
        ]
    busy = [n for n in smi.npus if n.get("hbm_total_mb") and n["hbm_used_mb"] > 0.2 * n["hbm_total_mb"]]
    if busy:
        return [
            Finding(
                "devices.npu",
                Status.WARN,
                f"{len(busy)} NPU(s) already have >20% HBM in use",
                detail="\n".join(lines),
                fix="npu-smi info shows the processes; stop stale jobs",
                data=data,
            )
        ]
    return [
        Finding(
            "devices.npu",
            Status.OK,
            f"{len(smi.npus)} NPU(s) healthy ({smi.npus[0]['name']})",
            detail="\n".join(lines),
            data=data,
        )
    ]


def parse_visible(value: str) -> list[int] | None:
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        return None


def check_visible(env: Mapping[str, str], nproc: int | None, npu_total: int) -> list[Finding]:
    """ASCEND_RT_VISIBLE_DEVICES must be valid and leave at least --nproc NPUs."""
    raw = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None:
        if nproc and npu_total and nproc > npu_total:
            return [
                Finding(
                    "devices.visible",
                    Status.FAIL,
                    f"--nproc {nproc} but only {npu_total} NPU(s) on this host",
                    fix=f"Use --nproc {npu_total} or more nodes (--nnodes)",
                )
            ]
        return [Finding("devices.visible", Status.OK, "ASCEND_RT_VISIBLE_DEVICES not set (all NPUs visible)")]
    ids = parse_visible(raw)
    if ids is None or len(set(ids)) != len(ids):
        return [
            Finding(
                "devices.visible",
                Status.FAIL,
                f"ASCEND_RT_VISIBLE_DEVICES={raw!r} is not a list of distinct ids",
                fix="export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3",
            )
        ]
    out_of_range = [i for i in ids if npu_total and i >= npu_total]
    if out_of_range:
        return [
            Finding(
                "devices.visible",
                Status.FAIL,
                f"ASCEND_RT_VISIBLE_DEVICES names NPU(s) {out_of_range} but the host has {npu_total}",
                fix=f"Use ids 0..{npu_total - 1}",
            )
        ]
    if nproc and nproc > len(ids):
        return [
            Finding(
                "devices.visible",
                Status.FAIL,
                f"--nproc {nproc} but ASCEND_RT_VISIBLE_DEVICES={raw} exposes {len(ids)} NPU(s)",
                fix=f"export ASCEND_RT_VISIBLE_DEVICES={','.join(str(i) for i in range(nproc))}   "
                f"or --nproc {len(ids)}",
            )
        ]
    return [Finding("devices.visible", Status.OK, f"ASCEND_RT_VISIBLE_DEVICES={raw} ({len(ids)} NPU(s))")]


def check_accelerator(probe: Mapping[str, Any], nproc: int | None) -> list[Finding]:
    """What titan-train would run on, from the probe, through the trainer's own rule."""
    t, n = probe.get("torch", {}), probe.get("torch_npu", {})
    if not t.get("installed"):
        return [Finding("devices.accelerator", Status.SKIP, "accelerator: torch not installed")]
    npu_error = None
    if not n.get("installed"):
        npu_error = "torch_npu is not installed"
    elif n.get("imported") is False:
        npu_error = f"torch_npu failed to import: {n.get('error')}"
    p = tdevice.Probe(
        npu_count=int(n.get("npu_count") or 0), cuda_count=int(t.get("cuda_count") or 0), npu_error=npu_error
    )
    dev = tdevice.select("auto", p)
    msg = f"trainer device: {dev.type} x{dev.count} with {dev.backend}"
    data = {"type": dev.type, "backend": dev.backend, "count": dev.count, "note": dev.note}
    if dev.type != "cpu" and nproc and nproc > dev.count:
        return [
            Finding(
                "devices.accelerator",
                Status.FAIL,
                msg + f", but --nproc {nproc} > {dev.count}",
                fix=f"--nproc {dev.count} per node",
                data=data,
            )
        ]
    return [
        Finding("devices.accelerator", Status.OK if dev.type != "cpu" else Status.INFO, msg, detail=dev.note, data=data)
    ]
