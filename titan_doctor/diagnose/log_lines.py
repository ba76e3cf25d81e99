"""Reading crash logs line by line, and what each line says about who printed it and
when: the process prefix ([rank3]:, (VllmWorker rank=0 pid=48), worker-1:, [1,3]<stdout>:), the rank and
device it names (torch_npu's "(PID:..., Device:N, RankID:N)", c10d's "[Rank N]"), and its
timestamp in the formats torch, torch_npu, CANN, glog and vLLM print."""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG_GLOBS = ("*.log", "*.txt", "*.out", "*.err", "error.json")

# Noise a paste or a log collector puts before the process prefix: "[80746] ", a date,
# a clock time, docker build's "90.61 ".
_LEAD = re.compile(r"^(?:\[\d+\]\s+|\d{4}-\d\d-\d\d[ T][\d:.,]+\s+|\d\d:\d\d:\d\d[.,]\d+\s+|\d+\.\d+\s+)*")
_PREFIXES = (
    re.compile(r"\[rank(?P<rank>\d+)\]:"),  # torch >= 2.2 per-rank prefix
    re.compile(r"\[default(?P<rank>\d+)\]:"),  # torchrun --tee
    re.compile(r"\((?=[^()]*\bpid=\d+)[^()]*?(?:\brank=(?P<rank>\d+)[^()]*)?\)"),  # Ray / vLLM worker
    re.compile(r"[A-Za-z][\w.]*-\d+(?=: )"),  # pdsh / mpirun host: "worker-1: "
    re.compile(r"\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:"),  # Open MPI --tag-output: "[1,2]<stdout>:"
)
_PID_LINE = re.compile(r"\(PID:\s*\d+,\s*Device:\s*(-?\d+),\s*RankID:\s*(-?\d+)\)")
# c10d "[Rank 3]", lmdeploy "Rank[2]", "aborted on rank 0", torchrun's summary "rank      : 0 (local_rank: 0)",
# HCCL/MindIE "HcclCommInitRootInfo fail, error:2, rank:1, rankSize:4", c10d "[4] is setting up NCCL communicator",
# titan-train's launcher summary "titan-train: rank 1 failed first (...)" / "  stuck: rank 1 (...)",
# DCP's "CheckpointException ranks:dict_keys([0])" when one rank failed
_RANK_MARK = re.compile(
    r"\bRank[ \[](\d+)\]|\bon rank (\d+)\b|^\s*rank\s*:\s*(\d+) \(local_rank|\brank:(\d+), rankSize:"
    r"|\[(\d+)\] is setting up [NH]CCL communicator"
    r"|^titan-train: rank (\d+) failed first \(|^\s*stuck: rank (\d+) \("
    r"|CheckpointException ranks:dict_keys\(\[(\d+)\]\)"
)
# the device CANN's own text names: "deviceId=3", "device_id=3", the device-error report
# "The error from device(chipId:7, dieId:0)" / "device(2)", "open device 2 failed", "invalid device=1",
# the ACL samples' "acl set device 0 failed"
_WEAK_DEVICE = re.compile(
    r"\b(?:deviceId|device_id|devId)\s?=\s?(\d+)\b|\bdevice\((?:chipId:)?(\d+)[,)]"
    r"|\b(?:open|set) device (\d+) failed|\binvalid device=(\d+)"
)
_RANK_IN_PATH = (re.compile(r"rank[_-]?(\d+)", re.I), re.compile(r"[/\\](\d+)[/\\]error\.json$"))
# (month, day, hour, minute, second[, fraction]) in the formats the stack prints
_TIMES = (
    # torch_npu "2025-04-29-18:46:11", CANN "2024-05-21-11:57:54.167.645", logging "2024-10-21 10:42:00,218"
    re.compile(r"\b\d{4}-(\d\d)-(\d\d)[- T_](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"),
    # glog / c10 "[E0626 06:24:44.159932949", "[E324 13:00:25.428" (month not zero-padded)
    re.compile(r"\[[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)"),
    # vLLM "ERROR 06-09 06:57:48"
    re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b"),
    # transformers "05/10/2024 02:41:06"
    re.compile(r"\b(\d\d)/(\d\d)/\d{4} (\d\d):(\d\d):(\d\d)\b"),
)
# The rest of a line a paste or a terminal wrapped inside parentheses: it starts with the
# separator or the closing parenthesis ("(172.17.0.2" / ", 44737)."), or with the tail of a cut
# token ("WorkNCCL(SeqNum=385" / "6, OpType=ALLREDUCE, ...)").
_WRAPPED_REST = re.compile(r"^\s*(?:[,)]|\w{1,12}, )")
_CONTINUATION = re.compile(r"^(?:\s+\S|TraceBack|Solution|Possible Cause|Reason)")
_TRACEBACK = re.compile(
    r"^(?:\s|Traceback \(most recent call last\)|[\w.]+(?:Error|Exception|Warning|Interrupt)\b"
    r"|The above exception|During handling of the above|$)"
)


@dataclass(frozen=True)
class Line:
    path: str
    no: int  # physical line number, 1-based
    text: str
    stream: str  # the prefix naming the process that printed it; "" when none
    rank: int | None  # rank the line names (RankID, [Rank N], prefix), if any
    device: int | None  # device torch_npu names on it (Device:N), if any
    weak_device: int | None  # device id from CANN's traceback text (deviceId=N), if any
    time: tuple | None  # (month, day, h, m, s, fraction): sortable within a year

    @property
    def body(self) -> str:
        """The text after the process prefix (its indentation kept)."""
        if not (self.stream and self.text.startswith(self.stream)):
            return self.text
        rest = self.text[len(self.stream) :]
        rest = rest[1:] if rest.startswith(":") else rest
        return rest[1:] if rest.startswith(" ") else rest

    def is_continuation(self) -> bool:
        """An indented line, or CANN's 'TraceBack' / 'Solution' / 'Reason' lines under an E-code."""
        return bool(_CONTINUATION.match(self.body))

    def is_traceback(self) -> bool:
        return bool(_TRACEBACK.match(self.body))


def expand(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for the logs under it (a job's log folder,
    torchrun's per-rank attempt_*/<rank>/error.json tree), of a titan-train run restarted by
    --max-restarts only its last failed attempt's (last_failed_attempt)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(last_failed_attempt(p, sorted({f for g in LOG_GLOBS for f in p.rglob(g) if f.is_file()})))
        else:
            out.append(p)
    return out


_ATTEMPT_DIR = re.compile(r"attempt-(\d+)")


def last_failed_attempt(folder: Path, files: list[Path]) -> list[Path]:
    """`files` (under `folder`) without the attempts a titan-train restart made moot. Before a
    restart the launcher moves the died attempt's rank logs and its failure summary to
    logs/attempt-K/ (titan_train/runtime/restarts.py); the attempt now in logs/ has a summary
    (launcher_node<N>.log) only if it failed too. So of such a logs folder the last failed
    attempt is read: logs/ itself when it has a summary, else the newest attempt-K (the
    attempts after it finished or still run): an earlier attempt's error is not the cause."""
    attempts: dict[Path, dict[int, Path]] = {}
    for d in folder.rglob("attempt-*"):
        m = _ATTEMPT_DIR.fullmatch(d.name)
        if m and d.is_dir():
            attempts.setdefault(d.parent, {})[int(m.group(1))] = d
    if not attempts:
        return files
    keep = {logs: logs if any(logs.glob("launcher_node*.log")) else kept[max(kept)] for logs, kept in attempts.items()}

    def wanted(f: Path) -> bool:
        for logs, chosen in keep.items():
            if logs in f.parents:
                inside = next((d for d in attempts[logs].values() if d in f.parents), None)
                return inside is chosen if inside is not None else chosen is logs
        return True

    return [f for f in files if wanted(f)]


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


def raw_lines(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, the physical line it was split from or None) of a log,
    streamed (rank logs get large). A torchrun error.json is unfolded into its message and
    stack; an error printed with escaped newlines (a JSON/HTTP error body) is split into
    its lines, which keep their number and their process prefix."""
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            lines = _json_strings(json.loads(text))
        except json.JSONDecodeError:
            lines = text.splitlines()
        for no, line in enumerate(lines, 1):
            yield no, line, None
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        held: tuple[int, str] | None = None  # a line cut inside parentheses, waiting for its rest
        for no, line in enumerate(fh, 1):
            held = yield from step(held, no, line.rstrip("\n"))
        if held is not None:
            yield from parts(*held)


def step(held: tuple[int, str] | None, no: int, line: str) -> Generator[tuple[int, str, str | None], None, Any]:
    """One physical line through raw_lines: the lines it completes, then (as the generator's
    value) the line now held, waiting for its rest (None when none)."""
    if held is not None:
        if _WRAPPED_REST.match(line):
            line, no = held[1] + line.strip(), held[0]  # "(172.17.0.2" + ", 44737)."
        else:
            yield from parts(*held)
    if "(" in line and line.count("(") > line.count(")") and len(line) < 2000:
        return (no, line)
    if "\\n" in line:
        yield from parts(no, line)
    else:
        yield no, line, None
    return None


def parts(no: int, line: str) -> Iterator[tuple[int, str, str | None]]:
    if "\\n" in line:
        for part in line.split("\\n"):
            yield no, part, line
    else:
        yield no, line, None


def file_rank(path: str) -> int | None:
    for rx in _RANK_IN_PATH:
        m = rx.search(path)
        if m:
            return int(m.group(1))
    return None


def timestamp(text: str) -> tuple | None:
    for rx in _TIMES:
        m = rx.search(text)
        if m:
            month, day, h, mi, s = (int(g) for g in m.groups()[:5])
            frac = float("0." + m.group(6)) if m.lastindex and m.lastindex >= 6 and m.group(6) else 0.0
            return (month, day, h, mi, s, frac)
    return None


def weak_device(text: str) -> int | None:
    """The device CANN's own text names (see _WEAK_DEVICE), if any."""
    w = _WEAK_DEVICE.search(text) if "evice" in text else None
    return int(next(g for g in w.groups() if g is not None)) if w else None


def has_prefix_rank(text: str) -> bool:
    """Cheap test: might this line carry a rank prefix?"""
    return "[rank" in text or "rank=" in text or "[default" in text or "]<std" in text


def _prefix(text: str) -> tuple[str, int | None]:
    lead = _LEAD.match(text)
    start = lead.end() if lead else 0
    for rx in _PREFIXES:
        m = rx.match(text, start)
        if m:
            rank = m.groupdict().get("rank")
            return text[: m.end()], int(rank) if rank else None
    return "", None


def parse(path: str, no: int, text: str, parent: str | None = None) -> Line:
    """One line with what it says about rank, device and time. A part of an
    escaped-newline message inherits the process prefix of the line it came from."""
    stream, prefix_rank = _prefix(text)
    if not stream and parent:
        stream, prefix_rank = _prefix(parent)
    rank = device = weak = None
    pid = _PID_LINE.search(text) if "PID:" in text else None
    if pid:
        device = int(pid.group(1)) if int(pid.group(1)) >= 0 else None
        rank = int(pid.group(2)) if int(pid.group(2)) >= 0 else None
    if rank is None and ("ank" in text or "is setting up" in text):
        m = _RANK_MARK.search(text)
        if m:
            rank = int(next(g for g in m.groups() if g is not None))
    if rank is None:
        rank = prefix_rank
    weak = weak_device(text)
    return Line(path, no, text, stream, rank, device, weak, timestamp(text))
