"""A notebook's JSON text, read with the position of every source line and patched in
place: never re-serialised, so outputs, metadata, key order, indentation and the final
newline stay byte for byte what the notebook's editor wrote.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from json.decoder import scanstring


class NotebookError(ValueError):
    """The file is not a notebook we can read (bad JSON): reported as a parse failure."""

    def __init__(self, message: str, line: int = 1, col: int = 1) -> None:
        super().__init__(message)
        self.line, self.col = line, col


class OutputInvalid(ValueError):
    """Our rewritten notebook would not load back as the same document: not written."""


@dataclass
class Cell:
    number: int  # 1-based, counting every cell (as editors show them)
    cell_type: str = ""
    value_span: tuple[int, int] | None = None  # the whole "source" value
    pieces: list[tuple[int, int]] = field(default_factory=list)  # string tokens in it
    lines: list[str] = field(default_factory=list)
    is_list: bool = True

    @property
    def source(self) -> str:
        return "".join(self.lines)


_WS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


def _ws(s: str, i: int) -> int:
    return _WS.match(s, i).end()


def _skip(s: str, i: int) -> int:
    return _DECODER.raw_decode(s, i)[1]


def _members(s: str, i: int, on_member: Callable[[str, int], int]) -> int:
    """Walk the object at s[i] ('{'), calling on_member(key, value_start) -> value_end."""
    i = _ws(s, i + 1)
    if s[i] == "}":
        return i + 1
    while True:
        key, i = scanstring(s, i + 1)
        i = _ws(s, _ws(s, i) + 1)  # past ':'
        i = _ws(s, on_member(key, i))
        if s[i] == "}":
            return i + 1
        i = _ws(s, i + 1)  # past ','


def _elements(s: str, i: int, on_element: Callable[[int], int]) -> int:
    i = _ws(s, i + 1)
    if s[i] == "]":
        return i + 1
    while True:
        i = _ws(s, on_element(i))
        if s[i] == "]":
            return i + 1
        i = _ws(s, i + 1)


def read_cells(text: str) -> list[Cell]:
    """The cells of a (valid JSON) nbformat 4 notebook, with the spans of their sources."""
    cells: list[Cell] = []

    def on_cell(i: int) -> int:
        cell = Cell(number=len(cells) + 1)
        cells.append(cell)
        if text[i] != "{":
            return _skip(text, i)

        def on_member(key: str, j: int) -> int:
            if key == "cell_type":
                value, end = _DECODER.raw_decode(text, j)
                cell.cell_type = value if isinstance(value, str) else ""
                return end
            if key != "source":
                return _skip(text, j)
            cell.pieces, cell.lines = [], []
            if text[j] == '"':
                value, end = scanstring(text, j + 1)
                cell.is_list, cell.pieces, cell.lines = False, [(j, end)], [value]
            elif text[j] == "[":

                def on_piece(k: int) -> int:
                    if text[k] != '"':
                        raise NotebookError("a source line is not a string")
                    value, end = scanstring(text, k + 1)
                    cell.pieces.append((k, end))
                    cell.lines.append(value)
                    return end

                end = _elements(text, j, on_piece)
            else:
                raise NotebookError("cell source is neither a string nor a list")
            cell.value_span = (j, end)
            return end

        return _members(text, i, on_member)

    def on_top(key: str, i: int) -> int:
        if key == "cells" and text[i] == "[":
            return _elements(text, i, on_cell)
        return _skip(text, i)

    _members(text, _ws(text, 0), on_top)
    return cells


def split_lines(text: str) -> list[str]:
    """Lines with their \\n, the way Jupyter stores a source list."""
    return re.findall(r"[^\n]*\n|[^\n]+", text)


_NON_ASCII_ESCAPE = re.compile(r"\\u(?:00[89a-fA-F]|0[1-9a-fA-F]|[1-9a-fA-F])")


def escapes_non_ascii(raw: str) -> bool:
    """Whether the file was written with ensure_ascii (\\u00e9 rather than é): new
    lines are written the same way."""
    return bool(_NON_ASCII_ESCAPE.search(raw))


def _encode(line: str, ensure_ascii: bool) -> str:
    return json.dumps(line, ensure_ascii=ensure_ascii)


def patch(raw: str, cells: list[Cell], new_sources: dict[int, str]) -> str:
    """`raw` with the source values of the changed cells replaced, nothing else touched."""
    ensure_ascii = escapes_non_ascii(raw)
    edits = []
    for cell in cells:
        if cell.number not in new_sources:
            continue
        new = new_sources[cell.number]
        start, end = cell.value_span
        if not cell.is_list:
            edits.append((start, end, _encode(new, ensure_ascii)))
            continue
        edits.append((start, end, _array(raw, cell, split_lines(new), ensure_ascii)))
    out = raw
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return out


def _array(raw: str, cell: Cell, new_lines: list[str], ensure_ascii: bool) -> str:
    """The new JSON array for a source list: unchanged lines keep their exact tokens and
    the separators between them; new lines use the separator the array already uses."""
    start, end = cell.value_span
    pieces = cell.pieces
    if not new_lines:
        return "[]"
    if pieces:
        seps = [raw[a[1] : b[0]] for a, b in zip(pieces, pieces[1:])]
        open_text, close_text = raw[start : pieces[0][0]], raw[pieces[-1][1] : end]
        sep = seps[0] if seps else "," + open_text[1:]
    else:  # "source": [] -> the layout nbformat writes (indent 1 below the key)
        line_start = raw.rfind("\n", 0, start) + 1
        indent = re.match(r"[ \t]*", raw[line_start:]).group(0)
        open_text, close_text, seps = "[\n" + indent + " ", "\n" + indent + "]", []
        sep = ",\n" + indent + " "
    items: list[tuple[int | None, str]] = []  # (old piece index or None, token)
    matcher = difflib.SequenceMatcher(None, cell.lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            items += [(i1 + k, raw[pieces[i1 + k][0] : pieces[i1 + k][1]]) for k in range(i2 - i1)]
        else:
            items += [(None, _encode(line, ensure_ascii)) for line in new_lines[j1:j2]]
    text = open_text
    for n, (old, token) in enumerate(items):
        if n:
            prev = items[n - 1][0]
            text += seps[prev] if old is not None and prev is not None and old == prev + 1 else sep
        text += token
    return text + close_text


def verify(doc: dict, new_raw: str, cells: list[Cell], new_sources: dict[int, str]) -> None:
    """The patched text must load as the original document with only the changed cells'
    source text different (a list stays a list, a string a string)."""
    try:
        new_doc = json.loads(new_raw)
    except json.JSONDecodeError as e:
        raise OutputInvalid(f"patched notebook is not valid JSON ({e.msg})") from e
    expected = json.loads(json.dumps(doc))
    for cell in cells:
        if cell.number not in new_sources:
            continue
        got = new_doc["cells"][cell.number - 1].get("source")
        if isinstance(got, list) != cell.is_list:
            raise OutputInvalid(f"cell {cell.number}: source changed its JSON type")
        if ("".join(got) if cell.is_list else got) != new_sources[cell.number]:
            raise OutputInvalid(f"cell {cell.number}: source was not written as intended")
        expected["cells"][cell.number - 1]["source"] = got
    if new_doc != expected:
        raise OutputInvalid("patched notebook differs from the original outside the sources")
