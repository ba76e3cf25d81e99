"""Runs the migration over files: dispatch by kind of file, the cheap pre-filter, parsing,
the rewriter (python/, text/, notebook/), re-parse of every output, parallel workers.

Two passes over the Python files: first each is scanned for what the others need to know
(python/facts.py: its CUDA-only functions, the device values it dispatches on), then each
is migrated with the merged facts of the tree. A Python file no rule can match is still
parsed by the stdlib parser, so one that does not parse is reported like any other.

Each file ends in exactly one state: changed, unchanged or failed (does not parse or
decode, or our output would not parse: left as is). Which files are read, and what was
left out and why, is discovery.py; writing them is writes.py.

Line numbers: every finding points into the INPUT file as it was read, in every mode
(--check, --diff, in place, --output), so pre-commit, CI and an editor agree.
"""

from __future__ import annotations

import ast
import codecs
import io
import tokenize
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.engine import filekinds as kinds
from titan_doctor.migrate.notebook.rewrite import NotebookError, OutputInvalid, migrate_notebook
from titan_doctor.migrate.python.backends import device_module
from titan_doctor.migrate.python.facts import FileFacts, Place, TreeFacts, file_facts
from titan_doctor.migrate.python.pyfile import migrate_python, parse_error
from titan_doctor.migrate.python.requirements import is_setup_py
from titan_doctor.migrate.rules.kind import SCRIPT_LINES
from titan_doctor.migrate.rules.kinds.add_import import SCRIPTS
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import LITERALS
from titan_doctor.migrate.text.formats import reparse_error
from titan_doctor.migrate.text.lines import migrate_text

PARSE_FAILED = "NPU001"
OUTPUT_INVALID = "NPU002"
TOOL_ERROR = "NPU003"
UNDECODABLE = "NPU004"

CHANGED, UNCHANGED, FAILED = "changed", "unchanged", "failed"
STATES = (CHANGED, UNCHANGED, FAILED)

_WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass
class FileResult:
    path: Path
    state: str
    original: bytes = b""
    new: bytes = b""
    findings: list[Finding] = field(default_factory=list)
    suppressed: int = 0  # findings silenced by `# titan-doctor: ignore` comments
    kept: int = 0  # rewrites left undone: the code there already runs beyond CUDA (NPU114)


def _decode_problem(data: bytes, kind: str, wide: bool) -> tuple[str, int, int] | None:
    """(message, line, col) when a file of `kind` cannot be read as text; else None.
    Python honours its coding cookie; everything else must be UTF-8."""
    if wide:
        return "not UTF-8 text (UTF-16/32 or binary): not migrated; convert it to UTF-8", 1, 1
    encoding = "utf-8"
    if kind == kinds.PYTHON:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as e:
            return f"cannot decode: {e}; not migrated", 1, 1
    try:
        data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return (
            (
                f"cannot decode as {encoding} (byte 0x{data[e.start]:02x}): not migrated; "
                f"convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
            ),
            line,
            col,
        )
    return None


def package_of(path: Path) -> tuple[bool, str | None]:
    """(is it a module of a package, the top-level package it belongs to): a folder with
    __init__.py is a package; the topmost such folder names it."""
    parent, top = path.parent, None
    while (parent / "__init__.py").is_file():
        top = parent.name
        if parent.parent == parent:
            break
        parent = parent.parent
    return top is not None, top


def process_file(
    path: Path,
    rules: RuleSet,
    shown: str | None = None,
    facts: TreeFacts | None = None,
    torch_npu_import: str = SCRIPTS,
) -> FileResult:
    """Migrate one file in memory; never raises for the file's own problems. `facts`: what
    the tree's other modules say (python/facts.py); `torch_npu_import`: the add_import policy."""
    shown = shown or str(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        return FileResult(path, FAILED, findings=[_fail(TOOL_ERROR, f"cannot read: {e.strerror}", shown)])
    kind = kinds.kind_of(path, rules)
    if kind == kinds.REPORT:
        rule = rules.files[path.suffix]
        return FileResult(
            path,
            UNCHANGED,
            data,
            data,
            [
                Finding(
                    code=rule.code, status=Status.MANUAL, message=rule.message, fix=rule.fix, path=shown, line=1, col=1
                )
            ],
        )
    if kind is None:
        return FileResult(path, UNCHANGED, data, data)

    def untouched(code: str, message: str, line: int | None = 1, col: int | None = 1) -> FileResult:
        """The file as it was, with the one finding that says why it was not migrated."""
        return FileResult(path, FAILED, data, data, [_fail(code, message, shown, line, col)])

    # Rule markers are ASCII, so an ASCII-compatible file without them needs no decoding;
    # a wide (UTF-16/32) or binary file would hide them, so it is reported unread.
    wide = data.startswith(_WIDE_BOMS) or b"\0" in data
    wanted = rules.may_match(data, kinds.REWRITTEN_BY[kind]) or (
        kind == kinds.PYTHON and is_setup_py(shown) and rules.may_match(data, (SCRIPT_LINES,))
    )
    if not wide and not wanted:
        if kind == kinds.PYTHON:
            broken = _syntax_error(data)
            if broken is not None:
                message, line, col = broken
                return untouched(PARSE_FAILED, f"does not parse, left untouched: {message}", line, col)
        return FileResult(path, UNCHANGED, data, data)
    problem = _decode_problem(data, kind, wide)
    if problem is not None:
        message, line, col = problem
        return untouched(UNDECODABLE, message, line, col)
    suppressed: list[Finding] = []
    kept: list[int] = []
    in_package, _ = package_of(path) if kind == kinds.PYTHON else (False, None)
    siblings = _siblings(path) if kind == kinds.PYTHON else ()
    place = Place(facts, in_package, torch_npu_import, siblings)
    try:
        new, findings = _migrate(kind, data, rules, shown, suppressed, place, kept)
    except cst.ParserSyntaxError as e:
        message, line, col = parse_error(data, e)
        return untouched(PARSE_FAILED, f"does not parse, left untouched: {message}", line, col)
    except NotebookError as e:
        return untouched(PARSE_FAILED, f"{e}, left untouched", e.line, e.col)
    except OutputInvalid as e:
        return untouched(OUTPUT_INVALID, f"migrated notebook would not be the same document ({e}); file left untouched")
    except (Exception, RecursionError) as e:  # noqa: BLE001 - one odd file must not stop a run
        return untouched(
            TOOL_ERROR, f"left untouched: migrate failed on this file ({type(e).__name__}: {e}); please report it"
        )
    if new == data:
        return FileResult(path, UNCHANGED, data, data, findings, len(suppressed), sum(kept))
    invalid = _output_problem(kind, path, data, new)
    if invalid is not None:
        return untouched(OUTPUT_INVALID, invalid)
    return FileResult(path, CHANGED, data, new, findings, len(suppressed), sum(kept))


def _siblings(path: Path) -> tuple[str, ...]:
    """The other devices of a per-device module set `path` is CUDA's one of (backends.py)."""
    if LITERALS["device"].cuda not in path.stem.lower():
        return ()
    try:
        names = [p.stem for p in path.parent.iterdir() if p.suffix == ".py" and p != path]
    except OSError:
        return ()
    return device_module(path.stem, names)


def _syntax_error(data: bytes) -> tuple[str, int, int] | None:
    """(message, line, column) when a Python file no rule matches does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<file>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as e:
        return e.msg, e.lineno or 1, max(e.offset or 1, 1)
    except (ValueError, UnicodeDecodeError):  # null bytes, undecodable: reported as such elsewhere
        return None
    return None


def _migrate(
    kind: str, data: bytes, rules: RuleSet, shown: str, suppressed: list[Finding], place: Place, kept: list[int]
) -> tuple[bytes, list[Finding]]:
    if kind == kinds.PYTHON:
        return migrate_python(data, rules, shown, suppressed, place, kept)
    if kind == kinds.NOTEBOOK:
        return migrate_notebook(data, rules, shown, suppressed=suppressed, place=place)
    return migrate_text(data, rules, shown, suppressed)


def _output_problem(kind: str, path: Path, old: bytes, new: bytes) -> str | None:
    """Why the rewritten bytes must not be written (they would not parse), else None."""
    if kind == kinds.PYTHON:
        # CPython's own parser (the one that will run the file; a fifth of libcst's cost);
        # libcst's where CPython cannot read the input either (syntax newer than it)
        if _syntax_error(new) is None:
            return None
        if _syntax_error(old) is None:
            message, line, _ = _syntax_error(new)
            return f"migrated code would not parse ({message}, line {line}); file left untouched"
        try:
            cst.parse_module(new)
        except cst.ParserSyntaxError as e:
            return f"migrated code would not parse ({e.message}); file left untouched"
        return None
    if kind == kinds.TEXT:
        error = reparse_error(path, old, new)
        if error is not None:
            return f"migrated file would not parse as {path.suffix[1:].upper()} ({error}); file left untouched"
    return None


def _fail(code: str, message: str, shown: str, line: int | None = 1, col: int | None = 1) -> Finding:
    return Finding(code=code, status=Status.FAIL, message=message, path=shown, line=line, col=col)


_RULES: RuleSet | None = None


def _init_worker(rules: RuleSet) -> None:
    global _RULES
    _RULES = rules


def _work(item: tuple[Path, str, TreeFacts | None, str]) -> FileResult:
    return process_file(item[0], _RULES, item[1], item[2], item[3])


def scan_facts(path: Path, rules: RuleSet) -> FileFacts | None:
    """The first pass: what one Python file tells the others (None: nothing, or unreadable)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    in_package, package = package_of(path)
    return file_facts(rules, data, in_package, package)


def _facts_work(path: Path) -> FileFacts | None:
    return scan_facts(path, _RULES)


def run(
    files: list[tuple[Path, str]],
    rules: RuleSet,
    jobs: int = 1,
    progress: Callable[[int], None] | None = None,
    torch_npu_import: str = SCRIPTS,
) -> list[FileResult]:
    """process_file over (path, shown name) pairs, in `jobs` processes, in input order,
    after the first pass has gathered the tree's facts from its Python files."""
    results: list[FileResult] = []
    python = [p for p, _ in files if kinds.kind_of(p, rules) == kinds.PYTHON]
    if jobs <= 1 or len(files) < 2:
        facts = TreeFacts.merge(scan_facts(p, rules) for p in python) if len(python) > 1 else None
        for item in files:
            results.append(process_file(item[0], rules, item[1], facts, torch_npu_import))
            if progress:
                progress(1)
        return results
    chunk = max(1, min(8, len(files) // (jobs * 8)))  # small: matching files cluster
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(rules,)) as pool:
        facts = None
        if len(python) > 1:
            facts = TreeFacts.merge(pool.map(_facts_work, python, chunksize=max(1, min(32, len(python) // (jobs * 4)))))
        items = [(p, shown, facts, torch_npu_import) for p, shown in files]
        for res in pool.map(_work, items, chunksize=chunk):
            results.append(res)
            if progress:
                progress(1)
    return results
