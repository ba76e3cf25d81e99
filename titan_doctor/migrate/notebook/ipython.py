"""IPython syntax in notebook cells, masked so the cell parses as Python and put back
after the migration: line magics (`%time`), shell escapes (`!nvidia-smi`, `x = !ls`),
help (`obj?`). Only logical line starts count (not the inside of a string or brackets),
the way IPython finds them; every masked line keeps its place, so positions still hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Cell magics whose body is Python run in the notebook's namespace, or shell.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "python", "python3", "memit"}
SHELL_CELL_MAGICS = {"bash", "sh", "system", "!"}
# Line magics followed by one Python statement (without options) that we can migrate.
PYTHON_LINE_MAGICS = ("time", "timeit", "prun", "memit")

_MAGIC_LINE = re.compile(
    r"^[ \t]*(?:[%!]|\?"  # %magic, !shell, ?help
    r"|[\w.\[\](), \t]+?[ \t]*=[ \t]*[%!]"  # x = !ls, out = %sx ls
    r"|[\w.]+\?\??[ \t]*$)"
)  # obj? / obj??
_PY_LINE_MAGIC = re.compile(r"^([ \t]*)%(" + "|".join(PYTHON_LINE_MAGICS) + r")[ \t]+(?![-\s])")


@dataclass
class Magic:
    original: str  # the line as it is in the cell (possibly shell-rewritten)
    shift: int = 0  # python line magics: columns the `%time ` prefix took
    prefix: str = ""  # python line magics: `%time ` (put back in front of the statement)


def mask(lines: list[str], token: str) -> tuple[list[str], dict[int, Magic]]:
    """Lines with every magic line replaced by a placeholder that parses and keeps the line
    count; {line index: Magic}. Only logical line starts are looked at (not the inside of
    a string or a bracket), the way IPython finds them."""
    out, magics = list(lines), {}
    depth, quote, cont, in_magic, indent = 0, "", False, False, ""
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if in_magic:  # backslash continuation of a magic line: same indent as its start
            magics[i] = Magic(line)
            out[i] = _placeholder(indent + "x" + line[len(body) :], token, i)
            in_magic = body.endswith("\\")
            continue
        if depth == 0 and not quote and not cont and _MAGIC_LINE.match(body):
            py = _PY_LINE_MAGIC.match(body)
            if py and not body.endswith("\\"):
                indent, prefix = py.group(1), body[len(py.group(1)) : py.end()]
                magics[i] = Magic(line, shift=len(prefix), prefix=prefix)
                out[i] = indent + body[py.end() :] + f"  # {token}-{i}" + line[len(body) :]
            else:
                magics[i] = Magic(line)
                out[i] = _placeholder(line, token, i)
                in_magic = body.endswith("\\")
                indent = line[: len(line) - len(line.lstrip(" \t"))]
            continue
        depth, quote = _scan(body, depth, quote)
        cont = body.endswith("\\") and not quote
        if quote in ("'", '"') and not body.endswith("\\"):
            quote = ""  # an unterminated one-line string ends with the line
    return out, magics


def _placeholder(line: str, token: str, i: int) -> str:
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    return f"{indent}pass  # {token}-{i}" + ("\n" if line.endswith("\n") else "")


def _scan(body: str, depth: int, quote: str) -> tuple[int, str]:
    """Bracket depth and open string quote after one line of Python."""
    j, n = 0, len(body)
    while j < n:
        if quote:
            if body.startswith(quote, j):
                j, quote = j + len(quote), ""
            else:
                j += 2 if body[j] == "\\" else 1
            continue
        c = body[j]
        if c == "#":
            break
        if c in "\"'":
            quote = body[j : j + 3] if body[j : j + 3] in ('"""', "'''") else c
            j += len(quote)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        j += 1
    return depth, quote


def unmask(text: str, magics: dict[int, Magic], token: str) -> str | None:
    """Placeholders back to their magic lines; None if one went missing."""
    pattern = re.compile(rf"^.*  # {re.escape(token)}-(\d+)(\r?\n)?$", re.MULTILINE)
    found: set[int] = set()

    def back(m: re.Match) -> str:
        i = int(m.group(1))
        found.add(i)
        magic = magics[i]
        if not magic.prefix:
            return magic.original.rstrip("\r\n") + (m.group(2) or "")
        stmt = m.group(0)[: m.start(1) - m.start(0) - len(f"  # {token}-")]
        indent = stmt[: len(stmt) - len(stmt.lstrip(" \t"))]
        return indent + magic.prefix + stmt[len(indent) :] + (m.group(2) or "")

    out = pattern.sub(back, text)
    return out if found == set(magics) else None
