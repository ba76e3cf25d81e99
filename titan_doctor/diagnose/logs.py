"""Crash-log explainer: read training logs (a file, several, or a folder of per-rank logs
and torchrun error.json files), find every error they report (codes decoded by
error_codes.py, messages by rules/log_signatures.toml), and report the root cause first:
what failed, on which rank and device, why, and the exact fix; then everything else once,
with where it first appeared (file:line) and on which ranks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import incidents, signatures, state_dict_errors
from titan_doctor.diagnose.incidents import Event, Incident
from titan_doctor.diagnose.log_lines import expand, raw_lines
from titan_doctor.findings import Finding, Status

_SIZE = re.compile(r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)")
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
}
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


def _soc(e: Event) -> dict[str, Any]:
    soc = e.groups.get("soc")
    return {"soc_name": f"this chip ({soc})" if soc else "this chip"}


def _dtype(e: Event) -> dict[str, Any]:
    g = e.groups
    dtype = g.get("dtype") or (g.get("dt") or g.get("st") or "").lower()
    supported = [x.replace("DT_", "").lower() for x in (g.get("supported") or "").split(",") if x.strip()]
    return {
        "dtype_name": dtype or "this dtype",
        "op_note": f" ({g['op']})" if g.get("op") else "",
        "supported_note": f"; it supports {', '.join(supported)}" if supported else "",
    }


def _kernel_unit(e: Event) -> dict[str, Any]:
    """The unit the fault report names, whichever of its two spellings matched."""
    return {"unit": e.groups.get("unit") or e.groups.get("unit2") or "compute"}


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


_PARSERS = {
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
    "soc": _soc,
    "dtype": _dtype,
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


def _finding(
    e: Event, inc: Incident, label: str, seen: dict[str, list[Event]], rank_of: dict[int, Any], note: str = ""
) -> Finding:
    groups = enrich(e)
    occurrences = seen.get(e.id, [e])
    ranks = sorted({rank_of[id(x)] for x in occurrences if rank_of.get(id(x)) is not None})
    count = len(occurrences)
    extra = f"; seen {count}x" + (f" on ranks {ranks}" if len(ranks) > 1 else "") if count > 1 else ""
    message = e.message
    if _BARE.fullmatch(message or "") and e.more:
        message = e.more[0]  # "EE9999: Inner Error!" says nothing; its next line does
    title = e.title + (f": {message}" if message and label == "root cause" else "")
    detail = signatures.fill(e.cause, groups)
    if e.message and label != "root cause":
        detail += f"\nmessage: {e.message}"
    more = e.more or _same_line_more(e, inc)
    if more:
        detail += "\n" + "\n".join("  " + m[:200] for m in more[:6])
    return Finding(
        f"log.{e.id}",
        Status.FAIL,
        f"{label}: {title} — first at {_where(e, inc)}{extra}{note}",
        detail=detail + "\n" + _quote(e),
        fix=signatures.fill(e.fix, groups),
        path=e.line.path,
        line=e.line.no,
        data={
            "signature": e.id,
            "rank": inc.rank,
            "device": inc.device,
            "count": count,
            "ranks": ranks,
            "consequence": e.consequence,
            "source": e.source,
            **{k: v for k, v in groups.items() if k not in ("prefix_fix", "fields_fix")},
        },
    )


_EXCEPTION = re.compile(r"(?:^|[\]:]\s*|\s)((?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception)): (.{1,200})")


def first_exception(paths: list[Path]) -> tuple[str, str, int] | None:
    """(exception line, path, line number) of the first Python exception in the logs."""
    for path in paths:
        for no, text, _ in raw_lines(path):
            m = _EXCEPTION.search(text) if ("Error" in text or "Exception" in text) else None
            if m:
                return f"{m.group(1)}: {m.group(2).strip()}", str(path), no
    return None


def exception_behind(inc: Incident) -> tuple[str, str, int] | None:
    """The Python exception a wrapper event reports ("ERR99999 UNKNOWN application
    exception", torchrun's "rank 1 failed first"): the last exception of the traceback just
    above it, else the first one earlier in the same file (not the launcher's own)."""
    for ln in reversed(inc.context):
        m = _EXCEPTION.search(ln.text) if ("Error" in ln.text or "Exception" in ln.text) else None
        if m and not _LAUNCHER_EXCEPTION.search(m.group(1)):
            return f"{m.group(1)}: {m.group(2).strip()}", ln.path, ln.no
    first_no = min(e.line.no for e in inc.events)
    for no, text, _ in raw_lines(Path(inc.path)):
        if no >= first_no:
            break
        m = _EXCEPTION.search(text) if ("Error" in text or "Exception" in text) else None
        if m and not _LAUNCHER_EXCEPTION.search(m.group(1)):
            return f"{m.group(1)}: {m.group(2).strip()}", inc.path, no
    return None


_LAUNCHER_EXCEPTION = re.compile(r"ChildFailedError|ProcessRaisedException|ProcessExitedException")


def _unexplained(exc: tuple[str, str, int], root: Incident) -> Finding:
    """An exception nobody listed, behind a code that only says a call failed: name it."""
    text, path, no = exc
    wrapper = root.cause
    return Finding(
        "log.exception",
        Status.FAIL,
        f"root cause: {text[:200]} — first at {path}:{no}" + _who(root),
        detail=f"Not in titan-doctor's list of known errors. {wrapper.title} ({wrapper.line.path}:"
        f"{wrapper.line.no}) only reports that something failed; this exception is the error "
        f"it reports.\n> {text[:300]}",
        fix=f"Read the traceback that ends at {path}:{no}: its last frame in your code is where it "
        f"failed, and the message says what was wrong",
        path=path,
        line=no,
        data={
            "signature": "exception",
            "rank": root.rank,
            "device": root.device,
            "exception": text,
            "wrapper": wrapper.id,
        },
    )


def explain(paths: list[Path]) -> list[Finding]:
    paths = expand(paths)
    found, lines = incidents.incidents(paths)
    if not found:
        exc = first_exception(paths)
        return [
            Finding(
                "log.none",
                Status.WARN,
                f"no known error in {len(paths)} file(s) ({lines} lines)"
                + (f"; the first exception is at {exc[1]}:{exc[2]}" if exc else ""),
                detail=(f"> {exc[0]}\n" if exc else "") + "Nothing matched rules/log_signatures.toml or a "
                "known error-code format; not guessing the cause. Read the first exception on the "
                "lowest rank and the lines before it.",
                path=exc[1] if exc else None,
                line=exc[2] if exc else None,
                data={"files": [str(p) for p in paths], "lines": lines, "first_exception": exc[0] if exc else None},
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
    exc = exception_behind(root) if cause.rank >= incidents.WRAPPER_RANK else None
    if exc:
        out = [_unexplained(exc, root), _finding(cause, root, "also", seen, rank_of)]
    else:
        out = [_finding(cause, root, "root cause", seen, rank_of)]
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
        out.append(_finding(e, inc, "also", seen, rank_of, note))
    return out
