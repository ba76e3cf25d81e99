"""From log lines to incidents, and which incident is the root cause.

An event is one error a line reports: a code (decoded by error_codes.py) or a message
signature (log_signatures.toml). Events printed together by one process (the same prefix,
a few lines apart, one rank) form an incident; its cause is its most specific event, and
its rank, device and time come from all its lines and the traceback above them.

The root cause across incidents, as an engineer reads a multi-rank failure:
  1. per rank, that rank's best incident (and its earliest time);
  2. ranks whose error is not a consequence of a peer (a timeout waiting for it) first;
  3. among those, the one that failed first by timestamp, where the logs have them;
  4. otherwise the most specific, then the first in file order.

Within an incident the most specific evidence wins: a message row (its reason) beats the code
it came with, and a catch-all E-code (EE1001 "invalid argument", EZ9999 "inner error") whose
message says something ranks above the aclError number beside it, whose meaning is generic.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import error_codes, log_facts, log_lines, log_prefilter, signatures
from titan_doctor.diagnose.log_facts import Facts
from titan_doctor.diagnose.log_lines import Line

GAP = 30  # lines between two events of one incident, at most
MORE = 8  # lines under an E-code that continue its message (TraceBack, Reason, ...)
NEAR = 3  # lines around an incident whose rank prefix it may borrow
CONTEXT = 80  # lines kept to look back for the traceback an event ends
WRAPPER_RANK = 80  # events ranked this or higher only report that a call failed


@dataclass
class Event:
    id: str
    title: str
    cause: str
    fix: str
    rank: int  # priority: lower = closer to the root cause
    consequence: bool
    source: str
    line: Line
    groups: dict[str, Any] = field(default_factory=dict)
    lines: list[Line] = field(default_factory=list)  # every line of a multi-line message
    group_list: list[dict[str, str]] = field(default_factory=list)
    parse: str = ""
    merge: bool = False
    message: str = ""
    note: str = ""  # why it is a consequence, when it is one
    more: list[str] = field(default_factory=list)  # continuation lines of an E-code's message
    repeats: list[Line] = field(default_factory=list)  # lines that reported it again (they may name the device)
    family: str = ""  # the failure class (rules/log_families.toml); "" when not known
    weak: bool = False  # it only suggests the cause
    confirm: str = ""
    fix_serving: str = ""
    only_on: str = ""
    catch_all: bool = False  # a generic code whose message is the explanation
    next_line: bool = False  # the line after it belongs to its message


def event_of_match(m: signatures.Match, line: Line | None = None) -> Event:
    s = m.sig
    line = line or log_lines.parse("", 0, m.line)
    # a pointer that names its subject (torchrun's "rank : 1 (local_rank: 1)") collects the
    # lines under it (exitcode, traceback) as its message does
    message = " ".join(line.body.split()) if s.only_in else ""
    return Event(
        s.id,
        s.title,
        s.cause,
        s.fix,
        s.rank,
        s.consequence,
        s.source,
        line,
        dict(m.groups),
        [line],
        [dict(m.groups)],
        s.parse,
        s.merge,
        message,
        family=s.family,
        weak=s.weak,
        confirm=s.confirm,
        fix_serving=s.fix_serving,
        only_on=s.only_on,
        next_line=s.next_line,
    )


def events_of(line: Line, section: str = "") -> list[Event]:
    return _events(line, signatures.best_match(line.text, section), error_codes.find_codes(line.text), section)


def _events(line: Line, m: signatures.Match | None, codes: list[error_codes.Code], section: str) -> list[Event]:
    out = []
    if m:
        out.append(event_of_match(m, line))
    for c in codes:
        out.append(
            Event(
                c.id,
                c.title,
                c.cause,
                c.fix,
                c.rank,
                c.consequence,
                c.source,
                line,
                {"code": c.code},
                [line],
                [],
                "",
                False,
                c.message,
                catch_all=c.catch_all,
            )
        )
    if section == LAUNCHER_FAILURES:
        for e in out:
            e.consequence = True
            e.note = "listed after the first failure in torchrun's summary: the launcher stopped it, or it failed later"
    return out


# torchrun's failure summary (torch.distributed.elastic ChildFailedError): the "Root Cause
# (first observed failure)" block names the rank that failed first; the "Failures:" block lists
# the ranks that failed or were stopped after it.
LAUNCHER_ROOT = "launcher_root"
LAUNCHER_FAILURES = "launcher_failures"


def launcher_section(text: str, section: str) -> str:
    """Which block of torchrun's failure summary `text` is in, given the block of the line before."""
    if "Root Cause (first observed failure)" in text:
        return LAUNCHER_ROOT
    if "Failures:" in text and text.rstrip().endswith("Failures:"):
        return LAUNCHER_FAILURES
    if section and "=====" in text:
        return ""
    return section


@dataclass
class Incident:
    path: str
    stream: str
    events: list[Event] = field(default_factory=list)
    context: list[Line] = field(default_factory=list)  # lines above it: its traceback, the log line before
    order: int = 0
    near_ranks: dict[int, str] = field(default_factory=dict)  # rank -> stream of rank-prefixed lines around it
    near_device: int | None = None  # torch_npu's "(PID:.., Device:N, ..)" line printed right after it

    @property
    def last_no(self) -> int:
        return self.events[-1].line.no

    @property
    def cause(self) -> Event:
        best = min(self.events, key=lambda e: (e.rank, self.events.index(e)))
        if best.id == "hccl.result":
            # an HcclResult only names the kind of failure ("tcp connect failed"); an E-code
            # printed with it that carries its own reason says what happened, so it wins
            said = [e for e in self.events if e.id.startswith("ecode.") and e.message and not e.consequence]
            if said:
                return min(said, key=lambda e: (e.rank, self.events.index(e)))
        return best

    def _lines(self) -> list[Line]:
        return [ln for e in self.events for ln in e.lines + e.repeats] + self.context

    @property
    def rank(self) -> int | None:
        lines = self._lines()
        for ln in lines:  # torch_npu's RankID and c10d's [Rank N] name the global rank
            if ln.rank is not None and ln.stream == self.stream:
                return ln.rank
        own = log_lines.file_rank(self.path)
        if own is not None:
            return own
        # CANN prints its error block without torch's [rankN] prefix; a rank-prefixed line of
        # the same process (no other pid) right next to it names the rank.
        near = {r for r, st in self.near_ranks.items() if "pid=" not in st or st == self.stream}
        return near.pop() if len(near) == 1 else None

    @property
    def device(self) -> int | None:
        lines = self._lines()
        for ln in lines:
            if ln.device is not None:
                return ln.device
        dev = str(self.cause.groups.get("dev", ""))
        if dev.isdigit():  # a signature's (?P<dev>...) group names the device index
            return int(dev)
        weak = next((ln.weak_device for ln in lines if ln.weak_device is not None), None)
        if weak is None:  # the message lines under a code: "Aicpu kernel execute failed, device_id=0"
            weak = next(
                (d for e in self.events for m in e.more for d in [log_lines.weak_device(m)] if d is not None), None
            )
        return weak if weak is not None else self.near_device

    @property
    def time(self) -> tuple | None:
        return min((ln.time for ln in self._lines() if ln.time), default=None)


def _merge(events: list[Event]) -> list[Event]:
    """Lines of one multi-line message (merge = true) become one event."""
    out: list[Event] = []
    seen: dict[str, Event] = {}
    for e in events:
        if e.merge and e.id in seen:
            seen[e.id].lines.append(e.line)
            seen[e.id].group_list.append(e.groups)
            continue
        if e.merge:
            seen[e.id] = e
        out.append(e)
    return out


def _dedupe(events: list[Event]) -> list[Event]:
    """One event per code and incident (EH9999 printed on three lines is one error); the
    repeats' messages join the first one's."""
    out: list[Event] = []
    seen: dict[tuple, Event] = {}
    for e in events:
        key = (e.id, e.groups.get("code")) if not e.merge else (e.id, id(e))
        first = seen.get(key)
        if first is None:
            seen[key] = e
            out.append(e)
            continue
        first.repeats.extend(e.lines)
        for m in ([e.message] if e.message else []) + e.more:
            if m not in first.more and m != first.message:
                first.more.append(m)
    return out


def _context(path: str, recent: collections.deque, stream: str) -> list[Line]:
    """The traceback an event ends, and the line before it (logger.exception prints its
    message, e.g. 'Rank[2] failed.', just above the traceback)."""
    lines = [ln for ln in (log_lines.parse(path, *r) for r in recent) if ln.stream == stream]
    i = len(lines)
    while i > 0 and lines[i - 1].is_traceback():
        i -= 1
    return lines[max(i - 1, 0) :] if i < len(lines) else []


def _near_ranks(path: str, recent: collections.deque, no: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for r in recent:
        if no - r[0] <= NEAR and log_lines.has_prefix_rank(r[1]):
            ln = log_lines.parse(path, *r)
            if ln.rank is not None:
                out.setdefault(ln.rank, ln.stream)
    return out


def _lend(line: Line, above: Incident) -> None:
    """A line of another stream right after an incident may name who printed it: a rank
    prefix, or torch_npu's "(PID:.., Device:N, RankID:R)" line that follows a Python error
    (printed without the [rankN]: prefix of the traceback above it)."""
    if line.rank is not None:
        above.near_ranks.setdefault(line.rank, line.stream)
    if (
        line.device is not None
        and above.near_device is None
        and (line.rank is None or above.rank is None or line.rank == above.rank)
    ):
        above.near_device = line.device


_PID = re.compile(r"(?i)\bpid[=: ]\s*(\d+)")


def _borrow_device(new: Incident, above: Incident, text: str) -> None:
    """CANN's E-code line names the process ("[PID: 379]") but not the device; torch_npu's
    line just above it from the same process does ("(PID:379, Device:0, ...)")."""
    pids = set(_PID.findall(text))
    if not pids or above.device is None:
        return
    above_text = " ".join(ln.text for e in above.events for ln in e.lines)
    if pids & set(_PID.findall(above_text)):
        new.near_device = above.device


def _opens_incident(cur: Incident | None, line: Line) -> bool:
    """An event line starts a new incident unless the open one is the same process's, a
    few lines up, and names no other rank."""
    return (
        cur is None
        or line.stream != cur.stream
        or line.no - cur.last_no > GAP
        or (line.rank is not None and cur.rank is not None and line.rank != cur.rank)
    )


_ECHO = re.compile(r"(?i)execut(?:e|ion) failed|call failed|result = \d|error code|null pointer|context pointer")


def _says_something(e: Event) -> bool:
    """A catch-all code's "Reason:" that explains ("set ASCEND_RT_VISIBLE_DEVICES:... must be in
    ascending order"), not one that echoes a failed call ("rtGetDevMsg execute failed")."""
    reason = (e.message or "").partition("Reason:")[2].strip()
    return len(reason) >= 16 and not _ECHO.search(reason)


def _promote_reasons(inc: Incident) -> None:
    """A catch-all E-code with a message that says why ranks just above the aclError numbers
    of its incident: the message is specific, the number's meaning generic."""
    acl = [e.rank for e in inc.events if e.id.startswith("acl.")]
    if not acl:
        return
    for e in inc.events:
        if e.catch_all and e.rank >= min(acl) and _says_something(e):
            e.rank = min(acl) - 1


def _follow(line: Line, cur: Incident | None, coded: Event | None) -> Event | None:
    """A line without an error: it may continue the last E-code's message, or name the
    rank of the incident just above it. Returns the E-code event still collecting."""
    if coded is not None:
        if line.stream == coded.line.stream and line.no - coded.line.no <= MORE and line.is_continuation():
            coded.more.append(line.body.strip())
        else:
            coded = None
    if cur is not None and line.rank is not None and line.no - cur.last_no <= NEAR:
        cur.near_ranks.setdefault(line.rank, line.stream)
    return coded


# What, beside the needles and codes log_prefilter knows, makes the loop below do anything with
# a line: the job-wide facts, torchrun's summary blocks, NCCL's "Last error:"
_LOOP_KEYS = ("Fail", "Root Cause", "=====", "Last error:")
KEYS = (*log_facts.KEYS, *_LOOP_KEYS)


def _quiet(text: str) -> bool:
    """A line that reported nothing and would report nothing again anywhere (in the same
    block of torchrun's summary): no key of the loop is on it, Facts learns nothing from it a
    second time, and raw_lines neither holds it for its rest nor splits it."""
    if "\\n" in text or text.count("(") > text.count(")"):
        return False
    return not any(k in text for k in (*log_facts.AGAIN, *_LOOP_KEYS))


def incidents(paths: Iterable[Path], facts: Facts | None = None) -> tuple[list[Incident], int]:
    """Every incident in the logs, in file order, and the number of lines read; `facts`
    (when given) collects what the logs say about the job as a whole in the same pass."""
    out: list[Incident] = []
    total = 0
    facts = facts if facts is not None else Facts()
    for path in paths:
        recent: collections.deque = collections.deque(maxlen=CONTEXT)
        cur: Incident | None = None
        coded: Event | None = None  # the last E-code event, collecting its message lines
        last_error: Event | None = None  # an event whose message continues on the next line
        section = ""  # the block of torchrun's failure summary we are in
        skim = (
            log_prefilter.Skim(path, lambda: (*facts.keys(), *_LOOP_KEYS), keep=CONTEXT)
            if log_prefilter.skimmed(path)
            else None
        )
        for item in skim if skim is not None else log_lines.raw_lines(path):
            if isinstance(item, log_prefilter.Skipped):  # lines none of the tests below can care about
                total += item.count
                recent.extend(item.tail)
                continue
            no, text, parent = item
            total += 1
            facts.feed(text)
            if section or "Fail" in text or "Root Cause" in text:
                was, section = section, launcher_section(text, section)
                if skim is not None and section != was:
                    skim.quiet.clear()  # an only_in signature may match them now
            evs = []
            if log_prefilter.might_report(text):
                m, codes = log_prefilter.best_match(text, section), error_codes.find_codes(text)
                if m or codes:  # parsed (prefix, rank, time) only when it reports something
                    evs = _events(log_lines.parse(str(path), no, text, parent), m, codes, section)
            if last_error is not None:
                # torch prints NCCL's last error on the line after "Last error:", dynamo the
                # backend's exception after "BackendCompilerFailed: ... raised:": they say what failed
                if (not evs or last_error.next_line) and text.strip():
                    last_error.more.append(log_lines.parse(str(path), no, text, parent).body.strip()[:300])
                last_error = None
            if "Last error:" in text and cur is not None:
                last_error = next((e for e in reversed(cur.events) if e.id.startswith("nccl.")), None)
            last_error = next((e for e in evs if e.next_line), last_error)
            if evs:
                line = evs[0].line
                if _opens_incident(cur, line):
                    if cur is not None and no - cur.last_no <= NEAR:
                        _lend(line, cur)  # it may name the rank / device of the block just above
                    cur = Incident(
                        str(path),
                        line.stream,
                        context=_context(str(path), recent, line.stream),
                        order=len(out),
                        near_ranks=_near_ranks(str(path), recent, no),
                    )
                    if out and no - out[-1].last_no <= NEAR:
                        _borrow_device(cur, out[-1], text)
                    out.append(cur)
                cur.events.extend(evs)
                coded = next((e for e in reversed(evs) if e.message), None)
            elif coded is not None or (
                cur is not None and no - cur.last_no <= NEAR and log_lines.has_prefix_rank(text)
            ):
                coded = _follow(log_lines.parse(str(path), no, text, parent), cur, coded)
            recent.append((no, text, parent))
            if skim is not None:  # the next line must be read whatever it holds
                skim.hot = (
                    last_error is not None or coded is not None or (cur is not None and no + 1 - cur.last_no <= NEAR)
                )
                if not evs and parent is None and text not in skim.quiet and _quiet(text):
                    if len(skim.quiet) >= 4096:
                        skim.quiet.clear()
                    skim.quiet.add(text)
    for inc in out:
        inc.events = [e for e in _dedupe(_merge(inc.events)) if e.only_on != "npu" or facts.npu]
        _promote_reasons(inc)
    return [inc for inc in out if inc.events], total


@dataclass
class Actor:
    """One rank (or, without rank information, one process stream of one file)."""

    key: Any
    incidents: list[Incident]

    @property
    def best(self) -> Incident:
        return min(self.incidents, key=lambda i: (i.cause.rank, i.order))

    @property
    def time(self) -> tuple | None:
        return min((i.time for i in self.incidents if i.time), default=None)


def actors(found: list[Incident]) -> list[Actor]:
    by: dict[Any, list[Incident]] = {}
    for inc in found:
        r = inc.rank
        by.setdefault(("rank", r) if r is not None else ("stream", inc.path, inc.stream), []).append(inc)
    return [Actor(k, v) for k, v in by.items()]


def root(found: list[Incident]) -> Incident | None:
    """The incident that explains the failure (see the module docstring)."""
    if not found:
        return None
    pool = actors(found)
    primary = [a for a in pool if not a.best.cause.consequence]
    pool = primary or pool
    substantive = [a for a in pool if a.best.cause.rank < WRAPPER_RANK]
    pool = substantive or pool
    if any(a.time for a in pool):
        never = (13,)  # after any real (month, day, ...) key
        pool.sort(key=lambda a: (a.time or never, a.best.cause.rank, a.best.order))
    else:
        pool.sort(key=lambda a: (a.best.cause.rank, a.best.order))
    return pool[0].best
