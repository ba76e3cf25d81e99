"""Crash-log explainer: scan training logs (every rank, torchrun error.json files too)
for the signatures in rules/log_signatures.toml and report each cause once, root cause
first, with where it first appeared (file:line, rank)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from titan_doctor.diagnose import signatures
from titan_doctor.diagnose.signatures import Match
from titan_doctor.findings import Finding, Status

_RANK_IN_LINE = (re.compile(r"\[rank(\d+)\]"), re.compile(r"RankID:(\d+)\)"), re.compile(r"^\[default(\d+)\]:"),
                 re.compile(r"\brank[ =:]?(\d+)\b", re.I))
_RANK_IN_PATH = (re.compile(r"rank[_-]?(\d+)", re.I), re.compile(r"/(\d+)/error\.json$"))
_SIZE = re.compile(r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)")
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_orig_mod.", "module.", "_checkpoint_wrapped_module.")


@dataclass
class Hit:
    match: Match
    path: str
    line: int
    rank: int | None
    text: str
    count: int = 1
    ranks: set[int] = field(default_factory=set)


def to_bytes(s: str) -> float | None:
    m = _SIZE.fullmatch(s.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def human(n: float) -> str:
    for unit in ("GiB", "MiB", "KiB"):
        if abs(n) >= _UNITS[unit]:
            return f"{n / _UNITS[unit]:.2f} {unit}"
    return f"{n:.0f} bytes"


def read_lines(path: Path) -> Iterator[str]:
    """Lines of a log, streamed (rank logs get large); a torchrun error.json is unfolded
    into its message and stack."""
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            yield from _json_strings(json.loads(text))
        except json.JSONDecodeError:
            yield from text.splitlines()
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            yield line.rstrip("\n")


def _json_strings(doc: Any) -> list[str]:
    out: list[str] = []
    if isinstance(doc, dict):
        for v in doc.values():
            out.extend(_json_strings(v))
    elif isinstance(doc, list):
        for v in doc:
            out.extend(_json_strings(v))
    elif isinstance(doc, str):
        out.extend(doc.splitlines())
    return out


LOG_GLOBS = ("*.log", "*.txt", "*.out", "*.err", "error.json")


def expand(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for the logs under it (a job's log folder,
    torchrun's per-rank attempt_*/<rank>/error.json tree)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted({f for g in LOG_GLOBS for f in p.rglob(g) if f.is_file()}))
        else:
            out.append(p)
    return out


def rank_of(line: str, path: str) -> int | None:
    for rx in _RANK_IN_LINE:
        m = rx.search(line)
        if m:
            return int(m.group(1))
    for rx in _RANK_IN_PATH:
        m = rx.search(path)
        if m:
            return int(m.group(1))
    return None


def scan(paths: Iterable[Path]) -> tuple[list[Hit], int]:
    """First hit per signature (with count and ranks), in file order; and lines read."""
    hits: dict[str, Hit] = {}
    total = 0
    for path in paths:
        no = 0
        for no, line in enumerate(read_lines(path), 1):
            for m in signatures.match_line(line):
                rank = rank_of(line, str(path))
                h = hits.get(m.sig.id)
                if h is None:
                    hits[m.sig.id] = h = Hit(m, str(path), no, rank, line.strip())
                else:
                    h.count += 1
                if rank is not None:
                    h.ranks.add(rank)
        total += no
    return list(hits.values()), total


def _oom(groups: dict[str, str]) -> dict[str, Any]:
    req, free = to_bytes(groups.get("req", "")), to_bytes(groups.get("free", ""))
    total = to_bytes(groups.get("total", ""))
    alloc = to_bytes(groups.get("alloc", ""))
    reserved = to_bytes(groups.get("reserved", "")) or (
        (alloc or 0) + (to_bytes(groups.get("unalloc", "")) or 0) if "unalloc" in groups else None)
    out: dict[str, Any] = {k: v for k, v in dict(requested=req, free=free, total=total, allocated=alloc,
                                                  reserved=reserved).items() if v is not None}
    if req is not None and free is not None:
        short = req - free
        out["short_by"] = short
        parts = [f"asked for {groups['req']} with {groups['free']} free, short by {human(short)}"]
        if total:
            parts.append(f"{human(alloc or 0)} of {groups['total']} already allocated "
                         f"({100 * (alloc or 0) / total:.0f}%)")
        if reserved is not None and alloc is not None and reserved - alloc > 0:
            parts.append(f"{human(reserved - alloc)} reserved but unused (fragmentation)")
        out["summary"] = "; ".join(parts)
    return out


def _state_dict_keys(groups: dict[str, str]) -> dict[str, Any]:
    """Prefixes are judged on the whole line: torch prints missing and unexpected keys together."""
    keys = re.findall(r'"([^"]+)"|\'([^\']+)\'', groups.get("_line") or groups.get("keys", ""))
    names = [a or b for a, b in keys] or [groups.get("keys", "")]
    found = sorted({p for k in names for p in WRAPPER_PREFIXES if k.startswith(p) or ("." + p) in k})
    if found:
        note = f"Keys carry wrapper prefixes {', '.join(found)} (from " + ", ".join(
            {"_fsdp_wrapped_module.": "FSDP1 wrapping", "_orig_mod.": "torch.compile",
             "module.": "DistributedDataParallel", "_checkpoint_wrapped_module.": "activation checkpointing"}[p]
            for p in found) + ") on one side only."
        fix = ("Save/load the unwrapped model's state: strip the prefixes, e.g. "
               "torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, '%s'), or use "
               "torch.distributed.checkpoint.state_dict.get_model_state_dict(model) which returns clean names"
               % found[0])
    else:
        note = "No wrapper prefix involved: the checkpoint is from a different model/config."
        fix = "Load with the same model config the checkpoint was saved with (check n_layers / dim / vocab)"
    return {"keys": names[:10], "prefixes": found, "prefix_note": note, "prefix_fix": fix}


def _hccl_code(groups: dict[str, str]) -> dict[str, Any]:
    code = groups.get("code")
    name = signatures.hccl_codes().get(code or "", f"error code {code}" if code else "an error")
    return {"code_name": name}


def _ping_answer(groups: dict[str, str]) -> dict[str, Any]:
    """The store ping reads 4 bytes as an int; printable bytes name the real service."""
    raw = int(groups.get("got", "0")).to_bytes(8, "little").rstrip(b"\0")
    text = raw.decode("ascii", "replace") if raw and all(32 <= b < 127 for b in raw) else ""
    return {"answer": text, "answer_note": f" (it answered {text!r})" if text else ""}


_PARSERS = {"oom": _oom, "state_dict_keys": _state_dict_keys, "hccl_code": _hccl_code, "ping_answer": _ping_answer}


def enrich(m: Match) -> dict[str, Any]:
    """The match's groups plus what its parser derives (OOM figures, key prefixes, ...)."""
    groups = dict(m.groups)
    parser = _PARSERS.get(m.sig.parse)
    if parser:
        groups.update(parser({**groups, "_line": m.line}))
    return groups


def explain(paths: list[Path]) -> list[Finding]:
    paths = expand(paths)
    hits, lines = scan(paths)
    if not hits:
        return [Finding("log.none", Status.WARN,
                        f"no known signature in {len(paths)} file(s) ({lines} lines)",
                        detail="Nothing matched rules/log_signatures.toml; not guessing. Look for the first "
                               "'Error'/'Traceback' on the lowest rank.",
                        data={"files": [str(p) for p in paths], "lines": lines})]
    hits.sort(key=lambda h: (h.match.sig.rank, str(h.path), h.line))
    out = []
    for i, h in enumerate(hits):
        sig, groups = h.match.sig, enrich(h.match)
        where = f"{h.path}:{h.line}" + (f" (rank {h.rank})" if h.rank is not None else "")
        seen = f"; seen {h.count}x" + (f" on ranks {sorted(h.ranks)}" if len(h.ranks) > 1 else "") \
            if h.count > 1 else ""
        label = "root cause" if i == 0 else "also"
        out.append(Finding(f"log.{sig.id}", Status.FAIL, f"{label}: {sig.title} — first at {where}{seen}",
                           detail=signatures.fill(sig.cause, groups) + "\n> " + h.text[:300],
                           fix=signatures.fill(sig.fix, groups), path=h.path, line=h.line,
                           data={"signature": sig.id, "rank": h.rank, "count": h.count, "ranks": sorted(h.ranks),
                                 "source": sig.source,
                                 **{k: v for k, v in groups.items() if k not in ("prefix_fix",)}}))
    return out
