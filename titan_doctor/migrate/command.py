"""`titan-doctor migrate`: the click command. Parses options, picks the write mode,
prints the report; the work itself is in engine/ (discovery, runner, writes)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from titan_doctor import __version__
from titan_doctor.findings import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    Finding,
    count_table,
    exit_code,
    render_lines,
    to_json,
    to_sarif,
)

PROGRESS_MIN_FILES = 100
# rules/words.py's TARGETS, spelled here so that --help loads no rules (a test compares them)
TARGETS = ("npu", "portable")

# What --check exits 1 for, said once: --help, README and .pre-commit-hooks.yaml carry this
# sentence word for word (tests/migrate/test_cli.py compares them).
CHECK_EXIT_1 = (
    "--check exits 1 when a file would change, a [manual] finding remains, or a "
    "file could not be parsed or decoded. Suppressed lines do not count: a line "
    "with an inline `# titan-doctor: ignore[CODE]` comment (in Python, notebooks, "
    "shell and Slurm scripts, .env, YAML or TOML) is neither changed nor reported "
    "for CODE."
)


class MigrateError(Exception):
    """A user mistake or refused action: one line, exit 2."""


def _codes(values: tuple[str, ...]) -> list[str]:
    return [c.strip() for v in values for c in v.split(",") if c.strip()]


HELP = f"""Rewrite CUDA PyTorch code in PATH... (files or folders) for Ascend NPU, or
(--target portable) for any device.

\b
Modes:
  (default)      rewrite files in place; refused for files with uncommitted git
                 changes (--allow-dirty) and for files git ignores (--allow-ignored):
                 neither has a committed copy to go back to
  --diff         print a unified diff, write nothing
  --check        write nothing; for CI and pre-commit
  --output DIR   write a migrated copy of the tree to DIR

\b
Targets (--target):
  npu (default)  for Ascend NPU: torch.cuda.* -> torch.npu.*, "cuda" -> "npu",
                 nccl -> hccl, CUDA settings to their Ascend names, `import torch_npu`
                 where rewrites need it
  portable       device-generic PyTorch that runs unchanged on CUDA, NPU and CPU:
                 torch.cuda.X -> torch.accelerator.X where torch 2.13 has it,
                 torch.cuda.amp's autocast / GradScaler -> torch.autocast /
                 torch.amp.GradScaler with the device type, a bare "cuda" / "nccl"
                 given to a call -> the current accelerator's type / its default
                 backend (CPU / gloo without one); never adds `import torch_npu`.
                 Whatever has no device-generic form stays and is reported [manual]
                 (rules/migrate/portable.toml lists what is mapped)

\b
Files read: Python (.py), Jupyter notebooks (.ipynb: the code cells, IPython magics
masked; the JSON is otherwise kept byte for byte), shell and Slurm scripts (.sh .sbatch
.slurm), .env, YAML, TOML, JSON, .cfg/.ini, Dockerfiles and pip requirements files
(requirements*.txt, constraints*.txt: CUDA-only packages); .cu/.cuh are reported.
Folders are walked except what git ignores, .git, Python environments (pyvenv.cfg,
conda-meta/) and site-packages; the summary counts what was skipped and why. Symbolic
links are never followed out of the tree or replaced by files.

Every change is reported as `path:line:col CODE [fixed] message`; what still needs a
person as `[manual]`, with the NPU alternative. Line numbers are always those of the
input file as it was read, in every mode. Files that do not parse or decode are left
untouched and reported; every output is parsed again before it is written.

{CHECK_EXIT_1} Codes may be prefixes or lists (`ignore[NPU1,NPU301]`); the
comment without [CODE] silences every code on its line. The summary counts what was
suppressed.

\b
Exit codes:
  0  nothing left to do
  1  findings remain: a [manual] finding or a failed file; with --check or
     --diff also a file that would change
  2  usage or tool error (bad path, bad rules file, refused write)
"""


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, help=HELP)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a file would change or findings remain.")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Write a migrated copy of the tree to DIR instead of rewriting in place.",
)
@click.option("--allow-dirty", is_flag=True, help="Rewrite in place files that have uncommitted git changes.")
@click.option(
    "--allow-ignored",
    is_flag=True,
    help="Rewrite in place files that git ignores (ignored folders are not "
    "walked; this is for ignored files or folders you name): they have no "
    "committed copy to restore from.",
)
@click.option(
    "--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True, help="Files processed in parallel."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "sarif"]),
    default="text",
    show_default=True,
    help="Report format.",
)
@click.option(
    "--exclude", multiple=True, metavar="GLOB", help="Skip paths (relative to each PATH) matching GLOB; repeatable."
)
@click.option("--select", multiple=True, help="Only these rule codes or prefixes (NPU1,NPU301).")
@click.option("--ignore", multiple=True, help="Skip these rule codes or prefixes.")
@click.option(
    "--rules",
    "rule_files",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Extra rules TOML (same schema as rules/migrate/*.toml); repeatable.",
)
@click.option(
    "--import-torch-npu",
    "torch_npu_import",
    type=click.Choice(["scripts", "always", "never"]),
    default="scripts",
    show_default=True,
    help="Where `import torch_npu` is added when rewrites need it: scripts = programs only "
    '(a top-level `if __name__ == "__main__":` outside a package) and notebooks, since '
    "torch 2.5+ loads torch_npu by itself and a library that imports it no longer imports "
    "without it; always = every module that needs it; never.",
)
@click.option(
    "--target",
    type=click.Choice(TARGETS),
    default=TARGETS[0],
    show_default=True,
    help="npu: rewrite for Ascend NPU; portable: rewrite to device-generic PyTorch "
    "(torch.accelerator, torch.autocast) that runs on CUDA, NPU and CPU alike (see above).",
)
@click.option("--list-rules", is_flag=True, help="Print the rule codes and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks for tool errors.")
def migrate(
    paths,
    show_diff,
    check,
    output,
    allow_dirty,
    allow_ignored,
    jobs,
    fmt,
    exclude,
    select,
    ignore,
    rule_files,
    torch_npu_import,
    target,
    list_rules,
    debug,
):
    try:
        code = _run(
            paths,
            show_diff,
            check,
            output,
            allow_dirty,
            allow_ignored,
            jobs,
            fmt,
            exclude,
            select,
            ignore,
            rule_files,
            list_rules,
            torch_npu_import,
            target,
        )
    except MigrateError as e:
        click.echo(f"titan-doctor migrate: error: {e}", err=True)
        code = EXIT_USAGE
    except BrokenPipeError:
        raise  # `... | head` closed the pipe: click's own EPIPE handling exits quietly
    except Exception as e:  # noqa: BLE001 - users see one line, --debug the traceback
        if debug:
            raise
        from titan_knowledge import KnowledgeError

        if isinstance(e, KnowledgeError):  # one line per problem (a rules file may have many)
            for line in str(e).splitlines():
                click.echo(f"titan-doctor migrate: error: {line}", err=True)
        else:
            click.echo(
                f"titan-doctor migrate: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)",
                err=True,
            )
        code = EXIT_USAGE
    sys.exit(code)


def _run(
    paths,
    show_diff,
    check,
    output,
    allow_dirty,
    allow_ignored,
    jobs,
    fmt,
    exclude,
    select,
    ignore,
    rule_files,
    list_rules,
    torch_npu_import="scripts",
    target=TARGETS[0],
) -> int:
    from titan_doctor.migrate.engine import discovery, writes
    from titan_doctor.migrate.engine import runner as engine
    from titan_doctor.migrate.rules import load_rules

    for p in [*paths, *rule_files]:
        if not p.exists() and not p.is_symlink():
            raise MigrateError(f"{p}: no such file or directory")
    rules = load_rules(rule_files, _codes(select), _codes(ignore), target)
    if target == TARGETS[1]:
        torch_npu_import = "never"  # device-generic code does not depend on torch_npu
    if list_rules:
        for c, msg in sorted(rules.help.items()):
            click.echo(f"{c}  {msg}")
        return EXIT_OK
    if not paths:
        raise MigrateError("give at least one PATH (file or folder) to migrate")
    if output is not None and (show_diff or check):
        raise MigrateError("--output cannot be combined with --diff or --check")
    if output is not None and any(
        output.resolve() == p.resolve() or p.resolve() in output.resolve().parents for p in paths
    ):
        raise MigrateError(f"--output {output} must be outside the input paths")

    found = discovery.discover(paths, rules, exclude)
    files = [(e.path, discovery.shown_name(e.path)) for e in found.files]
    results = _with_progress(engine, files, rules, jobs, fmt, torch_npu_import)
    changed = [r for r in results if r.state == engine.CHANGED]

    writes_files = not (show_diff or check)
    try:
        if output is not None:
            writes.copy_tree(found, {r.path: r.new for r in changed}, output, list(paths))
        elif writes_files and changed:
            _guard_in_place(changed, allow_dirty, allow_ignored)
            for r in changed:
                writes.write_atomic(r.path, r.new, expected=r.original)
    except writes.WriteRefused as e:
        raise MigrateError(str(e)) from e
    except OSError as e:
        raise MigrateError(f"cannot write {e.filename or output}: {e.strerror}") from e

    findings = sorted(
        (f for r in results for f in r.findings), key=lambda f: (f.path or "", f.line or 0, f.col or 0, f.code)
    )
    diffs = [_diff(r) for r in changed] if show_diff else []
    _report(fmt, findings, results, found, engine, diffs, writes_files, output, rules.help)
    status = exit_code(findings)
    if (check or show_diff) and changed:
        status = EXIT_FINDINGS
    return status


def _names(paths) -> str:
    from titan_doctor.migrate.engine.discovery import shown_name

    return ", ".join(shown_name(p) for p in paths[:5]) + (" ..." if len(paths) > 5 else "")


def _guard_in_place(changed, allow_dirty: bool, allow_ignored: bool) -> None:
    """Refuse (before writing anything) what has no committed copy to go back to, and
    anything that changed or became a link since it was read."""
    from titan_doctor.migrate.engine import gitstate

    paths = [r.path for r in changed]
    if not allow_dirty:
        dirty = gitstate.dirty(paths)
        if dirty:
            raise MigrateError(
                f"refusing to rewrite {len(dirty)} file(s) with uncommitted changes "
                f"({_names(dirty)}); commit or stash them, or pass --allow-dirty"
            )
    if not allow_ignored:
        ignored = gitstate.ignored(paths)
        if ignored:
            raise MigrateError(
                f"refusing to rewrite {len(ignored)} file(s) that git ignores "
                f"({_names(ignored)}): there is no committed copy to restore "
                "them from; use --output DIR, or pass --allow-ignored"
            )
    for r in changed:
        if r.path.is_symlink() or r.path.read_bytes() != r.original:
            raise MigrateError(f"{_names([r.path])} changed while migrate ran; nothing was written, run it again")


def _with_progress(engine, files, rules, jobs, fmt, torch_npu_import="scripts"):
    if fmt == "text" and len(files) >= PROGRESS_MIN_FILES and sys.stderr.isatty():
        with click.progressbar(length=len(files), label="migrating", file=sys.stderr) as bar:
            return engine.run(files, rules, jobs, bar.update, torch_npu_import)
    return engine.run(files, rules, jobs, torch_npu_import=torch_npu_import)


def _diff(result) -> str:
    from titan_doctor.migrate.engine.discovery import shown_name

    name = shown_name(result.path)
    try:
        a = result.original.decode("utf-8").splitlines(keepends=True)
        b = result.new.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return f"Binary files a/{name} and b/{name} differ\n"
    return "".join(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}"))


def _file_counts(engine, results, found) -> dict[str, int]:
    counts = {s: sum(r.state == s for r in results) for s in engine.STATES}
    counts["skipped"] = sum(len(v) for v in found.skipped.values())
    return counts


def _skipped(found) -> dict[str, dict]:
    from titan_doctor.migrate.engine.discovery import REASONS

    return {
        reason: {"count": len(paths), "why": REASONS[reason], "paths": sorted(paths)}
        for reason, paths in sorted(found.skipped.items())
    }


def _report(fmt, findings: list[Finding], results, found, engine, diffs, writes, output, helps) -> None:
    counts = _file_counts(engine, results, found)
    suppressed = sum(r.suppressed for r in results)
    kept = sum(r.kept for r in results)
    if fmt == "json":
        from titan_doctor.migrate.engine.discovery import shown_name

        click.echo(
            to_json(
                findings,
                files=counts,
                skipped=_skipped(found),
                suppressed=suppressed,
                kept=kept,
                changed=[shown_name(r.path) for r in results if r.state == engine.CHANGED],
                diff="".join(diffs) if diffs else None,
            )
        )
        return
    if fmt == "sarif":
        click.echo(to_sarif(findings, tool="titan-doctor migrate", version=__version__, rule_help=helps))
        return
    from tabulate import tabulate

    for d in diffs:
        click.echo(d, nl=False)
    if findings:
        click.echo(render_lines(findings))
        click.echo()
    verb = "written to " + str(output) if output else ("rewritten" if writes else "would change")
    click.echo(
        tabulate(
            [
                [f"changed ({verb})", counts[engine.CHANGED]],
                ["unchanged", counts[engine.UNCHANGED]],
                ["failed", counts[engine.FAILED]],
                ["skipped (not read)", counts["skipped"]],
            ],
            headers=["files", "count"],
        )
    )
    if suppressed:
        click.echo(f"{suppressed} finding(s) suppressed by `# titan-doctor: ignore` comments")
    if kept:
        click.echo(
            f"{kept} CUDA reference(s) left as they are in code that already runs on more than CUDA "
            "or answers for CUDA by name (NPU114 says where an npu case is missing)"
        )
    if found.skipped:
        rows = []
        for reason, info in _skipped(found).items():
            shown = ", ".join(info["paths"][:3]) + (", ..." if info["count"] > 3 else "")
            rows.append([reason, info["count"], f"{info['why']}: {shown}"])
        click.echo()
        click.echo(tabulate(rows, headers=["skipped", "count", "why"]))
    if findings:
        click.echo()
        click.echo(count_table(findings))
