"""torch.distributed / HCCL settings, checked before launch: rendezvous address and
port, rank variables, HCCL_* values (ranges in rules/hccl_env.toml), NCCL/CUDA leftovers
that do nothing on Ascend (named and converted by migrate's env mapping,
rules/migrate/env.toml), hccn_tool link health, and /dev/shm size."""

from __future__ import annotations

import concurrent.futures
import errno
import ipaddress
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

import titan_knowledge as knowledge
from titan_doctor.findings import Finding, Status

DEFAULT_PORT = 29500
SHM_MIN = 1 << 30


def resolve(host: str, timeout: float = 3.0) -> list[str] | str:
    """Addresses for host, or an error string; DNS that hangs counts as an error."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(socket.getaddrinfo, host, None, 0, socket.SOCK_STREAM)
    try:
        infos = fut.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        return f"name lookup did not answer within {timeout:.0f} s"
    except (socket.gaierror, UnicodeError) as e:
        return str(getattr(e, "strerror", None) or e)
    finally:
        pool.shutdown(wait=False)
    return sorted({i[4][0] for i in infos})


def is_local_address(addr: str) -> bool:
    """True when this host owns addr: binding to it succeeds only then."""
    try:
        fam = socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET
    except ValueError:
        return False
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
            return True
        except OSError:
            return False


def port_free(port: int, host: str = "") -> tuple[bool, str]:
    """Bind test like the c10d TCPStore server does (no SO_REUSEPORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True, ""
        except OSError as e:
            return False, os.strerror(e.errno) if e.errno else str(e)


LAUNCHER_VARS = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")  # set by torchrun for its workers


def check_master(env: Mapping[str, str], nnodes: int = 1) -> list[Finding]:
    """MASTER_ADDR resolvable (and not loopback for multi-node), MASTER_PORT valid and free;
    a multi-rank environment without a launcher needs MASTER_ADDR itself."""
    ws = env.get("WORLD_SIZE", "").strip()
    if not env.get("MASTER_ADDR") and ws.isdigit() and int(ws) > 1 and not any(env.get(v) for v in LAUNCHER_VARS):
        return [
            Finding(
                "dist.master.addr",
                Status.FAIL,
                f"WORLD_SIZE={ws} but MASTER_ADDR is unset, and no launcher (torchrun) runs this process",
                detail="init_process_group(init_method='env://') reads MASTER_ADDR/MASTER_PORT and fails "
                "with 'environment variable MASTER_ADDR expected, but not set'.",
                fix=f"Launch with torchrun --nproc_per_node <N> (it sets them for every rank), or export "
                f"MASTER_ADDR=<rank-0 host> MASTER_PORT={DEFAULT_PORT}",
                data={"world_size": int(ws)},
            )
        ]
    addr_finding, addresses = _check_addr(env.get("MASTER_ADDR"), nnodes)
    return [addr_finding] + _check_port(env.get("MASTER_PORT"), addresses)


def _check_addr(addr: str | None, nnodes: int) -> tuple[Finding, list[str] | None]:
    """The finding, and the addresses MASTER_ADDR stands for (None: unknown / unset)."""
    code = "dist.master.addr"
    if not addr:
        if nnodes > 1:
            return Finding(
                code,
                Status.FAIL,
                f"MASTER_ADDR unset with --nnodes {nnodes}",
                fix="export MASTER_ADDR=<IP of the rank-0 node> on every node",
            ), None
        return Finding(code, Status.OK, "MASTER_ADDR unset (single node: launcher uses localhost)"), None
    got = resolve(addr)
    if isinstance(got, str):
        return Finding(
            code,
            Status.FAIL,
            f"MASTER_ADDR={addr} does not resolve: {got}",
            fix="Set MASTER_ADDR to the rank-0 node's IP address (or add it to /etc/hosts)",
            data={"host": addr, "error": got},
        ), []
    if nnodes > 1 and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in got):
        return Finding(
            code,
            Status.FAIL,
            f"MASTER_ADDR={addr} is loopback but --nnodes {nnodes}",
            fix="Use the rank-0 node's network IP",
        ), got
    return Finding(code, Status.OK, f"MASTER_ADDR={addr} -> {', '.join(got[:3])}", data={"addresses": got}), got


def _check_port(port_raw: str | None, addresses: list[str] | None) -> list[Finding]:
    """Bind-test the port when rank 0 would listen on this host."""
    code = "dist.master.port"
    port = DEFAULT_PORT
    if port_raw is not None:
        if not port_raw.isdigit() or not 1 <= int(port_raw) <= 65535:
            return [
                Finding(
                    code, Status.FAIL, f"MASTER_PORT={port_raw!r} is not a port number", fix="export MASTER_PORT=29500"
                )
            ]
        port = int(port_raw)
    if addresses is not None and not any(is_local_address(a) for a in addresses):
        why = "MASTER_ADDR does not resolve" if not addresses else "rank 0 is another host"
        return [Finding(code, Status.OK, f"MASTER_PORT={port} (not bind-tested: {why})", data={"port": port})]
    free, err = port_free(port)
    label = f"MASTER_PORT={port}" if port_raw else f"default port {port}"
    if free:
        return [Finding(code, Status.OK, f"{label} is free on this host", data={"port": port})]
    return [
        Finding(
            code,
            Status.FAIL,
            f"{label} is already in use on this host ({err})",
            detail="Rank 0 will fail with 'EADDRINUSE ... address already in use'.",
            fix=f"ss -ltnp | grep :{port}   to find the holder, or export MASTER_PORT=<free port>",
            data={"port": port, "error": err},
        )
    ]


def check_ranks(env: Mapping[str, str], nproc: int | None, nnodes: int = 1) -> list[Finding]:
    """RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE are integers and consistent."""
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    vals: dict[str, int] = {}
    for k in names:
        if k in env:
            if not re.fullmatch(r"\d+", env[k].strip()):
                return [
                    Finding(
                        "dist.ranks",
                        Status.FAIL,
                        f"{k}={env[k]!r} is not a non-negative integer",
                        fix=f"unset {k}  (torchrun / titan-train set it per rank)",
                    )
                ]
            vals[k] = int(env[k])
    if not vals:
        return [Finding("dist.ranks", Status.OK, "RANK/WORLD_SIZE unset (the launcher sets them per rank)")]
    probs = []
    ws, lws = vals.get("WORLD_SIZE"), vals.get("LOCAL_WORLD_SIZE")
    if "RANK" in vals and ws is None:
        probs.append("RANK set without WORLD_SIZE")
    if ws is not None and "RANK" in vals and vals["RANK"] >= ws:
        probs.append(f"RANK={vals['RANK']} >= WORLD_SIZE={ws}")
    if lws is not None and "LOCAL_RANK" in vals and vals["LOCAL_RANK"] >= lws:
        probs.append(f"LOCAL_RANK={vals['LOCAL_RANK']} >= LOCAL_WORLD_SIZE={lws}")
    if nproc and "LOCAL_RANK" in vals and vals["LOCAL_RANK"] >= nproc:
        probs.append(f"LOCAL_RANK={vals['LOCAL_RANK']} >= --nproc {nproc} (local ranks are 0..{nproc - 1})")
    if ws is not None and nproc and ws != nproc * nnodes:
        probs.append(f"WORLD_SIZE={ws} but --nproc {nproc} x --nnodes {nnodes} = {nproc * nnodes}")
    if ws is not None and lws is not None and ws % lws:
        probs.append(f"WORLD_SIZE={ws} is not a multiple of LOCAL_WORLD_SIZE={lws}")
    shown = ", ".join(f"{k}={v}" for k, v in vals.items())
    if probs:
        return [
            Finding(
                "dist.ranks",
                Status.FAIL,
                "rank variables inconsistent: " + "; ".join(probs),
                detail=shown,
                fix="unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE and let the launcher set them",
                data=vals,
            )
        ]
    return [Finding("dist.ranks", Status.OK, f"rank variables consistent ({shown})", data=vals)]


def interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def _ifname_matches(spec: str, names: list[str]) -> list[str]:
    """NCCL/HCCL IFNAME syntax: 'eth,ib' prefixes, '=eth0' exact, '^docker' exclude."""
    exact = spec.startswith("=")
    exclude = spec.startswith("^")
    pats = [p for p in spec.lstrip("=^").split(",") if p]
    hit = [n for n in names if any((n == p) if exact else n.startswith(p) for p in pats)]
    return [n for n in names if n not in hit] if exclude else hit


def largest_device_mb() -> int:
    """The most memory any card of rules/devices.toml has, in MB."""
    return int(max((d["memory_gib"] for d in knowledge.devices()), default=256) * 1024)


def _bytes_not_mb(r: dict, value: int) -> Finding:
    """A MB value larger than any card's memory can only be a byte count (NCCL_BUFFSIZE's
    unit); what it is in MB is migrate's conversion (rules/kinds/env_values.convert_to)."""
    from titan_doctor.migrate.rules import builtin_rules
    from titan_doctor.migrate.rules.kinds.env_values import convert_to

    change = convert_to(builtin_rules(), r["name"], str(value))
    mb = int(change.new_value) if change is not None and change.new_value is not None else None
    if mb is not None:
        shown = f"{value} bytes = {mb} MB"
        fix = f"export {r['name']}={mb}   (the same {value} bytes in MB)"
    else:
        why = change.why if change is not None else "no exact conversion"
        shown = f"{value} bytes is not a whole number of MB"
        fix = f"export {r['name']}=<MB>: {why}"
    return Finding(
        "dist.hccl_env",
        Status.FAIL,
        f"{r['name']}={value} is {r['unit']}, i.e. {value / (1 << 20):.1f} TiB, more than any NPU has: "
        f"it was given in bytes",
        detail=f"{r['why']}. {shown}; as MB it asks every communicator for "
        f"2 x {value} MB and HCCL init fails (out of memory).",
        fix=f"{fix}, or unset it for HCCL's default {r['default']} MB",
        data={"var": r["name"], "value": value, "as_mb": mb, "source": r["source"]},
    )


def check_hccl_env(env: Mapping[str, str], if_names: list[str] | None = None) -> list[Finding]:
    """HCCL_* within documented ranges; HCCL_IF_IP ours; HCCL_SOCKET_IFNAME matches a NIC."""
    out: list[Finding] = []
    for r in knowledge.load("hccl_env").get("range", []):
        raw = env.get(r["name"])
        if raw is None:
            continue
        if not raw.strip().isdigit():
            out.append(
                Finding(
                    "dist.hccl_env",
                    Status.FAIL,
                    f"{r['name']}={raw!r} is not an integer ({r['unit']})",
                    fix=f"export {r['name']}={r['default']}",
                    data={"var": r["name"]},
                )
            )
        elif r.get("device_memory_bound") and int(raw) > largest_device_mb():
            out.append(_bytes_not_mb(r, int(raw)))
        elif not r["min"] <= int(raw) <= r["max"]:
            out.append(
                Finding(
                    "dist.hccl_env",
                    Status.FAIL,
                    f"{r['name']}={raw} outside [{r['min']}, {r['max']}] {r['unit']} ({r['why']})",
                    fix=f"export {r['name']}={min(max(int(raw), r['min']), r['max'])}",
                    data={"var": r["name"], "source": r["source"]},
                )
            )
        elif "warn_above" in r and int(raw) > r["warn_above"]:
            out.append(
                Finding(
                    "dist.hccl_env",
                    Status.WARN,
                    f"{r['name']}={raw} {r['unit']} is unusually large ({r['why']})",
                    fix=f"export {r['name']}={r['default']}  (raise only as far as your largest message needs)",
                    data={"var": r["name"], "source": r["source"]},
                )
            )
        else:
            out.append(Finding("dist.hccl_env", Status.OK, f"{r['name']}={raw} {r['unit']}", data={"var": r["name"]}))
    ip = env.get("HCCL_IF_IP")
    if ip:
        if is_local_address(ip):
            out.append(Finding("dist.hccl_env", Status.OK, f"HCCL_IF_IP={ip} is an address of this host"))
        else:
            out.append(
                Finding(
                    "dist.hccl_env",
                    Status.FAIL,
                    f"HCCL_IF_IP={ip} is not an address of this host",
                    fix="Set it per node to that node's own IP (ip -4 addr), or unset it",
                    data={"var": "HCCL_IF_IP"},
                )
            )
    spec = env.get("HCCL_SOCKET_IFNAME")
    if spec:
        names = interfaces() if if_names is None else if_names
        hit = _ifname_matches(spec, names)
        if hit:
            out.append(Finding("dist.hccl_env", Status.OK, f"HCCL_SOCKET_IFNAME={spec} matches {', '.join(hit)}"))
        else:
            out.append(
                Finding(
                    "dist.hccl_env",
                    Status.FAIL,
                    f"HCCL_SOCKET_IFNAME={spec} matches no interface",
                    detail="interfaces here: " + ", ".join(names),
                    fix=f"export HCCL_SOCKET_IFNAME={next((n for n in names if n != 'lo'), 'eth0')}",
                    data={"var": "HCCL_SOCKET_IFNAME", "interfaces": names},
                )
            )
    if not out:
        out.append(Finding("dist.hccl_env", Status.OK, "no HCCL_* overrides (defaults apply)"))
    return out


LEFTOVER_PREFIXES = ("NCCL_", "CUDA_", "TORCH_NCCL_")


def _is_leftover(name: str, rules) -> bool:
    """A CUDA/NCCL setting: by its prefix, or a variable migrate renames (PYTORCH_CUDA_ALLOC_CONF)."""
    if name.startswith(LEFTOVER_PREFIXES):
        return True
    rule = rules.env_rule(name)
    return rule is not None and rule.new is not None


def check_leftovers(env: Mapping[str, str], on_npu: bool) -> list[Finding]:
    """NCCL_* / CUDA_* settings do nothing on Ascend; name the variable that does and its
    value. Names and value conversions are migrate's (rules/migrate/env.toml through
    rules/kinds/env_values.convert_env): the advice here is what `migrate` would write."""
    candidates = [k for k in env if "CUDA" in k or "NCCL" in k]
    found = []
    if candidates:  # the migrate rules are loaded only when something could match
        from titan_doctor.migrate.rules import builtin_rules

        rules = builtin_rules()
        found = sorted(k for k in candidates if _is_leftover(k, rules))
    if not found:
        return [Finding("dist.leftovers", Status.OK, "no NCCL_*/CUDA_* leftovers in the environment")]
    if not on_npu:
        return [
            Finding(
                "dist.leftovers",
                Status.INFO,
                f"{len(found)} NCCL_*/CUDA_* variable(s) set (fine here: no Ascend stack found)",
                detail=", ".join(found),
            )
        ]
    out = []
    for k in found:
        eq, value, fix = translate(rules, k, env[k])
        out.append(
            Finding(
                "dist.leftovers",
                Status.WARN,
                f"{k}={env[k]} does nothing on Ascend" + (f"; use {eq}" if eq else ""),
                fix=fix,
                data={"var": k, "equivalent": eq, "value": value},
            )
        )
    return out


def translate(rules, name: str, value: str) -> tuple[str, str | None, str]:
    """(the Ascend variable or "", its value or None when a person must choose it, the fix)
    for one NCCL/CUDA variable set to `value`, by migrate's env mapping."""
    from titan_doctor.migrate.rules.kinds.env_values import convert_env

    change = convert_env(rules, name, value)
    rule = change.rule if change is not None else None
    if rule is None or rule.new is None:
        hint = f"; {rule.fix}" if rule is not None and rule.fix else ""
        return "", None, f"unset {name}   (no Ascend equivalent){hint}"
    if change.new_name is None:
        hint = f"; {rule.fix}" if rule.fix else ""
        return rule.new, None, f"unset {name}; set {rule.new} by hand: {change.why}{hint}"
    new_value = value if change.new_value is None else change.new_value
    note = ""
    if change.new_value is not None:
        note = f"   ({value} {rule.old_unit} = {new_value} {rule.new_unit})"
    return rule.new, new_value, f"export {rule.new}={new_value}; unset {name}" + note


def check_hccn(env: Mapping[str, str], device_ids: list[int], timeout: float = 10.0) -> list[Finding]:
    """Per-NPU RoCE link and network health from hccn_tool (multi-node HCCL runs on it)."""
    exe = shutil.which("hccn_tool", path=env.get("PATH"))
    if not exe:
        return [Finding("dist.hccn", Status.SKIP, "hccn_tool not found (NPU NIC health not checked)")]
    if not device_ids:
        return [Finding("dist.hccn", Status.SKIP, "hccn_tool present but no NPU ids to query")]
    bad, good = [], []
    for i in device_ids:
        res = {}
        for what, key in (("-link", "link"), ("-net_health", "health")):
            try:
                p = subprocess.run(
                    [exe, "-i", str(i), what, "-g"], capture_output=True, text=True, timeout=timeout, env=dict(env)
                )
                res[key] = (
                    p.stdout.strip().splitlines()[-1].split(":")[-1].strip()
                    if p.stdout.strip()
                    else f"exit {p.returncode}"
                )
            except (subprocess.TimeoutExpired, OSError) as e:
                res[key] = f"no answer ({type(e).__name__})"
        (good if res["link"].upper() == "UP" and res["health"].lower() == "success" else bad).append((i, res))
    lines = [f"NPU {i}: link {r['link']}, net health {r['health']}" for i, r in good + bad]
    if bad:
        return [
            Finding(
                "dist.hccn",
                Status.FAIL,
                f"{len(bad)} NPU NIC(s) unhealthy: " + ", ".join(str(i) for i, _ in bad),
                detail="\n".join(lines),
                fix="hccn_tool -i <id> -net_health -g; check cables/switch and the detect IP "
                "(hccn_tool -i <id> -netdetect -s address <gateway>)",
                data={"bad": [i for i, _ in bad]},
            )
        ]
    return [
        Finding("dist.hccn", Status.OK, f"{len(good)} NPU NIC(s) link UP, net health Success", detail="\n".join(lines))
    ]


def check_shm(path: Path = Path("/dev/shm"), minimum: int = SHM_MIN) -> list[Finding]:
    """Dataloader workers and gloo pass tensors through /dev/shm; docker's 64 MB default is too small."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        return [
            Finding(
                "dist.shm",
                Status.WARN,
                f"{path} unusable: {os.strerror(e.errno or errno.ENOENT)}",
                fix="docker run --shm-size=16g ... (or mount a tmpfs on /dev/shm)",
            )
        ]
    size = st.f_blocks * st.f_frsize
    gib = size / (1 << 30)
    if size < minimum:
        return [
            Finding(
                "dist.shm",
                Status.WARN,
                f"{path} is only {size / (1 << 20):.0f} MiB",
                detail="DataLoader workers and gloo fail with 'Bus error' / 'No space left' on small shm.",
                fix="docker run --shm-size=16g ...  (Kubernetes: an emptyDir with medium: Memory)",
                data={"bytes": size},
            )
        ]
    return [Finding("dist.shm", Status.OK, f"{path} {gib:.1f} GiB", data={"bytes": size})]
