"""The cheap tests that keep a large log fast: which lines could report an error at all, and
which signatures could match a line, before any regex runs.

Every test is derived from the rules (signatures.needles: text every match of a pattern
contains; error_codes.NEEDLES and its E-code pattern), never from a hand list, so a new
signature cannot be skipped by it. A test only ever answers yes more often than the regexes
would, never less: a line it lets through that nothing matches costs time, not a finding.

Log chatter (loss lines, progress bars, step counters) differs mostly in its numbers, so the
verdict for a line is cached by its shape, its digits read as 0 (needles are read the same
way). bytes.translate is ~30x faster than str.translate; the substring tests run on str,
which is ~6x faster than on bytes, so a new shape is decoded once.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import error_codes, log_lines, signatures

_ZERO = bytes.maketrans(b"123456789", b"000000000")
ZERO_STR = str.maketrans("123456789", "000000000")
_SEEN: dict[bytes, tuple[tuple[signatures.Signature, ...], bool]] = {}  # shape -> verdict, bounded
_SEEN_MAX = 8192


@functools.cache
def needles() -> tuple[str, ...]:
    """Text one of which every line a signature with needles or a code could match contains,
    digits read as 0."""
    out: set[str] = set(error_codes.NEEDLES)
    for s in signatures.load():
        out.update(s.needles or ())
    return tuple(sorted({n.translate(ZERO_STR) for n in out}))


@functools.cache
def _always() -> tuple[signatures.Signature, ...]:
    """Signatures without needles: tried on every line."""
    return tuple(s for s in signatures.load() if not s.needles)


@functools.cache
def gates() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The needles grouped under a few short gates: a greedy cover of the needles by their
    4-character pieces (a needle shorter than that stands for itself), each gate with the
    needles that contain it. A needle is in a line only if its gate is, so a new line shape
    costs one substring test per gate (~60) plus the few needles of the gates it holds."""
    left = set(needles())
    out: list[str] = []
    while left:
        count: collections.Counter = collections.Counter()
        for n in left:
            count.update({n[i : i + 4] for i in range(len(n) - 3)} or {n})
        best = max(count, key=lambda g: (count[g], g))
        out.append(best)
        left = {n for n in left if best not in n}
    return tuple((g, tuple(n for n in needles() if g in n)) for g in out)


@functools.cache
def _code_needles() -> frozenset[str]:
    return frozenset(n.translate(ZERO_STR) for n in error_codes.NEEDLES)


@functools.cache
def _owners() -> dict[str, tuple[int, ...]]:
    """Zeroed needle -> the indexes (in signatures.load() order) of the signatures it serves."""
    by: dict[str, list[int]] = {}
    for i, s in enumerate(signatures.load()):
        for n in s.needles or ():
            by.setdefault(n.translate(ZERO_STR), []).append(i)
    return {n: tuple(v) for n, v in by.items()}


def _verdict(shape: str) -> tuple[tuple[signatures.Signature, ...], bool]:
    """(the signatures whose needles the shape holds, in load order; whether it holds a code's
    needle or an E-code)."""
    held: list[str] = []
    for g, ns in gates():  # plain loops: ~40% faster than any() over a generator here
        if g in shape:
            for n in ns:
                if n in shape:
                    held.append(n)
    if not held and not _always():
        return (), error_codes.has_ecode(shape)
    owners = _owners()
    idx = {i for n in held for i in owners.get(n, ())}
    sigs = signatures.load()
    cands = tuple(s for i, s in enumerate(sigs) if i in idx or not s.needles)
    codes = any(n in _code_needles() for n in held)
    return cands, codes or error_codes.has_ecode(shape)


def verdict(text: str) -> tuple[tuple[signatures.Signature, ...], bool]:
    """What the cheap test says of a line: the signatures that could match it (a superset of
    those that do, in load order) and whether a code could be on it; cached by shape."""
    shape = text.encode("utf-8", "replace").translate(_ZERO)
    v = _SEEN.get(shape)
    if v is None:
        v = _verdict(shape.decode("utf-8", "replace"))
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[shape] = v
    return v


def might_report(text: str) -> bool:
    """Cheap test run on every line: False means no signature or code can match it."""
    sigs, codes = verdict(text)
    return bool(sigs) or codes


def best_match(text: str, section: str = "") -> signatures.Match | None:
    """signatures.best_match, trying only the signatures whose needles the line holds."""
    best: signatures.Match | None = None
    for sig in verdict(text)[0]:
        if sig.only_in and sig.only_in != section:
            continue
        if sig.needles and not any(n in text for n in sig.needles):
            continue
        if best is not None and sig.rank >= best.sig.rank:
            continue  # the first of the lowest rank wins, as in signatures.best_match
        m = sig.regex.search(text)
        if m:
            best = signatures.Match(sig, {k: v for k, v in m.groupdict().items() if v is not None}, text.strip())
    return best


# ---- skimming a large log: only the lines a test could care about are read one by one ------
#
# A chunk of the log is read at once and the lines that hold any of the keys (the needles, an
# E-code, and the caller's own keys) are found with numpy: each key stands for one of its
# 4-byte pieces, and a line is a candidate when one of those pieces is in it (digits read as
# 0). A line with more "(" than ")" (raw_lines may join it with the next) and an escaped "\n"
# are candidates too. The other lines are counted, and the last few of each run kept, not
# read one by one: for a log of distinct lines that is the whole cost.

SKIM_BYTES = 4 << 20  # files at least this large are skimmed (numpy's import costs ~0.1 s)
CHUNK = 1 << 20
KEEP = 80  # lines kept from the end of each skipped run, by default (the caller's look-back)
_BITS = 18


@dataclass(frozen=True)
class Skipped:
    """A run of lines no key is on: how many, and the last KEEP as raw_lines gives them."""

    count: int
    tail: list[tuple[int, str, None]]


# How often a byte is in log text, roughly: English letter frequencies (k, q, w raised: "worker",
# "request", "task" are everywhere in logs), a digit read as 0; a capital or a sign is rare. A space
# inside a piece is rare too: the end of one word and the start of the next go together seldom.
_FREQ = dict(
    zip(
        b"etaoinshrdlcumwfgypbvkjxqz",
        (127, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28, 24, 30, 22, 20, 20, 19, 15, 10, 20, 2, 2, 10, 1),
    )
)
_FREQ[48] = 60


def _likely(g: bytes) -> float:
    return math.prod((10 if 0 < i < 3 else 150) if c == 32 else _FREQ.get(c, 5) for i, c in enumerate(g))


def _grams(np: Any, z: bytes) -> Any:
    """Every 4-byte window of `z` as uint32, by offset: windows k, k+4, ... for k = 0..3."""
    pad = z + b"\n\n\n\n"
    return [np.frombuffer(pad, "<u4", count=(len(z) - k) // 4 + 1, offset=k) for k in range(4)]


def _table(np: Any, keys: tuple[str, ...], sample: bytes, reports: bool) -> tuple[Any, Any]:
    """(a bit table of the pieces' hashes, the pieces as sorted uint32) for these keys, the
    needles and the E-codes when `reports`. A key's piece is the one of its 4-byte windows least often in
    `sample` (the start of the log being read, digits as 0), then least likely by _likely."""
    seen = np.bincount(np.concatenate([_hash(np, v) for v in _grams(np, sample)]), minlength=1 << _BITS)

    def often(g: bytes) -> tuple[int, float]:
        return int(seen[_hash(np, np.frombuffer(g, "<u4"))[0]]), _likely(g)

    pieces: set[bytes] = set()
    for k in {*keys, *(needles() if reports else ())}:
        b = k.translate(ZERO_STR).encode("utf-8")
        if len(b) < 3:
            raise ValueError(f"skim key {k!r} is shorter than 3 bytes")
        if len(b) >= 4:
            pieces.add(min((b[i : i + 4] for i in range(len(b) - 3)), key=often))
        else:  # a 3-byte key stands for itself and each byte that can follow it (a line end too)
            pieces.update(b + bytes([c]) for c in range(256))
    # error_codes' E-code: "E" + [0-9A-Z] + digits, read as "E?00"
    if reports:
        pieces.update(b"E" + bytes([c]) + b"00" for c in b"0ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    words = np.unique(np.frombuffer(b"".join(sorted(pieces)), "<u4"))
    table = np.zeros(1 << _BITS, dtype=bool)
    table[_hash(np, words)] = True
    return table, words


def _hash(np: Any, v: Any) -> Any:
    return (v * np.uint32(2654435761)) >> np.uint32(32 - _BITS)


def _candidates(np: Any, b: bytes, nl: Any, table: tuple[Any, Any]) -> list[int]:
    """Indexes of the lines of `b` (complete lines; `nl` their ends) a key may be on."""
    bits, words = table
    hits = []
    for k, v in enumerate(_grams(np, b.translate(_ZERO))):
        pos = np.flatnonzero(bits[_hash(np, v)])
        pos = pos[np.isin(v[pos], words)]
        hits.append(pos * 4 + k)
    a = np.frombuffer(b, np.uint8)
    opens, closes = np.flatnonzero(a == 40), np.flatnonzero(a == 41)
    per_line = np.diff(np.searchsorted(opens, nl), prepend=0) - np.diff(np.searchsorted(closes, nl), prepend=0)
    lines = [np.searchsorted(nl, np.concatenate(hits)), np.flatnonzero(per_line > 0)]
    at = b.find(b"\\n")
    while at >= 0:
        lines.append(np.searchsorted(nl, np.array([at])))
        at = b.find(b"\\n", at + 2)
    found = np.unique(np.concatenate(lines))
    return found[found < len(nl)].tolist()


def _text(b: bytes, ends: list[int], j: int) -> str:
    return b[(ends[j - 1] + 1 if j else 0) : ends[j]].decode("utf-8")


def skimmed(path: Path) -> bool:
    """Whether `path` is read through Skim: a large plain log (error.json is read whole)."""
    try:
        return path.suffix != ".json" and path.stat().st_size >= SKIM_BYTES
    except OSError:
        return False


class Skim:
    """raw_lines(path), with the runs of lines no key (nor, when `reports`, a needle or an
    E-code) is on given as Skipped. The caller sets
    `hot` after each line it is given when the next line must be given to it whatever it holds
    (it continues a message, or it may name the rank of an incident just above). `keys` may
    be a function, asked at each chunk: keys it no longer names must be ones that can no longer
    matter (a fact already found)."""

    def __init__(
        self,
        path: Path,
        keys: tuple[str, ...] | Callable[[], tuple[str, ...]] = (),
        reports: bool = True,
        keep: int = KEEP,
    ):
        self.path, self.keys, self.reports, self.keep, self.hot = path, keys, reports, keep, False
        # texts of lines the caller read and found nothing in, that it would read for nothing
        # again whatever came before them (it clears this when what it knows changes)
        self.quiet: set[str] = set()

    def __iter__(self) -> Iterator[tuple[int, str, str | None] | Skipped]:
        import numpy as np

        held: tuple[int, str] | None = None
        tables: dict[tuple[str, ...], tuple[Any, Any]] = {}
        sample: bytes | None = None  # the log's start, digits as 0: which pieces are rare in it
        no = 0  # physical lines read before this chunk
        rest = ""
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            while True:
                chunk = fh.read(CHUNK)
                if not chunk:
                    break
                buf = rest + chunk
                cut = buf.rfind("\n") + 1
                buf, rest = buf[:cut], buf[cut:]
                if not buf:
                    continue
                b = buf.encode("utf-8")
                nl = np.flatnonzero(np.frombuffer(b, np.uint8) == 10)
                keys = self.keys() if callable(self.keys) else self.keys
                if keys not in tables:  # keys only ever drop out: a new table for the next chunks
                    sample = sample if sample is not None else b[: 1 << 20].translate(_ZERO)
                    tables[keys] = _table(np, keys, sample, self.reports)
                cands = _candidates(np, b, nl, tables[keys])
                ends = nl.tolist()
                n, i, c = len(ends), 0, 0  # line index, next candidate's position in cands
                while i < n:
                    if held is None and not self.hot:
                        nxt = i
                        while True:
                            while c < len(cands) and cands[c] < nxt:
                                c += 1
                            nxt = cands[c] if c < len(cands) else n
                            if nxt < n and self.quiet and _text(b, ends, nxt) in self.quiet:
                                nxt += 1  # a key is on it, but the caller read that text for nothing
                                continue
                            break
                        if nxt > i:  # lines i .. nxt-1 need not be read
                            lo = max(i, nxt - self.keep)
                            tail = [(no + j + 1, _text(b, ends, j), None) for j in range(lo, nxt)]
                            yield Skipped(nxt - i, tail)
                            i = nxt
                            continue
                    line = _text(b, ends, i)
                    i += 1
                    held = yield from log_lines.step(held, no + i, line)
                no += n
            if rest:
                held = yield from log_lines.step(held, no + 1, rest)
            if held is not None:
                yield from log_lines.parts(*held)
