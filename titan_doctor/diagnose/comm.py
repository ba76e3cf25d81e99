"""Live collective test: start N local ranks on the auto-selected backend (hccl / nccl /
gloo), check init and all_reduce correctness, measure bus bandwidth, and name any rank
that fails or hangs, with the likely cause (via the log signatures)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import signatures
from titan_doctor.diagnose.distributed_env import DEFAULT_PORT, check_master, port_free
from titan_doctor.diagnose.logs import enrich
from titan_doctor.findings import Finding, Status
from titan_train.runtime.launch import LaunchOptions, Rendezvous, free_port, read_log, start_ranks

WORKER = Path(__file__).with_name("_comm_worker.py")
SIZES = (1 << 12, 1 << 18, 1 << 22, 1 << 25)  # 4 KiB .. 32 MiB
PHASE_HINT = {
    "start": "the interpreter did not start",
    "import": "importing torch / torch_npu (run the default checks)",
    "init": "init_process_group: waiting for the other ranks at MASTER_ADDR:MASTER_PORT",
    "allreduce": "the first all_reduce (a peer never joined, or the link is down)",
    "bandwidth": "the bandwidth all_reduces",
}


@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: killed after the timeout
    state: dict[str, Any]
    stderr: str


def launch(
    nproc: int,
    python: str,
    env: Mapping[str, str],
    backend: str = "auto",
    timeout: float = 60.0,
    sizes: tuple[int, ...] = SIZES,
) -> tuple[list[RankResult], dict[str, str]]:
    """Run the ranks through the trainer's launcher: each rank's output in its own log, the
    others stopped as soon as one fails, all of them after the timeout."""
    with tempfile.TemporaryDirectory(prefix="titan-doctor-comm-") as tmp:
        return _launch(nproc, python, env, backend, timeout, sizes, Path(tmp))


def _launch(
    nproc: int, python: str, env: Mapping[str, str], backend: str, timeout: float, sizes: tuple[int, ...], workdir: Path
) -> tuple[list[RankResult], dict[str, str]]:
    base = dict(env)
    base.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in base:
        base["MASTER_PORT"] = str(free_port() if not port_free(DEFAULT_PORT)[0] else DEFAULT_PORT)
    base.update(
        TD_TIMEOUT=str(timeout),
        TD_SIZES=",".join(str(s) for s in sizes),
        TD_BACKEND=backend,
        TD_RESULT_DIR=str(workdir),
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    rdzv = Rendezvous(0, base["MASTER_ADDR"], int(base["MASTER_PORT"]))
    # a failed rank's peers get 0.3 s to write their own error before they are stopped
    run = start_ranks(
        [python, str(WORKER)],
        LaunchOptions(nproc=nproc),
        base,
        workdir,
        echo_rank0=False,
        timeout_s=timeout + 30,
        stop_grace_s=0.3,
        rdzv=rdzv,
    )  # + 30: import time
    results = [
        RankResult(
            o.rank, None if o.stopped else o.returncode, _read_state(workdir / f"rank{o.rank}.json"), read_log(o.log)
        )
        for o in run.ranks
    ]
    return results, {"MASTER_ADDR": base["MASTER_ADDR"], "MASTER_PORT": base["MASTER_PORT"]}


def _read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"phase": "start"}


def bandwidth_table(rows: list[dict[str, Any]]) -> str:
    from tabulate import tabulate  # only --comm prints it; importing costs a third of start-up

    return tabulate(
        [[_size(r["bytes"]), f"{r['time_us']:.0f}", f"{r['algbw_gbs']:.3f}", f"{r['busbw_gbs']:.3f}"] for r in rows],
        headers=["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"],
        colalign=("right",) * 4,
    )


def _size(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def findings(results: list[RankResult], rendezvous: Mapping[str, str], timeout: float) -> list[Finding]:
    """Turn per-rank outcomes into: init, all_reduce, bandwidth (or the failing rank)."""
    nproc = len(results)
    dead = [r for r in results if r.returncode not in (0, None)]
    hung = [r for r in results if r.returncode is None]
    backend = next((r.state.get("backend") for r in results if r.state.get("backend")), "?")
    where = f"{rendezvous['MASTER_ADDR']}:{rendezvous['MASTER_PORT']}"
    if dead or hung:
        out = []
        for r in dead:
            m = signatures.classify(r.stderr + "\n" + r.state.get("traceback", ""))
            err = r.state.get("error") or (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            cause = (
                signatures.fill(
                    m.sig.cause, {**enrich(m), "host": rendezvous["MASTER_ADDR"], "port": rendezvous["MASTER_PORT"]}
                )
                if m
                else f"failed during {PHASE_HINT.get(r.state.get('phase', 'start'), r.state.get('phase'))}"
            )
            out.append(
                Finding(
                    "comm.rank",
                    Status.FAIL,
                    f"rank {r.rank} failed in {r.state.get('phase', 'start')} ({backend}, {where}): {err[:160]}",
                    detail=cause,
                    fix=m.sig.fix
                    if m
                    else "Run the default checks (titan-doctor diagnose) and read the rank's error above",
                    data={
                        "rank": r.rank,
                        "phase": r.state.get("phase"),
                        "error": err,
                        "signature": m.sig.id if m else None,
                        "returncode": r.returncode,
                    },
                )
            )
        for r in hung:
            phase = r.state.get("phase", "start")
            first = "after another rank failed" if dead else f"for {timeout:.0f} s"
            out.append(
                Finding(
                    "comm.rank",
                    Status.FAIL if not dead else Status.WARN,
                    f"rank {r.rank} hung in {phase} {first} ({backend}, {where}); killed",
                    detail=PHASE_HINT.get(phase, phase),
                    fix="Check MASTER_ADDR/MASTER_PORT reach rank 0 and the firewall; on NPU raise "
                    "HCCL_CONNECT_TIMEOUT only if ranks are merely slow",
                    data={"rank": r.rank, "phase": phase, "hung": True},
                )
            )
        return out
    out = [
        Finding(
            "comm.init",
            Status.OK,
            f"{nproc} ranks joined via {backend} at {where}",
            data={"backend": backend, "nproc": nproc, **rendezvous},
        )
    ]
    wrong = [r.rank for r in results if not r.state.get("allreduce_ok")]
    if wrong:
        out.append(
            Finding(
                "comm.allreduce",
                Status.FAIL,
                f"all_reduce gave wrong sums on rank(s) {wrong}",
                detail=f"max abs error {max(r.state.get('allreduce_max_err', 0) for r in results)}",
                fix="Hardware/driver fault likely: npu-smi info -t health; try other cards",
                data={"ranks": wrong},
            )
        )
    else:
        out.append(Finding("comm.allreduce", Status.OK, f"all_reduce correct on all {nproc} ranks"))
    rows = results[0].state.get("bandwidth", [])
    best = max((r["busbw_gbs"] for r in rows), default=0.0)
    # INFO, not OK: a measurement to read, so the table is printed without -v
    out.append(
        Finding(
            "comm.bandwidth",
            Status.INFO if rows else Status.WARN,
            f"all_reduce bus bandwidth up to {best:.3f} GB/s ({backend}, {nproc} ranks)",
            detail=bandwidth_table(rows) if rows else "no measurement",
            data={"rows": rows},
        )
    )
    return out


def check_comm(
    nproc: int, python: str, env: Mapping[str, str], backend: str = "auto", timeout: float = 60.0
) -> list[Finding]:
    """Pre-flight the rendezvous (a dead MASTER_ADDR would only time out), then run."""
    if nproc < 2:
        return [Finding("comm", Status.SKIP, "collective test needs --nproc >= 2")]
    blocked = [f for f in check_master(env) if f.status is Status.FAIL]
    if blocked:
        return [replace(f, code="comm.preflight", message="not started: " + f.message) for f in blocked]
    results, rdv = launch(nproc, python, env, backend=backend, timeout=timeout)
    return findings(results, rdv, timeout)
