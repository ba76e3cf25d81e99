"""The one line of an exception that a one-line error quotes. Some exceptions carry no
message at all (a store's bare RuntimeError()), and quoting `str(e).splitlines()[0]`
then raised an IndexError in the middle of reporting the real failure."""

from __future__ import annotations


def first_line(e: BaseException, limit: int = 200) -> str:
    """The exception's first non-empty line, cut at `limit`; its type's name when it has none."""
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(e).__name__
