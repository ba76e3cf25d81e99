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

from titan_doctor.diagnose import error_codes, signatures

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
