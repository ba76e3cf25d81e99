"""Runs the migration over a tree: discovery, the cheap pre-filter, parsing, the
transformer, re-parse of every output, parallel workers, and the write modes.

Each file ends in exactly one state: changed, unchanged, skipped (not a file we handle,
or not UTF-8 text) or failed (does not parse, or our output would not parse: left as is).
"""
from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import os
import subprocess
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import libcst as cst

from titan_doctor.findings import Finding, Status
from titan_doctor.migrate.pyfile import LINE_IN_OUTPUT, migrate_python, parse_error
from titan_doctor.migrate.rules import RuleSet, may_match
from titan_doctor.migrate.textfiles import is_text_file, migrate_text

SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".tox",
             ".mypy_cache", ".pytest_cache", "site-packages", "build", "dist", ".eggs"}
PARSE_FAILED = "NPU001"
OUTPUT_INVALID = "NPU002"
TOOL_ERROR = "NPU003"

CHANGED, UNCHANGED, SKIPPED, FAILED = "changed", "unchanged", "skipped", "failed"


@dataclass
class FileResult:
    path: Path
    state: str
    original: bytes = b""
    new: bytes = b""
    findings: list[Finding] = field(default_factory=list)
    suppressed: int = 0   # findings silenced by `# titan-doctor: ignore` comments


def discover(paths: Iterable[Path], rules: RuleSet, exclude: Iterable[str] = ()) -> Iterator[Path]:
    """Python, text and CUDA source files under `paths`, sorted. Skips tool and hidden
    folders (.git, .github, venv, build, ...) and paths matching an `exclude` glob."""
    exclude = list(exclude)

    def excluded(rel: str) -> bool:
        return any(fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat.rstrip("/") + "/*")
                   for pat in exclude)

    for root in paths:
        if root.is_file():
            if not excluded(root.as_posix()):
                yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS
                                 and not d.startswith(".") and not d.endswith(".egg-info"))
            for name in sorted(filenames):
                p = Path(dirpath, name)
                if excluded(p.relative_to(root).as_posix()):
                    continue
                if p.suffix == ".py" or is_text_file(p) or p.suffix in rules.files:
                    yield p


def process_file(path: Path, rules: RuleSet, shown: str | None = None) -> FileResult:
    """Migrate one file in memory; never raises for the file's own problems."""
    shown = shown or str(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        return FileResult(path, FAILED, findings=[_fail(PARSE_FAILED, f"cannot read: {e.strerror}", shown)])
    rule = rules.files.get(path.suffix)
    if rule is not None:
        return FileResult(path, UNCHANGED, data, data, [Finding(
            code=rule.code, status=Status.MANUAL, message=rule.message,
            fix=rule.fix, path=shown, line=1, col=1)])
    is_py = path.suffix == ".py"
    if not is_py and not is_text_file(path):
        return FileResult(path, SKIPPED, data, data)
    if not may_match(rules, data):
        return FileResult(path, UNCHANGED, data, data)
    suppressed: list[Finding] = []
    try:
        if is_py:
            new, findings = migrate_python(data, rules, shown, suppressed)
        else:
            new, findings = migrate_text(data, rules, shown)
    except cst.ParserSyntaxError as e:
        message, line, col = parse_error(data, e)
        return FileResult(path, FAILED, data, data, [_fail(
            PARSE_FAILED, f"does not parse, left untouched: {message}", shown, line, col)])
    except UnicodeDecodeError:
        return FileResult(path, SKIPPED, data, data)
    except (Exception, RecursionError) as e:  # noqa: BLE001 - one odd file must not stop a run
        return FileResult(path, FAILED, data, data, [_fail(
            TOOL_ERROR, f"left untouched: migrate failed on this file ({type(e).__name__}: {e}); "
            "please report it", shown)])
    if new == data:
        return FileResult(path, UNCHANGED, data, data, findings, len(suppressed))
    if is_py:
        try:
            cst.parse_module(new)
        except cst.ParserSyntaxError as e:
            return FileResult(path, FAILED, data, data, [_fail(
                OUTPUT_INVALID, f"migrated code would not parse ({e.message}); file left untouched", shown)])
    return FileResult(path, CHANGED, data, new, findings, len(suppressed))


def as_written(result: FileResult) -> list[Finding]:
    """Findings with lines moved to where they are in the rewritten file (an inserted
    `import torch_npu` or a split import shifts what follows)."""
    if result.state != CHANGED:
        return result.findings
    a = result.original.splitlines()
    b = result.new.splitlines()
    where: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k in range(i2 - i1):
            where[i1 + k + 1] = j1 + min(k, max(j2 - j1 - 1, 0)) + 1
    return [f if f.line is None or f.data.get(LINE_IN_OUTPUT) else
            dataclasses.replace(f, line=where.get(f.line, f.line)) for f in result.findings]


def _fail(code: str, message: str, shown: str, line: int | None = 1, col: int | None = 1) -> Finding:
    return Finding(code=code, status=Status.FAIL, message=message, path=shown, line=line, col=col)


_RULES: RuleSet | None = None


def _init_worker(rules: RuleSet) -> None:
    global _RULES
    _RULES = rules


def _work(item: tuple[Path, str]) -> FileResult:
    return process_file(item[0], _RULES, item[1])


def run(files: list[tuple[Path, str]], rules: RuleSet, jobs: int = 1,
        progress: Callable[[int], None] | None = None) -> list[FileResult]:
    """process_file over (path, shown name) pairs, in `jobs` processes, in input order."""
    results: list[FileResult] = []
    if jobs <= 1 or len(files) < 2:
        for item in files:
            results.append(process_file(item[0], rules, item[1]))
            if progress:
                progress(1)
        return results
    chunk = max(1, min(8, len(files) // (jobs * 8)))  # small: matching files cluster
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(rules,)) as pool:
        for res in pool.map(_work, files, chunksize=chunk):
            results.append(res)
            if progress:
                progress(1)
    return results


def dirty_files(paths: list[Path]) -> list[Path]:
    """Those of `paths` with uncommitted changes in their git working tree ([] outside git)."""
    dirty: list[Path] = []
    by_dir: dict[Path, list[Path]] = {}
    for p in paths:
        by_dir.setdefault(p.resolve().parent, []).append(p)
    for folder, group in by_dir.items():
        try:
            out = subprocess.run(
                ["git", "status", "--porcelain", "--", *[str(p.resolve()) for p in group]],
                cwd=folder, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode != 0:
            continue  # not a git tree
        if out.stdout.strip():
            changed = {ln[3:].strip().strip('"') for ln in out.stdout.splitlines()}
            top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder,
                                 capture_output=True, text=True).stdout.strip()
            for p in group:
                rel = os.path.relpath(p.resolve(), top) if top else p.name
                if rel in changed or any(c.endswith("/") and rel.startswith(c) for c in changed):
                    dirty.append(p)
    return dirty


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same folder, then rename over the original, keeping its mode."""
    mode = path.stat().st_mode if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
