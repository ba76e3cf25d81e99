"""Config fields that carry their own documentation and valid range.

Each setting of a config dataclass is declared as `setting(default, "what it tunes", ge=...)`:
the bound sits next to the definition, and both the one-line error for a bad value
(`range_error`) and the README's config reference (`config_reference`) are generated from
it, so neither can drift from the code. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """Bounds of a number: `ge`/`gt` below, `le`/`lt` above (None = unbounded)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        """'>= 1', '> 0', 'in [0, 1]', 'in (0, 1)', or '' when unbounded."""
        low = f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}" if self.gt is not None else None
        high = f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})" if self.lt is not None else None
        if low and high:
            return f"in {low}, {high}"
        if low:
            return (">= " if low[0] == "[" else "> ") + low[1:]
        if high:
            return ("<= " if high[-1] == "]" else "< ") + high[:-1]
        return ""

    def holds(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def setting(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple = (),
    each: bool = False,
    default_factory: Any = dataclasses.MISSING,
    toml_key: str = "",
) -> Any:
    """A dataclass field with its documentation and valid values as metadata.
    `each`: the range applies to every element of a list value; `toml_key`: the key's name
    in TOML when it differs from the field's (a Python keyword)."""
    bounds = Range(ge, gt, le, lt) if any(b is not None for b in (ge, gt, le, lt)) else None
    meta = {"doc": doc, "range": bounds, "choices": tuple(choices), "each": each, "toml_key": toml_key}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def range_of(f: dataclasses.Field) -> Range | None:
    return f.metadata.get("range")


def range_error(where: str, f: dataclasses.Field, value: Any) -> str | None:
    """The one-line complaint about `value` for field `f` (named `where`), or None when it
    is within the declared range. NaN and infinities are never valid."""
    bounds = range_of(f)
    if value is None or isinstance(value, bool):
        return None
    values = value if isinstance(value, list) and f.metadata.get("each") else [value]
    for v in values:
        if not isinstance(v, (int, float)):
            return None  # a type problem, reported by the type check
        if isinstance(v, float) and not math.isfinite(v):
            return f"{where} = {value} must be a finite number" + (f" {bounds.describe()}" if bounds else "")
        if bounds and not bounds.holds(v):
            if isinstance(value, list):
                return f"{where} = {value}: every element must be {bounds.describe()}"
            return f"{where} = {value} must be {bounds.describe()}"
    return None


def doc_of(f: dataclasses.Field) -> str:
    return f.metadata.get("doc", "")


def valid_values(f: dataclasses.Field) -> str:
    """What the README's 'valid' column says for this field."""
    if f.metadata.get("choices"):
        return " \\| ".join(str(c) for c in f.metadata["choices"])
    bounds = range_of(f)
    if bounds:
        text = bounds.describe()
        return f"each {text}" if f.metadata.get("each") else text
    return ""
