"""Every check with its id, title and order. Display order is family order; slow checks
(the live collective test) come last and only run when asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from titan_doctor.diagnose import ascend, checkpoint, comm, devices, logs, timeouts, versions
from titan_doctor.diagnose import distributed_env as dist
from titan_doctor.diagnose.context import Context
from titan_doctor.findings import Finding


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    run: Callable[[Context], list[Finding]]
    needs_probe: bool = False  # waits for the torch probe: run after the others
    slow: bool = False  # only with --comm / --check
    logs: bool = False  # only with --log
    memory: bool = False  # only with --config and no --checkpoint (command.py runs it with its own inputs)
    checkpoint: bool = False  # only with --checkpoint (and --config as the model to compare with)


def _pins() -> dict:
    return versions.table()["pins"]


def _set_env(c: Context) -> list[str]:
    return [str(p) for p in ascend.set_env_paths(c.ascend)]


CHECKS: tuple[Check, ...] = (
    Check("versions.python", "Python interpreter", lambda c: versions.check_python(c.probe), needs_probe=True),
    Check(
        "versions.torch",
        "torch installed, importable, build",
        lambda c: versions.check_torch(c.probe, _pins(), c.cann_version),
        needs_probe=True,
    ),
    Check(
        "versions.torch_npu",
        "torch_npu installed and importable (import errors classified)",
        lambda c: versions.check_torch_npu(c.probe, c.ascend_present, _set_env(c), c.cann_version),
        needs_probe=True,
    ),
    Check(
        "versions.matrix",
        "torch / torch_npu / CANN / Python fit (rules/versions.toml)",
        lambda c: versions.check_matrix(c.probe, c.cann_version),
        needs_probe=True,
    ),
    Check(
        "versions.fsdp2",
        "torch has FSDP2 (fully_shard), needed by the trainer",
        lambda c: versions.check_fsdp2(c.probe, _pins(), c.cann_version),
        needs_probe=True,
    ),
    Check(
        "ascend.cann",
        "CANN toolkit found, version >= pin",
        lambda c: ascend.check_cann(c.ascend, _pins()["min_cann"], c.wants_npu),
        needs_probe=True,
    ),
    Check(
        "ascend.env",
        "CANN set_env.sh sourced (ASCEND_HOME_PATH, LD_LIBRARY_PATH)",
        lambda c: ascend.check_cann_env(c.ascend, c.env),
    ),
    Check("ascend.driver", "NPU driver version", lambda c: ascend.check_driver(c.ascend, c.ascend_present)),
    Check("devices.npu", "NPUs from npu-smi and /dev/davinci*", lambda c: devices.check_npus(c.npu_smi, c.davinci)),
    Check(
        "devices.visible",
        "ASCEND_RT_VISIBLE_DEVICES vs --nproc",
        lambda c: devices.check_visible(c.env, c.nproc, len(c.npu_ids)),
    ),
    Check(
        "devices.accelerator",
        "what titan-train would run on (npu / cuda / cpu)",
        lambda c: devices.check_accelerator(c.probe, c.nproc),
        needs_probe=True,
    ),
    Check(
        "dist.master",
        "MASTER_ADDR resolvable, MASTER_PORT valid and free",
        lambda c: dist.check_master(c.env, c.nnodes),
    ),
    Check(
        "dist.ranks", "RANK / LOCAL_RANK / WORLD_SIZE consistent", lambda c: dist.check_ranks(c.env, c.nproc, c.nnodes)
    ),
    Check(
        "dist.hccl_env",
        "HCCL_* values in range, HCCL_IF_IP / HCCL_SOCKET_IFNAME valid",
        lambda c: dist.check_hccl_env(c.env),
    ),
    Check(
        "dist.timeouts",
        "collective timeouts (process group, HCCL_EXEC_TIMEOUT / HCCL_CONNECT_TIMEOUT) and how to raise them",
        lambda c: timeouts.check_timeouts(c.env, c.ascend_present),
    ),
    Check(
        "dist.leftovers",
        "NCCL_* / CUDA_* variables that do nothing on Ascend",
        lambda c: dist.check_leftovers(c.env, c.ascend_present),
    ),
    Check("dist.hccn", "NPU NIC link and net health (hccn_tool)", lambda c: dist.check_hccn(c.env, c.npu_ids)),
    Check("dist.shm", "/dev/shm size", lambda c: dist.check_shm(c.shm)),
    Check(
        "comm",
        "live collective test: init, all_reduce correctness, bus bandwidth",
        lambda c: comm.check_comm(c.nproc or 2, c.python, c.env, c.backend, c.comm_timeout),
        slow=True,
    ),
    Check(
        "log",
        "crash-log explainer: error codes and known messages, root cause first with rank and device",
        lambda c: logs.explain(c.logs),
        logs=True,
    ),
    Check(
        "memory", "memory plan: per-rank peak of a config x layout x card, ranked remedies", lambda c: [], memory=True
    ),
    Check(
        "ckpt",
        "checkpoint: format, contents, fit to a trainer config",
        lambda c: checkpoint.check(c.checkpoint, c.config, c.config_name),
        checkpoint=True,
    ),
)


def _named(check: Check, i: str) -> bool:
    """`i` names the check: its id, or its family (`versions` for versions.torch)."""
    return check.id == i or check.id.startswith(i + ".")


def select(ids: list[str], *, comm: bool, logs: bool, memory: bool = False, ckpt: bool = False) -> list[Check]:
    """Checks to run: the named ones (id or family prefix), else the default set.
    Every finding's code is its check's id or starts with it plus a dot."""
    if ids:
        return [c for c in CHECKS if any(_named(c, i) for i in ids)]
    if logs or ckpt:
        return [c for c in CHECKS if (logs and c.logs) or (ckpt and c.checkpoint)]
    if memory:
        return [c for c in CHECKS if c.memory]
    return [c for c in CHECKS if not (c.logs or c.memory or c.checkpoint) and (comm or not c.slow)]


def unknown(ids: list[str]) -> list[str]:
    return [i for i in ids if not any(_named(c, i) for c in CHECKS)]
