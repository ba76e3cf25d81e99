"""`titan-doctor migrate`: the click command. Parses options, picks the write mode,
prints the report; the work itself is in engine.py."""
from __future__ import annotations

import difflib
import shutil
import sys
from pathlib import Path

import click

from titan_doctor import __version__
from titan_doctor.findings import (EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, Finding, count_table,
                                   exit_code, render_lines, to_json, to_sarif)

PROGRESS_MIN_FILES = 100


class MigrateError(Exception):
    """A user mistake or refused action: one line, exit 2."""


def _codes(values: tuple[str, ...]) -> list[str]:
    return [c.strip() for v in values for c in v.split(",") if c.strip()]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file would change.")
@click.option("--output", "-o", type=click.Path(path_type=Path), metavar="DIR",
              help="Write a migrated copy of the tree to DIR instead of rewriting in place.")
@click.option("--allow-dirty", is_flag=True,
              help="Rewrite files that have uncommitted git changes.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Files processed in parallel.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif"]), default="text",
              show_default=True, help="Report format.")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Skip paths (relative to each PATH) matching GLOB; repeatable.")
@click.option("--select", multiple=True, help="Only these rule codes or prefixes (NPU1,NPU301).")
@click.option("--ignore", multiple=True, help="Skip these rule codes or prefixes.")
@click.option("--rules", "rule_files", multiple=True, type=click.Path(path_type=Path), metavar="FILE",
              help="Extra rules TOML (same schema as rules/migrate/*.toml); repeatable.")
@click.option("--list-rules", is_flag=True, help="Print the rule codes and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks for tool errors.")
def migrate(paths, show_diff, check, output, allow_dirty, jobs, fmt, exclude, select, ignore,
            rule_files, list_rules, debug):
    """Rewrite CUDA PyTorch code in PATH... (files or folders) for Ascend NPU.

    \b
    Modes:
      (default)      rewrite files in place (refused for files with uncommitted
                     git changes unless --allow-dirty)
      --diff         print a unified diff, write nothing
      --check        write nothing; for CI and pre-commit
      --output DIR   write a migrated copy of the tree to DIR

    Every change is reported as `path:line:col CODE [fixed] message`; what still needs a
    person as `[manual]`, with the NPU alternative. Files that do not parse are left
    untouched; every output is re-parsed before it is written.

    \b
    Exit codes:
      0  nothing left to do
      1  findings remain: manual items, files that failed, or (with --check / --diff)
         files that would change
      2  usage or tool error (bad path, bad rules file, dirty files refused)
    """
    try:
        code = _run(paths, show_diff, check, output, allow_dirty, jobs, fmt, exclude, select,
                    ignore, rule_files, list_rules)
    except MigrateError as e:
        click.echo(f"titan-doctor migrate: error: {e}", err=True)
        code = EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - users see one line, --debug the traceback
        if debug:
            raise
        from titan_knowledge import KnowledgeError
        if isinstance(e, KnowledgeError):
            click.echo(f"titan-doctor migrate: error: {e}", err=True)
        else:
            click.echo(f"titan-doctor migrate: internal error: {type(e).__name__}: {e} "
                       "(rerun with --debug for the traceback)", err=True)
        code = EXIT_USAGE
    sys.exit(code)


def _run(paths, show_diff, check, output, allow_dirty, jobs, fmt, exclude, select, ignore,
         rule_files, list_rules) -> int:
    from titan_doctor.migrate import engine
    from titan_doctor.migrate.rules import load_rules

    for p in [*paths, *rule_files]:
        if not p.exists():
            raise MigrateError(f"{p}: no such file or directory")
    rules = load_rules(rule_files, _codes(select), _codes(ignore))
    if list_rules:
        for c, msg in sorted(rules.help.items()):
            click.echo(f"{c}  {msg}")
        return EXIT_OK
    if not paths:
        raise MigrateError("give at least one PATH (file or folder) to migrate")
    if output is not None and (show_diff or check):
        raise MigrateError("--output cannot be combined with --diff or --check")
    if output is not None and any(output.resolve() == p.resolve() or
                                  p.resolve() in output.resolve().parents for p in paths):
        raise MigrateError(f"--output {output} must be outside the input paths")

    files = [(p, _shown(p)) for p in engine.discover(paths, rules, exclude)]
    results = _with_progress(engine, files, rules, jobs, fmt)
    changed = [r for r in results if r.state == engine.CHANGED]

    writes = not (show_diff or check)
    if writes and output is None and changed and not allow_dirty:
        dirty = engine.dirty_files([r.path for r in changed])
        if dirty:
            names = ", ".join(_shown(p) for p in dirty[:5]) + (" ..." if len(dirty) > 5 else "")
            raise MigrateError(f"refusing to rewrite {len(dirty)} file(s) with uncommitted changes "
                               f"({names}); commit or stash them, or pass --allow-dirty")
    try:
        if output is not None:
            _write_copy(engine, paths, results, output)
        elif writes:
            for r in changed:
                engine.write_atomic(r.path, r.new)
    except OSError as e:
        raise MigrateError(f"cannot write {e.filename or output}: {e.strerror}") from e

    # positions are the input file's lines, in every mode
    findings = sorted((f for r in results for f in r.findings),
                      key=lambda f: (f.path or "", f.line or 0, f.col or 0, f.code))
    diffs = [_diff(r) for r in changed] if show_diff else []
    _report(fmt, findings, results, engine, diffs, writes, output, rules.help)
    status = exit_code(findings)
    if (check or show_diff) and changed:
        status = EXIT_FINDINGS
    return status


def _shown(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _with_progress(engine, files, rules, jobs, fmt):
    if fmt == "text" and len(files) >= PROGRESS_MIN_FILES and sys.stderr.isatty():
        with click.progressbar(length=len(files), label="migrating", file=sys.stderr) as bar:
            return engine.run(files, rules, jobs, bar.update)
    return engine.run(files, rules, jobs)


def _write_copy(engine, roots, results, output: Path) -> None:
    """Every file under the roots copied to `output`, migrated files with their new text."""
    new = {r.path.resolve(): r.new for r in results if r.state == engine.CHANGED}
    for root in roots:
        base = output / root.name if len(roots) > 1 else output
        sources = [root] if root.is_file() else [
            p for p in root.rglob("*")
            if p.is_file() and not any(part in engine.SKIP_DIRS for part in p.relative_to(root).parts)]
        for src in sources:
            dst = base / (src.name if root.is_file() else src.relative_to(root))
            dst.parent.mkdir(parents=True, exist_ok=True)
            data = new.get(src.resolve())
            if data is None:
                shutil.copy2(src, dst)
            else:
                shutil.copymode(src, dst) if dst.exists() else None
                dst.write_bytes(data)
                shutil.copymode(src, dst)


def _diff(result) -> str:
    name = _shown(result.path)
    try:
        a = result.original.decode("utf-8").splitlines(keepends=True)
        b = result.new.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return f"Binary files a/{name} and b/{name} differ\n"
    return "".join(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}"))


def _file_counts(engine, results) -> dict[str, int]:
    states = (engine.CHANGED, engine.UNCHANGED, engine.SKIPPED, engine.FAILED)
    return {s: sum(r.state == s for r in results) for s in states}


def _report(fmt, findings: list[Finding], results, engine, diffs, writes, output, helps) -> None:
    counts = _file_counts(engine, results)
    if fmt == "json":
        click.echo(to_json(findings, files=counts,
                           changed=[_shown(r.path) for r in results if r.state == engine.CHANGED],
                           diff="".join(diffs) if diffs else None))
        return
    if fmt == "sarif":
        click.echo(to_sarif(findings, tool="titan-doctor migrate", version=__version__,
                            rule_help=helps))
        return
    from tabulate import tabulate

    for d in diffs:
        click.echo(d, nl=False)
    if findings:
        click.echo(render_lines(findings))
        click.echo()
    verb = "written to " + str(output) if output else ("rewritten" if writes else "would change")
    click.echo(tabulate([[f"changed ({verb})", counts[engine.CHANGED]],
                         ["unchanged", counts[engine.UNCHANGED]],
                         ["skipped", counts[engine.SKIPPED]],
                         ["failed", counts[engine.FAILED]]], headers=["files", "count"]))
    if findings:
        click.echo()
        click.echo(count_table(findings))
