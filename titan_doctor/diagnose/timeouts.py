"""How long a rank waits for the others before a collective fails, and which knob sets it.

Two clocks run: the process group's (torch's watchdog; `init_process_group(timeout=)`, in
titan-train `distributed.timeout_s`) and the collective library's own (HCCL_EXEC_TIMEOUT for
a collective on the device, HCCL_CONNECT_TIMEOUT for the links set up at the first one;
NCCL has none of its own by default). A slow first collective on a big job, or ranks waiting
in a collective while one rank writes a long checkpoint, meets whichever is shorter, so they
are raised together. Defaults and ranges: rules/hccl_env.toml (CANN's documentation) and
torch's c10d (`_DEFAULT_PG_TIMEOUT`, 30 min; ProcessGroupNCCL's 10 min).
"""

from __future__ import annotations

from collections.abc import Mapping

from titan_doctor.findings import Finding, Status
from titan_knowledge import load as knowledge

PG_DEFAULT_S = {"hccl": 1800, "gloo": 1800, "nccl": 600}  # torch's c10d defaults (HCCL: torch's generic one)
# torch >= 2.2 reads the TORCH_NCCL_ spellings; the old ones only warn (ProcessGroupNCCL's env names)
RENAMED = {
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}


def _hccl(env: Mapping[str, str], name: str) -> tuple[int | None, int]:
    """(the value set, or None) and the documented default of an HCCL timeout variable."""
    row = next(r for r in knowledge("hccl_env")["range"] if r["name"] == name)
    raw = env.get(name, "").strip()
    return (int(raw) if raw.isdigit() else None), int(row["default"])


def _shown(value: int | None, default: int) -> str:
    return f"{value} s" if value is not None else f"{default} s (default)"


def check_timeouts(env: Mapping[str, str], on_npu: bool) -> list[Finding]:
    """The collective timeouts in force, with the settings that raise them together."""
    out = [
        Finding(
            "dist.timeouts",
            Status.WARN,
            f"{old} is the old spelling: torch reads {new}",
            fix=f"export {new}={env[old]}; unset {old}",
            data={"var": old},
        )
        for old, new in RENAMED.items()
        if old in env and new not in env
    ]
    if on_npu or any(k.startswith("HCCL_") for k in env):
        exec_s, exec_default = _hccl(env, "HCCL_EXEC_TIMEOUT")
        connect_s, connect_default = _hccl(env, "HCCL_CONNECT_TIMEOUT")
        pg = PG_DEFAULT_S["hccl"]
        waits = exec_s if exec_s is not None else exec_default
        message = (
            f"collective timeouts: process group {pg} s (torch's default; titan-train: distributed.timeout_s), "
            f"HCCL_EXEC_TIMEOUT {_shown(exec_s, exec_default)}, HCCL_CONNECT_TIMEOUT {_shown(connect_s, connect_default)}"
        )
        detail = (
            "A collective fails at the shorter of the process-group timeout and HCCL_EXEC_TIMEOUT "
            f"({min(pg, waits) if waits else pg} s here; HCCL_EXEC_TIMEOUT=0 never times out on Atlas A2/A3); "
            "the links of the first collective must come up within HCCL_CONNECT_TIMEOUT (120-7200 s)."
        )
        fix = (
            "a slow first collective or a long checkpoint save on a big job: raise both, e.g. "
            "--set distributed.timeout_s=3600 and export HCCL_EXEC_TIMEOUT=3600; many nodes: "
            "export HCCL_CONNECT_TIMEOUT=600"
        )
        data = {
            "pg_default_s": pg,
            "hccl_exec_timeout_s": waits,
            "hccl_connect_timeout_s": connect_s or connect_default,
        }
    else:
        message = (
            f"collective timeouts: process group {PG_DEFAULT_S['nccl']} s with nccl, {PG_DEFAULT_S['gloo']} s with "
            "gloo (torch's defaults; titan-train: distributed.timeout_s)"
        )
        detail = (
            "NCCL has no timeout of its own: torch's watchdog aborts a collective after the process-group "
            "timeout (TORCH_NCCL_ASYNC_ERROR_HANDLING, default 3: tear down and end the process)."
        )
        fix = "a slow first collective or a long checkpoint save on a big job: --set distributed.timeout_s=3600"
        data = {"pg_default_s": dict(PG_DEFAULT_S)}
    out.append(Finding("dist.timeouts", Status.INFO, message, detail=detail, fix=fix, data=data))
    return out
