"""Jupyter notebooks: the code cells go through the same Python migration as .py files,
and the file's JSON stays byte-identical outside the source lines that changed.

All Python cells of a notebook share one namespace, so they are migrated as ONE module
(`import torch as th` in cell 1 resolves `th.cuda` in cell 5; `import torch_npu` is added
once, after the first torch import) and split back into cells at marker comments.

IPython syntax is not Python: line magics and shell escapes (`%time`, `!nvidia-smi`,
`x = !ls`, `obj?`) are masked with a placeholder statement so the cell parses, and put
back afterwards. Shell lines (`!...`, `%env`, `%%bash` cells) go through the same line
rewriter as .sh files; `%time stmt` keeps `stmt` migrated; anything else that mentions
CUDA is reported (NPU005), never silently copied.

The JSON is never re-serialised: only the string tokens of changed source lines are
replaced (array separators and indentation copied from their neighbours), and the result
is loaded again and compared with the original document, source aside.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePath

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.notebook.ipython import PYTHON_CELL_MAGICS, SHELL_CELL_MAGICS, Magic, mask, unmask
from titan_doctor.migrate.notebook.nbjson import (
    Cell,
    NotebookError,
    OutputInvalid,
    escapes_non_ascii,
    patch,
    read_cells,
    split_lines,
    verify,
)
from titan_doctor.migrate.python.facts import Place
from titan_doctor.migrate.python.pyfile import migrate_python
from titan_doctor.migrate.rules.kinds.add_import import ALWAYS, SCRIPTS
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import visible_devices_set
from titan_doctor.migrate.suppress import codes_on, silences
from titan_doctor.migrate.text.formats import is_text_file
from titan_doctor.migrate.text.lines import rewrite_line

NOT_MIGRATED = "NPU005"

__all__ = ["NotebookError", "OutputInvalid", "migrate_notebook"]


@dataclass
class Unit:
    """A piece of one cell that is migrated: the namespace's Python, a separate file
    (%%writefile x.py) or shell lines. `first` is the cell line (1-based) it starts at."""

    cell: Cell
    first: int
    lines: list[str]
    magics: dict[int, Magic] = field(default_factory=dict)


def _kernel_language(doc: dict) -> str:
    meta = doc.get("metadata") or {}
    for value in ((meta.get("kernelspec") or {}).get("language"), (meta.get("language_info") or {}).get("name")):
        if isinstance(value, str) and value:
            return value.lower()
    return "python"


def migrate_notebook(
    data: bytes, rules: RuleSet, path: str, suppressed: list[Finding] | None = None, place: Place | None = None
) -> tuple[bytes, list[Finding]]:
    """(new bytes, findings) for one .ipynb. A cell that does not parse is a finding;
    NotebookError (not a notebook) and OutputInvalid (our result would not be the same
    document) are raised for the engine to report. Findings silenced by
    `# titan-doctor: ignore` (Python or shell lines) go to `suppressed`."""
    bom = data.startswith(b"\xef\xbb\xbf")
    raw = data.decode("utf-8-sig")
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise NotebookError(f"not valid JSON: {e.msg}", e.lineno, e.colno) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("cells", []), list):
        raise NotebookError('not a Jupyter notebook (no top-level "cells" list)')
    nb = _Notebook(raw, rules, path, suppressed, place)
    version = doc.get("nbformat", 4)
    if (isinstance(version, int) and version < 4) or "cells" not in doc:
        nb.report(
            None,
            1,
            1,
            "nbformat 3 notebook (worksheets): not migrated",
            "upgrade it first: jupyter nbconvert --to notebook --nbformat 4 --inplace FILE",
            needs_marker=raw,
        )
        return data, nb.findings
    cells = read_cells(raw)
    code = [c for c in cells if c.cell_type == "code"]
    language = _kernel_language(doc)
    if language not in ("python", "python3", "ipython", "ipython3"):
        nb.report(
            None,
            1,
            1,
            f"notebook kernel language is {language!r}: code cells not migrated",
            "migrate the code by hand",
            needs_marker="".join(c.source for c in code),
        )
        return data, nb.findings

    shared: list[Unit] = []
    for cell in code:
        nb.plan(cell, shared)
    nb.run_shared(shared)
    new_sources = nb.new_sources
    if not new_sources:
        return data, nb.findings
    new_raw = patch(raw, cells, new_sources)
    verify(doc, new_raw, cells, new_sources)
    return (b"\xef\xbb\xbf" if bom else b"") + new_raw.encode("utf-8"), nb.findings


class _Notebook:
    """Per-notebook state: findings in file coordinates and the cells' new lines."""

    def __init__(
        self, raw: str, rules: RuleSet, path: str, suppressed: list[Finding] | None = None, place: Place | None = None
    ) -> None:
        place = place or Place()
        # a notebook is a program: its namespace gets `import torch_npu` unless told never
        self.module_place = place
        self.program = replace(place, torch_npu_import=ALWAYS) if place.torch_npu_import == SCRIPTS else place
        self.raw, self.rules, self.path = raw, rules, path
        self.suppressed = suppressed if suppressed is not None else []
        self.token = "titan-doctor-" + hashlib.sha1(raw.encode("utf-8")).hexdigest()[:12]
        self.findings: list[Finding] = []
        self._lines: dict[int, list[str]] = {}  # cell number -> its lines, as edited
        self._cells: dict[int, Cell] = {}
        self._ascii = escapes_non_ascii(raw)
        self._visible = visible_devices_set(raw)  # %env ZE_AFFINITY_MASK beside CUDA's
        self._newlines = [m.start() for m in re.finditer("\n", raw)]

    @property
    def new_sources(self) -> dict[int, str]:
        """cell number -> new source, for the cells that changed."""
        out = {}
        for number, lines in self._lines.items():
            new = "".join(lines)
            if new != self._cells[number].source:
                out[number] = new
        return out

    # positions ---------------------------------------------------------------------------
    def where(self, cell: Cell | None, line: int, col: int) -> tuple[int, int]:
        """(file line, file column) of cell line/column (1-based) inside the JSON text."""
        if cell is None or not cell.pieces:
            return 1, 1
        if cell.is_list:
            k = min(max(line, 1), len(cell.pieces)) - 1
            before = cell.lines[k][: col - 1] if line - 1 == k else ""
        else:
            k = 0
            lines = split_lines(cell.lines[0]) or [""]
            row = min(max(line, 1), len(lines)) - 1
            before = "".join(lines[:row]) + lines[row][: col - 1]
        offset = cell.pieces[k][0] + len(json.dumps(before, ensure_ascii=self._ascii)) - 1
        row = bisect.bisect_left(self._newlines, offset)
        start = self._newlines[row - 1] + 1 if row else 0
        return row + 1, offset - start + 1

    def place(self, f: Finding, cell: Cell, line: int, col: int) -> Finding:
        fline, fcol = self.where(cell, line, col)
        return replace(
            f,
            path=self.path,
            line=fline,
            col=fcol,
            message=f"cell {cell.number}: {f.message}",
            data={**f.data, "cell": cell.number, "cell_line": line, "cell_col": col},
        )

    def report(
        self,
        cell: Cell | None,
        line: int,
        col: int,
        message: str,
        fix: str,
        needs_marker: str | None = None,
        status: Status = Status.MANUAL,
        code: str = NOT_MIGRATED,
    ) -> None:
        """A finding of our own; with `needs_marker`, only if that text could match a rule."""
        if needs_marker is not None and not self.rules.mentions(needs_marker.encode()):
            return
        f = Finding(code=code, status=status, message=message, fix=fix)
        if cell is None:
            self.findings.append(replace(f, path=self.path, line=1, col=1))
        else:
            self.findings.append(self.place(f, cell, line, col))

    # edits ---------------------------------------------------------------------------------
    def _edit_line(self, cell: Cell, line: int, new: str) -> None:
        self._lines.setdefault(cell.number, split_lines(cell.source))[line - 1] = new

    def _replace_from(self, cell: Cell, first: int, body: str) -> None:
        lines = self._lines.setdefault(cell.number, split_lines(cell.source))
        lines[first - 1 :] = split_lines(body)

    # planning ------------------------------------------------------------------------------
    def plan(self, cell: Cell, shared: list[Unit]) -> None:
        """Decide how each part of a code cell is migrated; run what runs alone."""
        self._cells[cell.number] = cell
        lines = split_lines(cell.source)
        if not lines:
            return
        head = lines[0].strip()
        if not head.startswith("%%"):
            self._add_python(cell, 1, lines, shared)
            return
        name, _, rest = head[2:].partition(" ")
        args = rest.split()
        if name in PYTHON_CELL_MAGICS:
            self._add_python(cell, 2, lines[1:], shared)
        elif name in SHELL_CELL_MAGICS or (
            name == "script" and args and PurePath(args[0]).name in ("bash", "sh", "zsh")
        ):
            self._shell(cell, 2, lines[1:])
        elif name in ("writefile", "file") and [a for a in args if not a.startswith("-")]:
            target = PurePath([a for a in args if not a.startswith("-")][-1])
            if target.suffix == ".py":
                self._separate_python(cell, lines[1:], str(target))
            elif is_text_file(target):
                self._shell(cell, 2, lines[1:])
            else:
                self._other(cell, name, lines)
        else:
            self._other(cell, name, lines)

    def _other(self, cell: Cell, name: str, lines: list[str]) -> None:
        self.report(
            cell,
            1,
            1,
            f"%%{name} cell is not Python: not migrated",
            "migrate this cell by hand",
            needs_marker="".join(lines[1:]),
        )

    def _shell(self, cell: Cell, first: int, lines: list[str]) -> None:
        """Shell lines (a %%bash cell, a %%writefile of a script): the .sh line rewriter."""
        for k, line in enumerate(lines):
            self._rewrite_magic_line(cell, first + k, line)

    def _rewrite_magic_line(self, cell: Cell, cell_line: int, line: str) -> str:
        found: list[Finding] = []
        new = rewrite_line(line, self.rules, self.path, cell_line, found, self.suppressed, self._visible)
        for f in found:
            self.findings.append(self.place(f, cell, cell_line, f.col or 1))
        if new != line:
            self._edit_line(cell, cell_line, new)
        return new if found else line

    def _add_python(self, cell: Cell, first: int, lines: list[str], shared: list[Unit]) -> None:
        masked, magics = mask(lines, self.token)
        for i, magic in list(magics.items()):
            if magic.prefix:
                continue
            seen = len(self.findings) + len(self.suppressed)
            new = self._rewrite_magic_line(cell, first + i, magic.original)
            if len(self.findings) + len(self.suppressed) == seen and not silences(
                codes_on(magic.original), NOT_MIGRATED
            ):
                self.report(
                    cell,
                    first + i,
                    1,
                    "IPython magic line not migrated",
                    "migrate this line by hand",
                    needs_marker=magic.original,
                )
            magics[i] = Magic(new)
        shared.append(Unit(cell, first, masked, magics))

    def _separate_python(self, cell: Cell, lines: list[str], name: str) -> None:
        """%%writefile x.py: its own module (own imports), not the notebook's namespace."""
        try:
            new, found = migrate_python(
                "".join(lines).encode("utf-8"), self.rules, self.path, self.suppressed, self.module_place
            )
        except cst.ParserSyntaxError as e:
            self.report(
                cell,
                1 + e.raw_line,
                e.raw_column + 1,
                f"%%writefile {name} does not parse, left as is: {e.message}",
                "",
                status=Status.FAIL,
                code="NPU001",
            )
            return
        unit = Unit(cell, 2, lines)
        for f in found:
            self._collect(unit, f, f.line or 1)
        self._replace_from(cell, 2, new.decode("utf-8"))

    def run_shared(self, units: list[Unit]) -> None:
        """All namespace cells as one module; cells that do not parse are reported and
        left out (the rest still share their imports)."""
        units = [u for u in units if u.lines]
        while units:
            marker = {u.cell.number: f"# {self.token}-cell-{u.cell.number}\n" for u in units}
            parts, starts, line = [], [], 1
            for u in units:
                body = "".join(u.lines)
                parts += [marker[u.cell.number], body if body.endswith("\n") else body + "\n"]
                starts.append(line + 1)
                line += 1 + len(u.lines)
            text = "".join(parts)
            try:
                new, found = migrate_python(text.encode("utf-8"), self.rules, self.path, self.suppressed, self.program)
            except cst.ParserSyntaxError as e:
                bad = self._broken(units)
                if not bad:  # only the join fails to parse: blame the cell the parser names
                    bad = [(units[max(bisect.bisect_right(starts, e.raw_line) - 1, 0)], e)]
                for u, err in bad:
                    self.report(
                        u.cell,
                        u.first + err.raw_line - 1,
                        err.raw_column + 1,
                        f"does not parse, left as is: {err.message}",
                        "",
                        status=Status.FAIL,
                        code="NPU001",
                    )
                units = [u for u in units if all(u is not b for b, _ in bad)]
                continue
            self._split_back(units, starts, marker, new.decode("utf-8"), found)
            return

    @staticmethod
    def _broken(units: list[Unit]) -> list[tuple[Unit, cst.ParserSyntaxError]]:
        bad = []
        for u in units:
            try:
                cst.parse_module("".join(u.lines))
            except cst.ParserSyntaxError as e:
                bad.append((u, e))
        return bad

    def _split_back(
        self, units: list[Unit], starts: list[int], marker: dict[int, str], new_text: str, found: list[Finding]
    ) -> None:
        for f in found:
            k = max(bisect.bisect_right(starts, f.line or 1) - 1, 0)
            u = units[k]
            self._collect(u, f, min(max((f.line or 1) - starts[k] + 1, 1), len(u.lines)))
        by_marker = {m: n for n, m in marker.items()}
        pieces: dict[int, list[str]] = {u.cell.number: [] for u in units}
        current, lead = None, []
        for line in split_lines(new_text):
            if line in by_marker:
                current = by_marker[line]
            elif current is None:
                lead.append(line)  # an import inserted before the first cell's marker
            else:
                pieces[current].append(line)
        pieces[units[0].cell.number][:0] = lead
        for u in units:
            body = "".join(pieces[u.cell.number])
            if not "".join(u.lines).endswith("\n") and body.endswith("\n"):
                body = body[:-1]
            restored = unmask(body, u.magics, self.token)
            if restored is None:
                raise OutputInvalid(f"cell {u.cell.number}: a masked IPython line was lost")
            self._replace_from(u.cell, u.first, restored)

    def _collect(self, unit: Unit, f: Finding, unit_line: int) -> None:
        """A finding at `unit_line` of a unit, placed in the file (magic prefixes added back)."""
        magic = unit.magics.get(unit_line - 1)
        col = (f.col or 1) + (magic.shift if magic is not None else 0)
        self.findings.append(self.place(f, unit.cell, unit.first + unit_line - 1, col))
