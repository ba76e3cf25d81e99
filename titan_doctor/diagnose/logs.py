"""Crash-log explainer: read training logs (a file, several, or a folder of per-rank logs
and torchrun error.json files), find every error they report (codes decoded by
error_codes.py, messages by the signature vocabularies of signatures.py), and report the root
cause first: what failed, on which rank and device, why, and the exact fix; then everything
else once, with where it first appeared (file:line) and on which ranks.

The root finding quotes the lines it rests on. A weak signal says "likely" and what would
confirm it. When nothing known matches, the root is the error itself, extracted from the log
(the last exception of the first failing traceback, where the user's code raised it, on which
rank) with the next step for its family (families.py), never a bare "no known error"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import (
    build_and_dispatch,
    command_line_errors,
    error_codes,
    families,
    incidents,
    log_lines,
    programming_errors,
    signatures,
    state_dict_errors,
    tracebacks,
)
from titan_doctor.diagnose.incidents import Event, Incident
from titan_doctor.diagnose.log_facts import Facts, classify_address
from titan_doctor.diagnose.log_lines import expand, raw_lines
from titan_doctor.findings import Finding, Status

_SIZE = re.compile(r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB|PiB|EiB|KB|MB|GB|TB|PB|EB)")
_UNITS = {
    "bytes": 1,
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "KB": 1 << 10,
    "MB": 1 << 20,
    "GB": 1 << 30,
    "TB": 1 << 40,
    "PiB": 1 << 50,
    "EiB": 1 << 60,
    "PB": 1 << 50,
    "EB": 1 << 60,
}
# no accelerator has a petabyte: a request this large is a size computed wrong, not a full card
_ABSURD = 1 << 50
_BARE = re.compile(r"(?i)(?:inner|internal) error!?")
_PIP_NAME = {
    "attr": "attrs",
    "yaml": "pyyaml",
    "absl": "absl-py",
    "google.protobuf": "protobuf",
    "ml_dtypes": "ml-dtypes",
}


def to_bytes(s: str) -> float | None:
    m = _SIZE.fullmatch(s.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def human(n: float) -> str:
    for unit in ("GiB", "MiB", "KiB"):
        if abs(n) >= _UNITS[unit]:
            return f"{n / _UNITS[unit]:.2f} {unit}"
    return f"{n:.0f} bytes"


# ---- parsers: what a matched message says beyond its regex groups --------------------


def _oom(e: Event) -> dict[str, Any]:
    groups = e.groups
    req, free = to_bytes(groups.get("req", "")), to_bytes(groups.get("free", ""))
    total = to_bytes(groups.get("total", ""))
    alloc = to_bytes(groups.get("alloc", ""))
    reserved = to_bytes(groups.get("reserved", "")) or (
        (alloc or 0) + (to_bytes(groups.get("unalloc", "")) or 0) if "unalloc" in groups else None
    )
    out: dict[str, Any] = {
        k: v
        for k, v in dict(requested=req, free=free, total=total, allocated=alloc, reserved=reserved).items()
        if v is not None
    }
    kind = "NPU" if e.id == "oom.npu" else "GPU"
    where = f"{kind} {groups['dev']}" if groups.get("dev") else f"The {kind}"
    out["where"] = where
    if req is not None and free is not None:
        short = req - free
        out["short_by"] = short
        parts = [
            f"asked for {groups['req']} with {groups['free']} free"
            + (f", short by {human(short)}" if short > 0 else " (free memory is fragmented or held by another process)")
        ]
        if total:
            parts.append(
                f"{human(alloc or 0)} of {groups['total']} already allocated ({100 * (alloc or 0) / total:.0f}%)"
            )
        if reserved is not None and alloc is not None and reserved - alloc > 0:
            parts.append(f"{human(reserved - alloc)} reserved but unused (fragmentation)")
        out["summary"] = "; ".join(parts)
    return out


def _oom_any(e: Event) -> dict[str, Any]:
    """An out-of-memory message in a shorter form than the allocators' full reports: the size
    asked for, and whether it is a size no device has (an overflowed or negative shape)."""
    req = to_bytes(e.groups.get("req") or "")
    kind = (e.groups.get("kind") or "device").upper()
    if req is not None and req >= _ABSURD:
        return {
            "oom_note": f"The allocation asked for {e.groups['req']}, more than any {kind} has: the size was computed "
            "wrong, not the memory used up. A tensor shape overflowed or went negative (an int32 product of "
            "dimensions, a length read as -1 and converted to unsigned, an uninitialised size), usually in the "
            "op or kernel named in the traceback.",
            "oom_fix": "Print the shapes reaching the failing op (the traceback's last frame) and find the dimension "
            "that is negative or huge; a custom kernel's launch/tiling parameters or a sequence length that "
            "overflows int32 are the usual sources. Lowering the batch size does not help",
        }
    asked = f" (it asked for {e.groups['req']})" if e.groups.get("req") else ""
    return {
        "oom_note": f"The {kind} allocator could not place an allocation{asked}: the device memory is used up by "
        "this process (weights, optimizer state, activations) or held by another one.",
        "oom_fix": families.next_step("oom_device"),
    }


# CANN's dtype names -> (torch dtype, what to cast to on the NPU)
_CANN_DTYPES = {
    "DT_UINT64": ("torch.uint64", "int64 (x.to(torch.int64); values above 2**63 need another encoding)"),
    "DT_UINT32": ("torch.uint32", "int64 (x.to(torch.int64)) or int32 when the values fit"),
    "DT_UINT16": ("torch.uint16", "int32 (x.to(torch.int32))"),
    "DT_DOUBLE": ("torch.float64", "float32 (x.float()); compute in float64 on the CPU if the precision is needed"),
    "DT_BF16": ("torch.bfloat16", "float16 or float32 (x.half() / x.float()) on chips without bfloat16 kernels"),
    "DT_BFLOAT16": ("torch.bfloat16", "float16 or float32 (x.half() / x.float()) on chips without bfloat16 kernels"),
    "DT_COMPLEX64": ("torch.complex64", "a real pair (torch.view_as_real(x)) and real arithmetic"),
    "DT_COMPLEX128": ("torch.complex128", "a real pair (torch.view_as_real(x)) and real arithmetic"),
    "DT_INT64": ("torch.int64", "int32 (x.to(torch.int32)) when the values fit"),
    "DT_BOOL": ("torch.bool", "uint8 or int32 (x.to(torch.int32))"),
    "DT_INT8": ("torch.int8", "int32 or float16"),
    "DT_UINT8": ("torch.uint8", "int32 or float16"),
}


_DT_INPUT = re.compile(r"(\w+) not (?:implemented|supported) for DT_")


def _cann_dtype(e: Event) -> dict[str, Any]:
    dt = "DT_" + (e.groups.get("dt") or e.groups.get("dt2") or "?")
    torch_name, cast = _CANN_DTYPES.get(dt, (dt, "a dtype the operator lists (float16/float32, int32/int64)"))
    named = _DT_INPUT.search(e.line.text)
    what = named.group(1) if named else ""
    return {
        "dt_name": dt,
        "dt_torch": torch_name,
        "dt_cast": f"{dt} ({torch_name}) -> {cast}",
        "what_note": f" (input '{what}')" if what else "",
    }


def _oom_killer(e: Event) -> dict[str, Any]:
    rss = e.groups.get("rss")
    return {"rss_note": f", which held {human(int(rss) * 1024)} of RAM" if rss else ""}


# cudaError_t texts (CUDA runtime API, cudaGetErrorString) that NCCL quotes in "Cuda failure N
# '...'", with what fixes each; the others keep the signature's general advice
_CUDA_ERRORS = {
    "peer access is not supported between these two devices": (
        "the GPUs cannot access each other's memory directly (P2P over PCIe is not supported by this topology, a "
        "virtual machine or these GPU models)",
        "export NCCL_P2P_DISABLE=1 (NCCL then copies through host memory); nvidia-smi topo -m shows the links",
    ),
    "out of memory": ("the GPU had no memory left for NCCL's buffers", "oom_device"),
    "invalid device ordinal": (
        "a process selected a GPU index that it cannot see",
        "device_visibility",
    ),
    "all CUDA-capable devices are busy or unavailable": (
        "the GPU is in exclusive-process mode and held by another process, or unavailable",
        "device_busy",
    ),
    "CUDA driver version is insufficient for CUDA runtime version": (
        "the NVIDIA driver is older than the CUDA runtime torch was built with",
        "Install a driver that supports the CUDA version of your torch build (nvidia-smi shows the driver's maximum "
        "CUDA version), or a torch build for an older CUDA",
    ),
}


def _cuda_err(e: Event) -> dict[str, Any]:
    known = _CUDA_ERRORS.get((e.groups.get("err") or "").strip())
    if not known:
        return {"cuda_note": "", "cuda_fix": ""}
    fix = families.next_step(known[1]) if known[1] in families.ids() else known[1]  # a family: its next step
    return {"cuda_note": f" Here: {known[0]}.", "cuda_fix": fix + "; "}


# torch_npu APIs that moved: the attribute a log says is missing -> where it lives now
_NPU_API_MOVED = {
    "profile": "torch_npu.npu.profile was removed: profile with torch_npu.profiler.profile(activities=["
    "torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU], ...) instead",
}


def _npu_api(e: Event) -> dict[str, Any]:
    moved = _NPU_API_MOVED.get(e.groups.get("attr") or e.groups.get("name") or "")
    return {"moved_fix": moved + "; if the call is in a package, not your code: " if moved else ""}


_KEY_LIST = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: ")


def _state_dict_keys(e: Event) -> dict[str, Any]:
    """Both lists, whether torch printed them on one line or on two."""
    lists: dict[str, list[str]] = {"Missing": [], "Unexpected": []}
    for line in e.lines:
        heads = list(_KEY_LIST.finditer(line.text))
        for h, nxt in zip(heads, heads[1:] + [None]):
            text = line.text[h.end() : nxt.start() if nxt else None]
            keys = state_dict_errors.quoted_keys(text) or [text.strip(" .")]
            lists[h.group(1)].extend(k for k in keys if k)
    return state_dict_errors.judge_keys(lists["Missing"], lists["Unexpected"])


def _keyerror(e: Event) -> dict[str, Any]:
    key = e.groups.get("keys", "")
    return state_dict_errors.judge_keys([key], [])


def _dcp_key(e: Event) -> dict[str, Any]:
    """Why a DCP checkpoint lacks the key the model asked for, by the key's shape: Megatron /
    TransformerEngine extra state, a wrapper prefix added on one side, or another model."""
    key = e.groups.get("key", "")
    compare = (
        'Compare the two key sets: python -c "from torch.distributed.checkpoint import FileSystemReader as R; '
        "print(sorted(R('<checkpoint dir>').read_metadata().state_dict_metadata)[:20])\" against "
        "sorted(model.state_dict())[:20]. "
    )
    if "_extra_state" in key:
        return {
            "dcp_note": "It is TransformerEngine extra state (FP8 scaling metadata kept by Megatron-Core layers): the "
            "checkpoint was written without it (converted from Hugging Face weights, an incomplete "
            "conversion, or another TransformerEngine / Megatron version).",
            "dcp_fix": compare + "Megatron-Core: load with --dist-ckpt-strictness log_all (NeMo: "
            "MegatronStrategy(ckpt_load_strictness=...)) so missing extra state is tolerated, or convert "
            "the checkpoint again with the versions you train with",
        }
    wrapper = next((w for w in state_dict_errors.WRAPPER_PREFIXES if key.startswith(w) or "." + w in key), None)
    if wrapper:
        origin = state_dict_errors.WRAPPER_PREFIXES[wrapper]
        return {
            "dcp_note": f"The key carries '{wrapper}' ({origin}): the model was wrapped when loading but not when "
            "the checkpoint was saved (or the other way round).",
            "dcp_fix": compare + "Save and load through torch.distributed.checkpoint.state_dict.get_model_state_dict"
            "(model) / set_model_state_dict, which use the unwrapped names, or load into the same "
            "wrapping the checkpoint was saved with",
        }
    buffer = state_dict_errors.BUFFER_NAMES.search(key)
    if buffer:
        name = buffer.group(0).lstrip(".")
        return {
            "dcp_note": f"'{name}' is a buffer the model registers (a RoPE table, position ids or a mask), not a "
            "trained weight: the model registers it persistent, so DCP asks for it, and the checkpoint was written "
            "without it (weights converted from another format, or saved by a model that registers it "
            "persistent=False).",
            "dcp_fix": compare + f"Register {name} with persistent=False (self.register_buffer('{name}', ..., "
            "persistent=False): it is recomputed at start-up, so it need not be saved), or add it to the converted "
            "checkpoint; do not load with allow_partial_load just for it",
        }
    return {
        "dcp_note": "The model (or optimizer) has this entry and the checkpoint does not: the checkpoint was saved "
        "from another model or config (a layer or head added, a module renamed), or it is not the "
        "checkpoint meant here (another run's, a teacher/student mix-up).",
        "dcp_fix": compare + "Point the load at the checkpoint saved from this model and config; to load a partial "
        "checkpoint on purpose (new layers keep their initial values): dcp.load(state_dict, "
        "checkpoint_id=<dir>, planner=DefaultLoadPlanner(allow_partial_load=True))",
    }


def _size_mismatch(e: Event) -> dict[str, Any]:
    return state_dict_errors.judge_sizes(e.group_list)


def _ping_answer(e: Event) -> dict[str, Any]:
    """The store ping reads 4 bytes as an int; printable bytes name the real service."""
    raw = int(e.groups.get("got", "0")).to_bytes(8, "little").rstrip(b"\0")
    text = raw.decode("ascii", "replace") if raw and all(32 <= b < 127 for b in raw) else ""
    return {"answer": text, "answer_note": f" (it answered {text!r})" if text else ""}


def _nnal(e: Event) -> dict[str, Any]:
    g = e.groups
    what = g.get("lib") or g.get("path") or (f"the symbol {g['symbol']}" if g.get("symbol") else "this library")
    path = g.get("path") or g.get("lib") or ""
    root = path.split("/nnal/")[0] + "/nnal" if "/nnal/" in path else "/usr/local/Ascend/nnal"
    return {"what": what, "nnal_set_env": f"{root}/atb/set_env.sh"}


def _python_package(e: Event) -> dict[str, Any]:
    mod = e.groups.get("module", "")
    return {"package": _PIP_NAME.get(mod, mod)}


# distributions known by two names, the one a check may look up and the one installed
_ALIASES = {"megatron": "megatron-core, megatron-lm", "apex": "apex (NVIDIA's, built from source)"}


def _package_not_found(e: Event) -> dict[str, Any]:
    g = e.groups
    pkg = g.get("pkg") or g.get("pkg2") or g.get("pkg3") or ""
    module = pkg.lower().replace("-", "_")
    alias = _ALIASES.get(module.split("_")[0], "")
    return {
        "pkg": pkg,
        "module": module,
        "who_note": f" ({g['who']} checks for it)" if g.get("who") else "",
        "alias_note": f": {alias}" if alias else "",
        "src_note": ", or build it from source as its README says" if "source" in e.line.text.lower() else "",
    }


def _dtype(e: Event) -> dict[str, Any]:
    g = e.groups
    dtype = g.get("dtype") or (g.get("dt") or g.get("st") or g.get("dt3") or "").lower()
    supported = [x.replace("DT_", "").lower() for x in (g.get("supported") or "").split(",") if x.strip()]
    return {
        "dtype_name": dtype or "this dtype",
        "op_note": f" ({g.get('op') or g.get('optype')})" if g.get("op") or g.get("optype") else "",
        "supported_note": f"; it supports {', '.join(supported)}" if supported else "",
    }


def _kernel_unit(e: Event) -> dict[str, Any]:
    """The unit the fault report names, whichever of its spellings matched. An AI CPU
    kernel of a standard op comes with CANN's ops package: one failing on a fresh install is
    most often that package not matching torch_npu."""
    unit = e.groups.get("unit") or e.groups.get("unit2") or e.groups.get("unit3") or "compute"
    aicpu = unit == "aicpu" or "aicpu" in " ".join(ln.text.lower() for ln in e.lines)
    return {
        "unit": unit,
        "unit_fix": "; an AI CPU fault in a standard torch op (normal_, randperm, index ops) usually means the CANN "
        "ops package (its AI CPU kernels) does not match this torch_npu: install the CANN version the torch_npu "
        "release lists"
        if aicpu
        else "",
    }


def _graph_capture(e: Event) -> dict[str, Any]:
    """What the capture met: an aclop operator by name, a synchronous copy, or only its end."""
    g = e.groups
    if g.get("op"):
        return {"what": f"the operator {g['op']} runs through aclop, which"}
    if "memcpy" in e.line.text.lower() or "capture mode" in e.line.text:
        return {"what": "a synchronous memory copy (rtMemcpy) issued during capture"}
    return {"what": f"something the capture recorded (capture end failed with {g.get('capcode', 'an error')})"}


def _dcmi(e: Event) -> dict[str, Any]:
    reason = e.groups.get("reason")
    return {"reason_note": f": {reason}" if reason else ""}


_ADDRESS_NOTE = {
    "ipv6_link_local": (
        " {addr} is an IPv6 link-local address (fe80::/10, valid on one link only): other hosts cannot route "
        "to it; NCCL picked an interface (or an address family) the nodes do not share.",
        "NCCL_SOCKET_FAMILY=AF_INET (or NCCL_SOCKET_IFNAME=<the interface with the nodes' shared IPv4 address>); ",
    ),
    "docker_bridge": (
        " {addr} is in docker's default bridge network (172.17.0.0/16): a container's private address that "
        "other hosts cannot reach.",
        "Run the containers with host networking (docker run --net=host / --network host), or advertise the "
        "host's own IP (MASTER_ADDR, Ray --node-ip-address, VLLM_HOST_IP); ",
    ),
    "loopback": (
        " {addr} is a loopback address: only this host can reach it.",
        "Use the host's network address (hostname -I) for MASTER_ADDR / --rdzv-endpoint, not localhost; ",
    ),
    "ipv4_link_local": (
        " {addr} is an IPv4 link-local address (169.254.0.0/16): the interface got no real address.",
        "Pin an interface with a routable address (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME); ",
    ),
}


def _address(addr: str) -> dict[str, Any]:
    host, port = addr, ""
    m = re.fullmatch(r"\[?([^\]<>]+?)\]?(?:<(\d+)>|:(\d+))?", addr.strip(" .,"))
    if m and (m.group(2) or m.group(3)) and (":" not in m.group(1) or "<" in addr or "[" in addr):
        host, port = m.group(1), m.group(2) or m.group(3)
    kind = classify_address(host)
    note, fix = _ADDRESS_NOTE.get(kind, ("", ""))
    return {"addr": host, "addr_port": port, "addr_kind": kind, "addr_note": note.format(addr=host), "addr_fix": fix}


def _errno_fields(key: str) -> dict[str, Any]:
    row = error_codes.errno_info(key) if key else None
    if not row:
        return {"errno_label": key or "an error", "errno_meaning": "see the message", "errno_advice": ""}
    return {
        "errno_label": f"{row['name']} ({row['text']}, errno {row['number']})",
        "errno_name": row["name"],
        "errno_meaning": row.get("meaning", row["text"].lower()),
        "errno_advice": row.get("advice", ""),
        "errno_family": row.get("family", ""),
    }


_CALL_NOTE = {
    "shm": (
        " It is one of the calls that create NCCL's shared memory segment in /dev/shm: /dev/shm is full or too "
        "small (64 MB by default in containers).",
        "Give the container a larger /dev/shm (docker run --shm-size=16g or --ipc=host; Kubernetes: an emptyDir "
        "with medium: Memory at /dev/shm; check df -h /dev/shm), or NCCL_SHM_DISABLE=1 (slower); ",
    ),
    "socket": (" It is a socket call of NCCL's network transport.", "NCCL_SOCKET_IFNAME=<iface the nodes share>; "),
    # refused, not full: /dev/shm is not writable for this user, or a segment of that name is another user's
    "shm_denied": (
        " It is one of the calls that create NCCL's shared memory segment in /dev/shm, and it was refused, not out "
        "of room: /dev/shm is not writable for this user (mounted read-only or with other permissions), or a "
        "stale nccl-shm-* file of another user holds the name.",
        "ls -ld /dev/shm must show drwxrwxrwt (mount a writable tmpfs there: docker --ipc=host or --shm-size); "
        "remove stale /dev/shm/nccl-* files of other users; or NCCL_SHM_DISABLE=1 (slower); ",
    ),
}


def _sockerr(e: Event) -> dict[str, Any]:
    """The strerror text NCCL quotes, decoded (errno row), and the address it names."""
    g = e.groups
    out = _errno_fields((g.get("err") or g.get("errno") or "").strip())
    out.update(_address(g.get("addr", "")) if g.get("addr") else {"addr_note": "", "addr_fix": ""})
    call = g.get("call", "")
    kind = (
        "shm"
        if re.search(r"fallocate|ftruncate|shm_open|mmap|open", call)
        else "socket"
        if re.search(r"socket|bind|listen|accept|connect|poll|send|recv", call)
        else ""
    )
    note, fix = _CALL_NOTE.get(
        "shm_denied" if kind == "shm" and out.get("errno_name") in ("EACCES", "EPERM") else kind, ("", "")
    )
    out["call_note"], out["call_fix"] = note, fix
    err = g.get("err")
    out["err_note"] = f" ({err.strip()})" if err else ""
    if out["addr_fix"] and out["errno_advice"]:
        out["errno_advice"] = out["addr_fix"] + out["errno_advice"]
    elif out["addr_fix"]:
        out["errno_advice"] = out["addr_fix"].rstrip("; ")
    if not out["errno_advice"]:
        out["errno_advice"] = "Rerun with NCCL_DEBUG=INFO to see the call and the interface"
    return out


def _errno(e: Event) -> dict[str, Any]:
    out = _errno_fields(e.groups.get("errno", ""))
    if not out["errno_advice"]:
        out["errno_advice"] = families.next_step(out.get("errno_family") or "other")
    return out


def _endpoint(e: Event) -> dict[str, Any]:
    """host and port of an endpoint printed as (host, port), host:port or [ipv6]:port."""
    g = e.groups
    host = g.get("host") or g.get("host2") or g.get("host3") or ""
    port = g.get("port") or g.get("port2") or g.get("port3") or ""
    if not host and g.get("unparsed"):  # an endpoint written by hand ("(master IP, port)")
        out = {"host": g["unparsed"].strip(" ()（）"), "port": "", "addr_note": "", "addr_fix": ""}
    else:
        out = _address(host)
        out.update(host=host, port=port)
    out["addr_why"] = _why_unreached(out)
    return out


def _store_wait(e: Event) -> dict[str, Any]:
    """How long a client waited for the store and where; the endpoint is often cut off (a title,
    a wrapped line), and the reading does not need it."""
    out = _endpoint(e)
    raw = e.groups.get("timeout") or ""
    ms = int(raw) if raw.isdigit() else None
    out["waited"] = (
        f"{ms // 60000} min ({raw} ms)" if ms and ms % 60000 == 0 else f"{raw} ms" if ms is not None else raw or "long"
    )
    host, port = out.get("host", ""), out.get("port", "")
    out["at"] = f" at {host}:{port}" if host and port else f" at {host}" if host else ""
    out["nc_target"] = f"{host} {port}" if host and port else "<MASTER_ADDR> <MASTER_PORT>"
    return out


def _why_unreached(addr: dict[str, Any]) -> str:
    """Why a peer's advertised address was not reached: an address no other host can route to
    (loopback, docker bridge, link-local) is the cause itself, so it is stated alone; any other
    address leaves the usual suspects, named as such."""
    if addr["addr_note"]:
        return (
            addr["addr_note"]
            + " The peer advertised it because its hostname resolves to it (Debian/Ubuntu map the hostname to 127.0.1.1 in /etc/hosts) or it picked that interface."
        )
    return " the peer advertised an address the other node cannot reach (its hostname resolves to a loopback or container address), or the peer exited, or a firewall blocks the port."


def _port(e: Event) -> dict[str, Any]:
    port = e.groups.get("port") or e.groups.get("port2") or ""
    note = ""
    if port.isdigit() and int(port) < 1024:
        note = f" Port {port} is below 1024: a system port (22 is sshd's) that needs root and is often held by a service; use one above 1024 (29500 is torchrun's default)."
    return {"port": port or "<port>", "port_note": note}


_IB_STATUS = {
    5: ("IBV_WC_WR_FLUSH_ERR", "the queue pair was already in error (a consequence of an earlier error on it)"),
    4: ("IBV_WC_LOC_PROT_ERR", "a local protection error: the buffer was not registered for this access"),
    10: ("IBV_WC_REM_ACCESS_ERR", "the remote side refused the access (its memory registration does not allow it)"),
    12: (
        "IBV_WC_RETRY_EXC_ERR",
        "the remote side did not acknowledge in time, retries exhausted: the peer died, the link is down or "
        "flapping, or NCCL_IB_TIMEOUT is too short for this fabric",
    ),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "the receiver was not ready, retries exhausted (the peer stalled or died)"),
}


def _peer(e: Event) -> dict[str, Any]:
    peer = e.groups.get("peer")
    return {"peer_note": f" (peer {peer})" if peer else ""}


def _submodule(e: Event) -> dict[str, Any]:
    top, sub = e.groups.get("top", ""), e.groups.get("rest", "").split(".")[0]
    return {"top_pip": top.replace("_", "-"), "sub": sub, "ns_pip": f"{top}-{sub}".replace("_", "-")}


_SITE = re.compile(r"(?:site|dist)-packages/(?P<dir>[\w.-]+?)(?:/|\.cpython|\.abi3|\.so)")
# compiled modules installed at the top of site-packages, and the distribution they belong to
_TOP_LEVEL_EXTENSIONS = {"_XLAC": "torch_xla", "flash_attn_2_cuda": "flash-attn", "_C_flashattention": "flash-attn"}


def _undefined_symbol(e: Event) -> dict[str, Any]:
    """Whose compiled extension the undefined symbol is in: torch_npu's or another package's."""
    m = _SITE.search(e.groups.get("lib", ""))
    pkg = _TOP_LEVEL_EXTENSIONS.get(m.group("dir"), m.group("dir")) if m else ""
    if not pkg or "npu" in pkg or pkg in ("torch", "mindspeed", "mindie_turbo", "vllm_ascend"):
        return {
            "mismatch": "torch and torch_npu versions do not match",
            "symbol_fix": "Install the torch_npu built for your torch: pip install torch-npu==<your torch version>  "
            "(or pin torch to the torch_npu version; see `titan-doctor diagnose --check versions.matrix`)",
        }
    return {
        "mismatch": f"{pkg}'s compiled extension and the installed torch are from different releases",
        "symbol_fix": f"Install the {pkg} release built for the installed torch (python -c 'import torch; "
        f"print(torch.__version__)'; {pkg} states the torch it needs), or rebuild it against this torch (pip install "
        f"--force-reinstall --no-build-isolation --no-cache-dir {pkg}); if the job does not use {pkg}, uninstall it",
    }


def _ib_status(e: Event) -> dict[str, Any]:
    status = int(e.groups.get("status", "-1"))
    name, meaning = _IB_STATUS.get(status, (f"ibv_wc_status {status}", "see ibv_wc_status_str"))
    peer = e.groups.get("peer")
    return {"ib_status": name, "ib_meaning": meaning, "peer_note": f" from peer {peer}" if peer else ""}


# aclrtMemcpyKind -> (source, destination) locations it declares (0 host, 1 device)
_KIND_LOCS = {0: ("0", "0"), 1: ("0", "1"), 2: ("1", "0"), 3: ("1", "1")}


def _memcpy(e: Event) -> dict[str, Any]:
    """Which side of a rejected copy is not where its declared kind says."""
    g = e.groups
    kind = int(g.get("kind") or g.get("kind2") or 4)
    src, dst = (g.get("src") or g.get("src2") or "1"), (g.get("dst") or g.get("dst2") or "1")
    loc = {"0": "host", "1": "device"}
    want = _KIND_LOCS.get(kind)
    if want and want[0] == "1" and src == "0":
        note = " The source tensor lives on the host (not pinned, or never moved to the NPU) where a device tensor was expected."
        fix = (
            "The source is a host tensor: make it a device tensor before the copy (t = t.to('npu') / .npu()); in weight-sync code (RL "
            "frameworks handing weights to an inference engine) check that the tensors passed are on the NPU"
        )
    elif want and want[0] == "0" and src == "1":
        note = (
            " The source is already in device memory though the copy was declared as coming from the host: the "
            "code that issued it chose the kind for a host buffer."
        )
        fix = (
            "Find the code issuing this copy (ASCEND_LAUNCH_BLOCKING=1 gives the Python line): a tensor expected "
            "on the host (a pinned CPU buffer) is on the NPU; if it is a plugin or custom operator (not your code), "
            "install the version of it built for this torch_npu / CANN"
        )
    else:
        note = ""
        fix = (
            "Find the code issuing this copy (ASCEND_LAUNCH_BLOCKING=1 gives the Python line) and make the tensors "
            "live where the copy's direction says (source and destination on the NPU for a device-to-device copy)"
        )
    return {
        "kind_name": f"{error_codes.memcpy_kind(kind)} (kind={kind})",
        "src_name": loc.get(src, f"location {src}"),
        "dst_name": loc.get(dst, f"location {dst}"),
        "memcpy_note": note,
        "memcpy_fix": fix,
    }


def _buffsize(e: Event) -> dict[str, Any]:
    need, have = e.groups.get("need"), e.groups.get("have")
    note = f": it needs {need} MB" + (f", HCCL_BUFFSIZE is {have} MB" if have else "") if need else ""
    return {"need_note": note, "need_value": need or "<the NEEDED value the message prints, in MB>"}


def _soc_row_note(row: dict[str, Any] | None, label: str) -> tuple[str, str]:
    if not row:
        return label, "this build does not know or support it."
    series = row["series"]
    name = f"{row['name']} (soc_version {row['code']}, {series})"
    return name, f"it is a chip of the {series} line, which this build does not support."


def _soc(e: Event) -> dict[str, Any]:
    """The chip a message names, by torch_npu's SocVersion number or name; a bare
    'Ascend910' is the first-generation chip."""
    g = e.groups
    key = g.get("socnum") or g.get("soc") or g.get("soc2") or ""
    row = error_codes.soc_version(key) if key else None
    if row is None and key == "Ascend910":
        row = {"name": key, "code": "-", "series": "first-generation Ascend 910 (Atlas 800 training series)"}
    name, note = _soc_row_note(row, key or "this chip")
    return {"soc_name": name, "soc_note": note}


def _series_hint(soc: str) -> str:
    s = soc.lower()
    if s.startswith("ascend310p"):
        return "for Ascend 310P: e.g. vLLM-Ascend's -310p image"
    if s.startswith("ascend910_93"):
        return "for Atlas A3: e.g. the -a3 image"
    if s.startswith("ascend910b"):
        return "for Atlas A2 (910B): the default image"
    return "the image or packages for that chip"


def _soc_pair(e: Event) -> dict[str, Any]:
    return {"dev_series_hint": _series_hint(e.groups.get("dev_soc", ""))}


def _compile_backend(e: Event) -> dict[str, Any]:
    backend = e.groups.get("backend", "")
    if backend == "compile_fn":
        return {
            "backend_note": " (compile_fn is DDPOptimizer's: under DistributedDataParallel, dynamo splits the graph at "
            "bucket boundaries and compiles each piece)",
            "backend_fix": "Under DDP set torch._dynamo.config.optimize_ddp = False (one graph, no DDPOptimizer split) or "
            "upgrade torch; ",
        }
    return {"backend_note": "", "backend_fix": "Under DDP try torch._dynamo.config.optimize_ddp = False; "}


_PIP = {
    "transformer_engine": "transformer-engine",
    "flash_attn": "flash-attn",
    "apex/contrib": "apex",
    "mamba_ssm": "mamba-ssm",
    "causal_conv1d": "causal-conv1d",
    "deep_gemm": "deep-gemm",
}


def _cuda_package(e: Event) -> dict[str, Any]:
    pkg = e.groups.get("pkg", "")
    return {"pkg": pkg.split("/")[0], "pkg_pip": _PIP.get(pkg, pkg)}


def _two_devices(e: Event) -> dict[str, Any]:
    """Two accelerators, or an accelerator and the CPU: different mistakes."""
    a, b = e.groups.get("a", ""), e.groups.get("b", "")
    if e.groups.get("want") == "NPU":
        return {
            "a": "the NPU",
            "b": "another device",
            "devices_note": " torch_npu's own check: an operand of an NPU operator is not an NPU tensor, most often one "
            "left on the CPU (the batch, an index or mask tensor, a tensor created without device=).",
            "devices_fix": _MOVE_FIX.replace("<device>", "'npu'"),
        }
    if not a:
        return {"a": "one device", "b": "another", "devices_note": "", "devices_fix": _MOVE_FIX}
    if "cpu" in (a, b):
        dev = b if a == "cpu" else a
        return {
            "devices_note": f" One of them was left on the CPU: an input (the batch, an index or mask tensor, a tensor "
            f"created without device=) was not moved to {dev} where the model runs.",
            "devices_fix": _MOVE_FIX.replace("<device>", dev),
        }
    return {
        "devices_note": " Both are accelerators: the model is spread over several devices (device_map='auto', "
        "pipeline stages, a tensor kept from another rank) and one operator got operands from two of them; on NPUs "
        "older torch_npu releases did this in their own dtype cast (npu_dtype_cast) while copying a state dict across "
        "devices.",
        "devices_fix": "Keep the operands of one operator on one device (load the model onto a single device, or "
        "move the tensor to its peer's device with .to(other.device)); if the failing op is torch_npu's own "
        "(npu_dtype_cast / copy while loading a state dict), upgrade torch_npu (with its matching CANN) to a newer "
        "release",
    }


_MOVE_FIX = (
    "Move every input to the model's device before the call: batch = {k: v.to(<device>) for k, v in batch.items()} "
    "(or tensor.to(model.device)), and create new tensors with device= the model's device"
)

_ASSERT = {
    "srcIndex < srcSelectDimSize": (
        "index_select / an embedding lookup got an index at or beyond the size of the indexed dimension: a token id "
        ">= the embedding's rows (the tokenizer's vocabulary is larger than the model's vocab_size, tokens were added "
        "without resizing the embeddings) or a position id beyond the position table.",
        "Make the model's vocab_size match the tokenizer (model.resize_token_embeddings(len(tokenizer)) after adding "
        "tokens) and check max(input_ids) < vocab_size on the CPU",
    ),
    "index >= -sizes[i]": (
        "An indexing operation got an index outside the tensor's size.",
        "Check the indices against the tensor's size on the CPU (the same op on CPU raises an IndexError naming them)",
    ),
    "n_classes": (
        "A classification loss (NLLLoss / cross_entropy) got a target label outside [0, n_classes): the dataset's "
        "class ids do not match the model's number of classes (labels starting at 1, an ignore label other than "
        "ignore_index, a head built for fewer classes).",
        "Make the labels 0..num_classes-1 (or set ignore_index for the ignored label) and the head's num_classes "
        "match the dataset; check labels.min() and labels.max() on the CPU",
    ),
    "input_val >= zero": (
        "binary_cross_entropy got inputs outside [0, 1]: the model's outputs are logits, not probabilities.",
        "Use binary_cross_entropy_with_logits (BCEWithLogitsLoss) on the logits, or apply sigmoid first",
    ),
}


_ASSERT_DEFAULT = (
    "The kernel's own check says what was out of range: most often an index beyond the indexed dimension (a token "
    "id >= the embedding's rows, a label >= the number of classes) or a value outside the range an op accepts.",
    "Check the op's inputs on the CPU first (max(input_ids) < model.get_input_embeddings().num_embeddings; labels < "
    "num_classes); after adding tokens: model.resize_token_embeddings(len(tokenizer))",
)


def _assert_cond(e: Event) -> dict[str, Any]:
    cond = e.groups.get("cond", "")
    note, fix = next((v for k, v in _ASSERT.items() if k in cond), _ASSERT_DEFAULT)
    return {"cond_note": note, "cond_fix": fix}


def _import_path(e: Event) -> dict[str, Any]:
    path, pkg = e.groups.get("path", ""), e.groups.get("pkg", "")
    root = pkg.split(".")[0]
    user_site = "/.local/lib/" in path or "\\AppData\\Roaming\\Python" in path
    return {
        "pkg_root": root,
        "path_note": " The copy imported is a user-site install (~/.local), which shadows the environment's own "
        "packages."
        if user_site
        else "",
        "path_fix": f"Remove or upgrade the user-site copy (pip uninstall {root} outside the environment, or rm the "
        f"~/.local copy) or run with PYTHONNOUSERSITE=1; "
        if user_site
        else "",
    }


def _opdef(e: Event) -> dict[str, Any]:
    """The aclnn API the failed operator was launched by: CANN prints it with its launch number
    and kernel name appended (aclnnMoeInitRoutingV3_3915_MoeInitRoutingV3)."""
    op = re.sub(r"_\d+_\w+$", "", e.groups.get("op") or "")
    return {"op_note": f" {op}" if op else ""}


def _watchdog(e: Event) -> dict[str, Any]:
    """Under NCCL, a collective every rank reached can still hang in the transfer itself: GPU
    peer-to-peer over PCIe with ACS on (traffic bounced through the CPU) is the known case."""
    if e.groups.get("backend") != "NCCL":
        return {"p2p_note": ""}
    return {
        "p2p_note": " If every rank did reach it (the GPUs busy at 100% with low power draw), the transfer itself "
        "hangs: test GPU peer-to-peer with NCCL_P2P_DISABLE=1 or NCCL_P2P_LEVEL=NVL (PCI ACS on the host "
        "reroutes P2P through the CPU: disable ACS; nccl-tests' all_reduce_perf measures the links)"
    }


def _recompile(e: Event) -> dict[str, Any]:
    n, limit = e.groups.get("n"), e.groups.get("limit")
    return {"n_note": f" (config.{limit} = {n})" if n and limit else ""}


def _ray_exit(e: Event) -> dict[str, Any]:
    m = re.search(r"Worker exit type: (\w+)", e.line.text)
    return {"exit_note": f"exit type {m.group(1)}" if m else "no reason given"}


_PARSERS = {
    "two_devices": _two_devices,
    "assert_cond": _assert_cond,
    "import_path": _import_path,
    "ray_exit": _ray_exit,
    "recompile": _recompile,
    "watchdog": _watchdog,
    "opdef": _opdef,
    "sockerr": _sockerr,
    "errno": _errno,
    "endpoint": _endpoint,
    "store_wait": _store_wait,
    "port": _port,
    "ib_status": _ib_status,
    "peer": _peer,
    "undefined_symbol": _undefined_symbol,
    "submodule": _submodule,
    "memcpy": _memcpy,
    "buffsize": _buffsize,
    "soc_pair": _soc_pair,
    "compile_backend": _compile_backend,
    "cuda_package": _cuda_package,
    "kernel_unit": _kernel_unit,
    "graph_capture": _graph_capture,
    "dcmi": _dcmi,
    "oom": _oom,
    "state_dict_keys": _state_dict_keys,
    "keyerror": _keyerror,
    "size_mismatch": _size_mismatch,
    "dcp_key": _dcp_key,
    "ping_answer": _ping_answer,
    "nnal": _nnal,
    "python_package": _python_package,
    "package_not_found": _package_not_found,
    "soc": _soc,
    "dtype": _dtype,
    "oom_any": _oom_any,
    "cann_dtype": _cann_dtype,
    "oom_killer": _oom_killer,
    "cuda_err": _cuda_err,
    "npu_api": _npu_api,
    "backend_kernel": lambda e: build_and_dispatch.backend_kernel(e.groups, e.line.text),
    "feature_device": lambda e: build_and_dispatch.feature_device(e.groups, e.line.text),
    "link_error": lambda e: build_and_dispatch.link_error(e.groups, e.line.text),
    "dtype_pair": lambda e: programming_errors.dtype_pair(e.groups, e.line.text),
    "unknown_args": lambda e: command_line_errors.unknown_args(e.groups, e.line.text),
    "view_size": lambda e: programming_errors.view_size(e.groups, e.line.text),
    "matmul_dims": lambda e: programming_errors.matmul_dims(e.groups, e.line.text),
    "inplace": lambda e: programming_errors.inplace(e.groups, e.line.text),
}


def enrich(e: Event | signatures.Match) -> dict[str, Any]:
    """The event's groups plus what its parser derives (OOM figures, key prefixes, ...).
    A bare signature match (the live comm test classifies stderr) is read as one event."""
    if isinstance(e, signatures.Match):
        e = incidents.event_of_match(e)
    groups = dict(e.groups)
    parser = _PARSERS.get(e.parse) or (_keyerror if e.id == "ckpt.keyerror" else None)
    if parser:
        groups.update(parser(e))
    return groups


_KEY_PARSERS = ("dcp_key", "state_dict_keys")
_COMPILED_NOTE = (
    " The log shows torch.compile in use: a compiled model's state_dict() names every entry under "
    "'_orig_mod.' unless the checkpoint code unwraps it, so a checkpoint saved from the compiled model (or "
    "from the plain one) can carry names the other side lacks."
)
_COMPILED_FIX = (
    "With torch.compile: save and load the state of the module you compiled from (model._orig_mod, or "
    "torch.distributed.checkpoint.state_dict.get_model_state_dict(model), whose names carry no '_orig_mod.'), "
    "or a version of your trainer that strips the compile prefix on save; a checkpoint saved before the "
    "first compiled resume still loads. "
)


def _compiled_keys(groups: dict[str, Any]) -> dict[str, Any]:
    """A key mismatch in a log that compiles the model: the compile wrapper's '_orig_mod.' prefix
    is a likely difference even when the key printed does not show it."""
    if "_orig_mod" in " ".join(str(v) for v in groups.values()):
        return groups  # the key names the prefix itself: the parser said so
    out = dict(groups)
    for note, fix in (("dcp_note", "dcp_fix"), ("prefix_note", "prefix_fix")):
        if note in out:
            out[note] = _COMPILED_NOTE.strip() + " Otherwise: " + str(out[note])
            out[fix] = _COMPILED_FIX + str(out.get(fix, ""))
    return out


# ---- findings -----------------------------------------------------------------------


def _who(inc: Incident) -> str:
    bits = [f"{k} {v}" for k, v in (("rank", inc.rank), ("device", inc.device)) if v is not None]
    return f" ({', '.join(bits)})" if bits else ""


def _where(e: Event, inc: Incident) -> str:
    return f"{e.line.path}:{e.line.no}{_who(inc)}"


def _quote(e: Event) -> str:
    shown = [ln.text.strip()[:300] for ln in e.lines[:4]]
    return "\n".join("> " + s for s in shown)


def _same_line_more(e: Event, inc: Incident) -> list[str]:
    """The lines under the E-code that printed `e`'s line (its own line or a repeat of it):
    CANN's device fault report ("EZ9999 ... there is an aicore error exception") carries the
    errorStr that says what the kernel did wrong there."""
    return next(
        (
            x.more
            for x in inc.events
            if x is not e
            and x.more
            and any(ln.no == e.line.no and ln.path == e.line.path for ln in x.lines + x.repeats)
        ),
        [],
    )


_SERVING = ("vllm", "vLLM", "sglang", "SGLang", "EngineCore", "Worker_TP", "VllmWorker", "LLMEngine", "model_runner")


def _serving(e: Event, inc: Incident) -> bool:
    """Did a serving engine's process fail (vLLM / SGLang workers), not a trainer's? Its
    process prefix, the error's lines and the traceback above it say."""
    texts = [inc.stream] + [ln.text for ln in e.lines[:3]] + [ln.text for ln in inc.context[-40:]]
    return any(m in t for t in texts for m in _SERVING)


def _interfaces(facts: Facts) -> tuple[str, str]:
    """(cause note, fix) when NCCL listed interfaces other hosts cannot reach."""
    virtual, real = facts.virtual_interfaces()
    if not virtual:
        return "", ""
    shown = ", ".join(f"{n} ({facts.interfaces[n]})" for n in virtual[:5]) + (
        f" and {len(virtual) - 5} more" if len(virtual) > 5 else ""
    )
    one = real[0] if len(real) == 1 else None
    note = (
        f" NCCL listed {len(facts.interfaces)} network interfaces and would use them all: {shown} are virtual "
        "links (docker bridges, veth pairs, loopback, link-local addresses) that other hosts cannot reach"
        + (f"; {one} ({facts.interfaces[one]}) is the one real interface." if one else ".")
    )
    fix = (
        f"NCCL_SOCKET_IFNAME={one} (the interface the nodes share; GLOO_SOCKET_IFNAME={one} too); "
        if one
        else "NCCL_SOCKET_IFNAME=<the interface the nodes share> or exclude the virtual ones: "
        "NCCL_SOCKET_IFNAME=^docker,br-,veth,lo; "
    )
    return note, fix


# an operator's parameter check states the rule and the value it got: "antiquantGroupSize should
# be 128 or 64, but actual antiquantGroupSize is [256]", "x must be contiguous, but got ..."
_CHECK = re.compile(
    r"(?i)(?P<rule>[^.;:]{0,160}?\b(?:should|must|expects?|expected|only supports?|supports? only|"
    r"is required to)\b[^.;]{1,160}?),?\s+but\s+(?P<got>[^.;]{1,120})"
)


_OP_SOC = re.compile(
    r"(?i)\bop(?:erator)?\s*\[?(?P<op>[A-Z]\w+)\]?\s+(?:is\s+)?not\s+support(?:ed)?\s+(?:on\s+|for\s+)?(?:the\s+)?soc(?:\s*version)?\s*\[?(?P<soc>\w+)"
)


def _op_said(message: str) -> str:
    """An operator the message says this chip lacks, as the first step of the fix."""
    m = _OP_SOC.search(message or "")
    if not m:
        return ""
    return (
        f"{m.group('op')} has no kernel for {m.group('soc')} in this CANN: turn off the feature that calls it (a "
        "fused / MoE dispatch-combine or communication option of the framework) or run on a chip and CANN release "
        f"whose operator list has {m.group('op')}. "
    )


def _check_said(message: str) -> str:
    """The rule a parameter check printed, as the first step of the fix ("" when none)."""
    m = _CHECK.search(message or "")
    if not m:
        return ""
    rule = " ".join(m.group("rule").split()).lstrip(", ")
    return f"The check that failed says: {rule} (but {' '.join(m.group('got').split())}); make the call satisfy it. "


# a line under a code that names the setting at fault: "HCCL_BUFFSIZE_EP is too SMALL ...
# NEEDED_HCCL_BUFFSIZE = 600MB, HCCL_BUFFSIZE=256MB"
_SETTING = re.compile(
    r"\b(?P<var>(?:HCCL|ASCEND|ACL|NCCL|TORCH|PYTORCH|CUDA|NPU|GE|TE)_[A-Z0-9_]+)\b"
    r".{0,80}?(?i:too small|too large|too big|exceeds?|not enough|insufficient|is invalid|out of range|must be|should be)"
)


def _setting_said(lines: list[str]) -> tuple[str, str]:
    """(detail note, fix) when a line under the code names the environment setting it checked."""
    for line in lines:
        m = _SETTING.search(line)
        if m:
            var = m.group("var")
            base = re.sub(r"_(?:EP|TP|DP|PP)$", "", var)
            quoted = " ".join(line.split())[:240]
            return (
                f"\nThe lines under it name the setting at fault: {quoted}",
                f"The check names {var}: set {base if base != var else var} as it asks (export {base}=<the value it "
                f"says is needed>, on every rank, before the job starts) and rerun. ",
            )
    return "", ""


_GRAPH_NOTE = (
    "\nThe log shows NPU graph mode in use (torch_npu's graph capture / replay, ACL graph, torchair): an operator "
    "that runs eagerly can fail when captured or replayed, most often because an input is not contiguous (a "
    "slice, a transpose, a view) or its shape changes between capture and replay."
)
_GRAPH_FIX = (
    "Run the same step without graph mode to confirm (vLLM-Ascend: --enforce-eager; SGLang: --disable-cuda-graph; "
    "torchair: eager mode); if it passes, make the failing operator's inputs contiguous (x.contiguous()) before the "
    "captured region or keep that operator out of it. "
)


def _finding(
    e: Event,
    inc: Incident,
    label: str,
    seen: dict[str, list[Event]],
    rank_of: dict[int, Any],
    note: str = "",
    facts: Facts | None = None,
) -> Finding:
    groups = enrich(e)
    occurrences = seen.get(e.id, [e])
    ranks = sorted({rank_of[id(x)] for x in occurrences if rank_of.get(id(x)) is not None})
    count = len(occurrences)
    extra = f"; seen {count}x" + (f" on ranks {ranks}" if len(ranks) > 1 else "") if count > 1 else ""
    message = e.message
    if _BARE.fullmatch(message or "") and e.more:
        message = e.more[0]  # "EE9999: Inner Error!" says nothing; its next line does
    root = label == "root cause"
    title = ("likely: " if e.weak and root else "") + e.title + (f": {message}" if message and root else "")
    family = (
        e.family
        if e.family not in ("", "other")
        else groups.get("errno_family") or families.guess(f"{e.title} {message} {detail_text(e, groups)}")
    )
    if facts is not None and facts.compiled and e.parse in _KEY_PARSERS:
        groups = _compiled_keys(groups)
    groups = signatures.unmatched_blank(e.id, groups)
    detail = signatures.fill(e.cause, groups)
    serving = _serving(e, inc) or (facts is not None and facts.serving)
    fix = signatures.fill(e.fix_serving if e.fix_serving and serving else e.fix, groups)
    if root and e.id.startswith(_CODE_KINDS):
        said, setting_fix = _setting_said(e.more or _same_line_more(e, inc))
        detail_extra = said
        fix = setting_fix + _op_said(message) + _check_said(message) + fix
        if facts is not None and facts.graph_mode and family != "compile_graph":
            detail_extra += _GRAPH_NOTE
            fix = _GRAPH_FIX + fix
    else:
        detail_extra = ""
    if root and facts is not None and (family in ("connection", "rendezvous") or e.id.startswith("nccl.")):
        iface_note, iface_fix = _interfaces(facts)
        detail += iface_note
        fix = iface_fix + fix
    detail += detail_extra
    if e.message and not root:
        detail += f"\nmessage: {e.message}"
    more = e.more or _same_line_more(e, inc)
    if more:
        detail += "\n" + "\n".join("  " + m[:200] for m in more[:6])
    outranked = _codes_it_explains(e, inc) if root else []
    if outranked:
        detail += (
            f"\nThe code{'s' if len(outranked) > 1 else ''} printed with it ({', '.join(outranked)}) only "
            f"{'say' if len(outranked) > 1 else 'says'} that the call failed; this message says why, so it is the root "
            "cause (the codes are listed below)."
        )
    raised = _raised_in(inc) if root else None
    if raised:
        detail += f"\nraised from {raised}"
    if e.weak and e.confirm:
        detail += f"\nTo confirm: {signatures.fill(e.confirm, groups)}"
    if root:
        fix += _log_advice(e, fix)
    return Finding(
        f"log.{e.id}",
        Status.FAIL,
        f"{label}: {title} — first at {_where(e, inc)}{extra}{note}",
        detail=detail + "\n" + _quote(e),
        fix=fix,
        path=e.line.path,
        line=e.line.no,
        data={
            "signature": e.id,
            "family": family,
            "weak": e.weak,
            "rank": inc.rank,
            "device": inc.device,
            "count": count,
            "ranks": ranks,
            "consequence": e.consequence,
            "source": e.source,
            **{k: v for k, v in groups.items() if k not in ("prefix_fix", "fields_fix")},
        },
    )


_CODE_KINDS = ("acl", "ecode", "hccl", "nccl", "torch_npu")
ADVICE_MAX_BYTES = 4 << 20  # a bigger log is not read a second time for the lines under its root (its streaming rate)


def _advice_under(path: str, line: int, text: str | None) -> list[str]:
    """tracebacks.advice_after, for a log small enough to read a second time."""
    try:
        if Path(path).stat().st_size > ADVICE_MAX_BYTES:
            return []
    except OSError:
        return []
    return tracebacks.advice_after(path, line, text)


def _log_advice(e: Event, fix: str) -> str:
    """The runtime's own advice under the root line (CANN's Solution, HCCL's list of reasons
    with the command to run), when the fix does not say it already: the log's words for the
    remedy are the most specific evidence there is."""
    said = [a.rstrip(" .;:") for a in _advice_under(e.line.path, e.line.no, e.line.text) if a[:40] not in fix]
    if not said:
        return ""
    return ("" if fix.rstrip().endswith(".") else ".") + f" What the log itself says to do: {'; '.join(said)}."


def _codes_it_explains(e: Event, inc: Incident) -> list[str]:
    """The generic codes of the incident that a more specific root event explains: the
    aclError / ERR wrapper beside a message row or a catch-all E-code's Reason."""
    if e.id.split(".")[0] in _CODE_KINDS and not e.catch_all:
        return []
    return [
        f"{x.id.split('.')[0].replace('acl', 'aclError').replace('ecode', 'E-code')} {x.groups.get('code', x.id)}"
        for x in inc.events
        if x is not e and x.id.split(".")[0] in _CODE_KINDS and x.rank >= e.rank and not x.consequence
    ][:4]


def detail_text(e: Event, groups: dict[str, Any]) -> str:
    return signatures.fill(e.cause, groups)


def _raised_in(inc: Incident) -> str:
    """The innermost frame of the user's code in the traceback above the incident."""
    frames = []
    for ln in inc.context:
        m = _FRAME.search(ln.text) if 'File "' in ln.text else None
        if m:
            frames.append((m.group(1), m.group(2), m.group(3)))
    return tracebacks.user_frame(frames)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([\w<>.]+)')


def _says_before(e: Event) -> bool:
    """A torch_npu ERR code that is not a wrapper's prints its category ("OPS invalid type")
    after the Python exception that says what failed: that exception is the cause."""
    return e.id.startswith("torch_npu.ERR") and e.rank == error_codes.RANK_PTA_OTHER


def exception_behind(inc: Incident) -> tuple[str, str, int] | None:
    """The Python exception a wrapper event reports ("ERR99999 UNKNOWN application
    exception", torchrun's "rank 1 failed first"): the last exception of the traceback just
    above it, else the first one earlier in the same file (not the launcher's own)."""
    for ln in reversed(inc.context):
        exc = tracebacks.exception_of(ln.text)
        if exc and not tracebacks.LAUNCHER.search(exc[0]):
            return ": ".join(x for x in exc if x), ln.path, ln.no
    first_no = min(e.line.no for e in inc.events)
    for no, text, _ in raw_lines(Path(inc.path)):
        if no >= first_no:
            break
        exc = tracebacks.exception_of(text)
        if exc and not tracebacks.LAUNCHER.search(exc[0]):
            return ": ".join(x for x in exc if x), inc.path, no
    return None


def _next_step(text: str) -> tuple[str, dict[str, Any]]:
    family = families.guess(text)
    return family, families.get(family)


def _unexplained(exc: tuple[str, str, int], root: Incident) -> Finding:
    """An exception nobody listed, behind a code that only says a call failed: name it, with
    the next step for its likely family."""
    text, path, no = exc
    wrapper = root.cause
    family, fam = _next_step(text)
    raised = _raised_in(root)
    return Finding(
        "log.exception",
        Status.FAIL,
        f"root cause: {text[:200]} — first at {path}:{no}" + _who(root),
        detail=f"Not in titan-doctor's list of known errors. {wrapper.title} ({wrapper.line.path}:"
        f"{wrapper.line.no}) "
        + ("names only the kind of failure" if _says_before(wrapper) else "only reports that something failed")
        + "; this exception is the error it reports"
        + (f" (likely: {fam['title']})" if family != "other" else "")
        + "."
        + (f"\nraised from {raised}" if raised else "")
        + f"\n> {text[:300]}",
        fix=f"Read the traceback that ends at {path}:{no}: its last frame in your code is where it "
        f"failed, and the message says what was wrong" + (f". {fam['next_step']}" if family != "other" else ""),
        path=path,
        line=no,
        data={
            "signature": "exception",
            "family": family,
            "rank": root.rank,
            "device": root.device,
            "exception": text,
            "wrapper": wrapper.id,
        },
    )


def _extracted(
    raised: tracebacks.Raised, paths: list[Path], lines: int, advice: list[str] | None = None, kind: str = "exception"
) -> Finding:
    """The honest unknown: no known error, but the log raised this (or reports it in words).
    The root finding is the error itself (what, where, which rank) with the next step for its
    likely family, after the advice the runtime printed with it, if any."""
    family, fam = _next_step(raised.text + " " + " ".join(advice or []))
    likely = f"; likely: {fam['title']}" if family != "other" else ""
    who = f" (rank {raised.rank})" if raised.rank is not None else ""
    return Finding(
        "log.exception",
        Status.FAIL,
        f"root cause (not in titan-doctor's list{likely}): {raised.text[:200]} — at {raised.path}:{raised.line}{who}",
        detail=(
            f"What titan-doctor recognises in this log ({len(paths)} file(s), {lines} lines) is only what the other "
            "ranks saw when one failed (a peer closing its connection); this is the error the failing rank raised "
            "itself, the last exception of its traceback."
            if kind == "own error"
            else f"No signature or error code of titan-doctor matches this log ({len(paths)} file(s), {lines} lines); "
        )
        + (
            ""
            if kind == "own error"
            else "this is the error it raised: the last exception of the first traceback that is not the launcher's."
            if kind == "exception"
            else "it raises no Python exception; this is the first line that reports an error."
            if kind == "error line"
            else "it raises no Python exception and reports no error in words; this is the first line that names a "
            "kind of failure, so the finding is a likely cause to confirm."
        )
        + (f"\nraised from {raised.frame}" if raised.frame else "")
        + (
            f"\nIt was raised inside the installed package {raised.library} (the traceback's innermost frame), "
            f"not in your code: a check of {raised.library}'s own, or a bug of the {raised.library} release installed."
            if raised.library
            else ""
        )
        + f"\nTo confirm the family: {fam['confirm']}\n> {raised.text[:300]}",
        fix=(f"What the log itself suggests: {'; '.join(a.rstrip(' .;:') for a in advice)}. " if advice else "")
        + f"Read the {'traceback that ends' if kind == 'exception' else 'lines around'} {raised.path}:{raised.line}"
        + (f" (your code: {raised.frame})" if raised.frame else "")
        + (
            f". Search {raised.library}'s issue tracker for this message, and check the {raised.library} version "
            f"(pip show {raised.library}) against the one the project you run pins: another release may not have it"
            if raised.library
            else ""
        )
        + (f". {fam['next_step']}" if family != "other" else ""),
        path=raised.path,
        line=raised.line,
        data={
            "signature": "exception",
            "family": family,
            "rank": raised.rank,
            "device": None,
            "exception": raised.text,
            "first_exception": raised.text,
            "files": [str(p) for p in paths],
            "lines": lines,
        },
    )


def _own_error_elsewhere(paths: list[Path], found: list[Incident], root: Incident) -> tracebacks.Raised | None:
    """An exception raised in a file or on a rank other than the root incident's, on a line no
    incident covers: what the failing rank raised, when the known events are all consequences."""
    covered = {(ln.path, ln.no) for inc in found for e in inc.events for ln in e.lines}
    for r in tracebacks.scan(paths):
        if r.launcher or (r.path, r.line) in covered:
            continue
        rank = r.rank if r.rank is not None else log_lines.file_rank(r.path)
        if r.path != root.path and (rank is None or rank != root.rank):
            if r.rank is None:
                r.rank = rank
            return r
    return None


def _collective_mismatch(facts: Facts) -> Finding | None:
    """Processes that entered the same NCCL collective (by opCount) with different calls."""
    mm = facts.collective_mismatch()
    if mm is None:
        return None
    dtypes = error_codes.nccl_datatypes()
    parts = []
    for (op, count, dt, root), procs in mm["groups"]:
        who = procs[0] if len(procs) == 1 else f"{len(procs)} processes ({procs[0]}, ...)"
        parts.append(f"{op} count {count} datatype {dt} ({dtypes.get(dt, '?')}) root {root} on {who}")
    row = signatures.analysis("nccl.collective_mismatch")
    detail = signatures.fill(row["cause"], {"opcount": mm["opcount"], "calls": "; ".join(parts)})
    return Finding(
        "log.nccl.collective_mismatch",
        Status.FAIL,
        f"root cause: {row['title']} (opCount {mm['opcount']}, {mm['nranks']} ranks)",
        detail=detail,
        fix=row["fix"],
        data={
            "signature": "nccl.collective_mismatch",
            "family": "collective_mismatch",
            "rank": None,
            "device": None,
            "opcount": mm["opcount"],
            "calls": parts,
            "source": row["source"],
        },
    )


def explain(paths: list[Path]) -> list[Finding]:
    paths = expand(paths)
    facts = Facts()
    found, lines = incidents.incidents(paths, facts)
    mismatch = _collective_mismatch(facts)
    if not found:
        if mismatch:
            return [mismatch]
        raised = tracebacks.pick(tracebacks.scan(paths))
        if raised:
            return [_extracted(raised, paths, lines, advice=_advice_under(raised.path, raised.line, None))]
        reported = tracebacks.first_error_line(paths)
        if reported and families.named_by(reported[0].text + " " + " ".join(reported[1])):
            return [_extracted(reported[0], paths, lines, advice=reported[1], kind="error line")]
        # the most specific evidence: a line that names a family of failure in words beats an
        # error line that names none
        named = tracebacks.first_line_where(paths, lambda t: families.guess(t) != "other")
        if named:
            return [_extracted(named, paths, lines, kind="family line")]
        if reported:
            return [_extracted(reported[0], paths, lines, advice=reported[1], kind="error line")]
        return [
            Finding(
                "log.none",
                Status.WARN,
                f"no known error in {len(paths)} file(s) ({lines} lines)",
                detail="Nothing matched titan-doctor's signatures or a known error-code format, and the logs raise no "
                "Python exception; not guessing the cause.",
                fix=families.next_step("other") + "; if the job stopped without an error, look for a SIGKILL "
                "(dmesg -T | grep -i 'killed process') or the scheduler's job log",
                data={"files": [str(p) for p in paths], "lines": lines, "first_exception": None},
            )
        ]
    root = incidents.root(found)
    assert root is not None
    seen: dict[str, list[Event]] = {}
    rank_of: dict[int, Any] = {}
    for inc in found:
        r = inc.rank
        for e in inc.events:
            seen.setdefault(e.id, []).append(e)
            rank_of[id(e)] = r
    cause = root.cause
    exc = exception_behind(root) if cause.rank >= incidents.WRAPPER_RANK or _says_before(cause) else None
    own = _own_error_elsewhere(paths, found, root) if cause.consequence and not exc else None
    if own is not None:
        # every known event is what a rank saw when another one failed; the error another rank
        # raised itself (torchrun's error.json of the failing rank) is the root cause
        also = {inc.cause.id: inc for inc in found}
        return [_extracted(own, paths, lines, kind="own error")] + [
            _finding(
                inc.cause, inc, "also", seen, rank_of, " (a consequence: this rank saw the failing one go)", facts=facts
            )
            for inc in also.values()
        ]
    if mismatch and cause.rank > signatures.analysis("nccl.collective_mismatch")["rank"]:
        out = [mismatch, _finding(cause, root, "also", seen, rank_of, facts=facts)]
    elif exc:
        out = [_unexplained(exc, root), _finding(cause, root, "also", seen, rank_of, facts=facts)]
    else:
        out = [_finding(cause, root, "root cause", seen, rank_of, facts=facts)] + ([mismatch] if mismatch else [])
    reported = {cause.id}
    ordered = sorted(root.events, key=lambda e: e.rank) + [
        e
        for inc in sorted(found, key=lambda i: (i.cause.rank, i.order))
        if inc is not root
        for e in sorted(inc.events, key=lambda e: e.rank)
    ]
    owner = {id(e): inc for inc in found for e in inc.events}
    for e in ordered:
        if e.id in reported:
            continue
        reported.add(e.id)
        inc = owner[id(e)]
        note = ""
        if e.consequence and inc is not root and inc.rank is not None and inc.rank != root.rank:
            note = f" (a consequence of the root cause: {e.note or 'it waited for the failed rank'})"
        out.append(_finding(e, inc, "also", seen, rank_of, note, facts=facts))
    return out
