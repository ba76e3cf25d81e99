"""`titan-doctor migrate` end to end through click: modes, exit codes, formats, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

import pytest

from .gitrepo import commit_all, git
from .helpers import run

CUDA_SRC = "import torch\n\ntorch.cuda.synchronize()\n"
MANUAL_SRC = "import torch\n\ntorch.backends.cudnn.benchmark = True\n"


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(CUDA_SRC)
    (src / "clean.py").write_text("x = 1\n")
    return src


def test_in_place_rewrite_exit_0_and_report(tree):
    res = run(tree)
    assert res.exit_code == 0, res.output
    # a module, not a program: torch loads torch_npu by itself, so no import is added
    assert (tree / "train.py").read_text() == "import torch\n\ntorch.npu.synchronize()\n"
    assert "src/train.py:3:1 NPU101 [fixed] torch.cuda.synchronize -> torch.npu.synchronize" in res.output.replace(
        str(tree.parent) + "/", ""
    )
    assert "changed (rewritten)" in res.output and "NPU101" in res.output


def test_check_writes_nothing_and_exits_1_then_0_when_clean(tree):
    res = run("--check", tree)
    assert res.exit_code == 1
    assert (tree / "train.py").read_text() == CUDA_SRC
    assert run(tree).exit_code == 0
    assert run("--check", tree).exit_code == 0


def test_diff_prints_unified_diff_and_writes_nothing(tree):
    res = run("--diff", tree)
    assert res.exit_code == 1
    assert "-torch.cuda.synchronize()\n+torch.npu.synchronize()" in res.output
    assert "+import torch_npu" not in res.output
    assert (tree / "train.py").read_text() == CUDA_SRC


PROGRAM_SRC = 'import torch\n\nif __name__ == "__main__":\n    torch.cuda.synchronize()\n'


def test_import_torch_npu_goes_into_programs_by_default_and_where_asked(tmp_path):
    """scripts (the default): a program outside a package gets the import, a module or a
    program inside a package (an __init__.py beside it) does not; always / never."""
    (tmp_path / "prog.py").write_text(PROGRAM_SRC)
    (tmp_path / "mod.py").write_text(CUDA_SRC)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(PROGRAM_SRC)
    res = run("--diff", tmp_path)
    changed = {p: "+import torch_npu" in part for part in res.output.split("--- a/")[1:] for p in [part.split("\n")[0]]}
    assert [name.rsplit("/", 1)[-1] for name, added in changed.items() if added] == ["prog.py"]
    assert run("--diff", "--import-torch-npu", "always", tmp_path).output.count("+import torch_npu") == 3
    assert "+import torch_npu" not in run("--diff", "--import-torch-npu", "never", tmp_path).output


PROFILER_SRC = "import torch\n\n\ndef trace():\n    return torch.profiler.profile()\n"


def test_a_package_module_whose_rewrites_name_torch_npu_gets_the_import(tmp_path):
    """torch.npu needs no import (torch loads torch_npu), the name torch_npu does: a package
    module whose profiler became torch_npu.profiler gets `import torch_npu` under the default
    policy (else NameError), and under `never` a finding that asks for it."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "prof.py").write_text(PROFILER_SRC)
    res = run("--diff", tmp_path)
    assert "+import torch_npu" in res.output and "+    return torch_npu.profiler.profile()" in res.output
    never = run("--diff", "--import-torch-npu", "never", tmp_path)
    assert "+import torch_npu" not in never.output
    assert "NPU100 [manual] the rewrites here name torch_npu itself" in never.output


def test_manual_findings_exit_1(tree):
    (tree / "flags.py").write_text(MANUAL_SRC)
    res = run(tree)
    assert res.exit_code == 1
    assert "NPU603 [manual]" in res.output


def test_output_dir_gets_migrated_copy(tree, tmp_path):
    (tree / "README.md").write_text("docs\n")
    out = tmp_path / "out"
    res = run("--output", out, tree)
    assert res.exit_code == 0, res.output
    assert (tree / "train.py").read_text() == CUDA_SRC
    assert "torch.npu.synchronize()" in (out / "train.py").read_text()
    assert (out / "clean.py").read_text() == "x = 1\n"
    assert (out / "README.md").read_text() == "docs\n"


def test_output_inside_input_refused(tree):
    res = run("--output", tree / "sub", tree)
    assert res.exit_code == 2
    assert "must be outside" in res.output


def _commit_all(tree):
    git(tree, "init", "-q")
    commit_all(tree)


def test_dirty_git_files_refused_unless_allowed(tree):
    _commit_all(tree)
    (tree / "train.py").write_text(CUDA_SRC + "# local edit\n")
    res = run(tree)
    assert res.exit_code == 2
    assert "refusing to rewrite 1 file(s) with uncommitted changes" in res.output
    assert "torch.cuda" in (tree / "train.py").read_text()
    res = run("--allow-dirty", tree)
    assert res.exit_code == 0
    assert "torch.npu" in (tree / "train.py").read_text()


def test_committed_git_tree_is_rewritten(tree):
    _commit_all(tree)
    assert run(tree).exit_code == 0
    assert "torch.npu" in (tree / "train.py").read_text()


def test_json_format(tree):
    res = run("--format", "json", "--check", tree)
    data = json.loads(res.output)
    assert res.exit_code == 1
    assert data["files"] == {"changed": 1, "unchanged": 1, "skipped": 0, "failed": 0}
    assert data["skipped"] == {}
    assert {f["code"] for f in data["findings"]} == {"NPU101"}  # a module: no import added
    assert data["findings"][0]["status"] == "fixed"


def test_sarif_format(tree):
    (tree / "flags.py").write_text(MANUAL_SRC)
    res = run("--format", "sarif", "--check", tree)
    doc = json.loads(res.output)
    assert doc["version"] == "2.1.0"
    results = doc["runs"][0]["results"]
    manual = [r for r in results if r["ruleId"] == "NPU603"]
    assert manual[0]["level"] == "warning"
    assert manual[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 3, "startColumn": 1}


def test_select_and_ignore(tree):
    (tree / "flags.py").write_text(MANUAL_SRC)
    res = run("--check", "--select", "NPU6", tree)
    assert "NPU603" in res.output and "NPU101" not in res.output
    res = run("--check", "--ignore", "NPU1,NPU6", tree)
    assert res.exit_code == 0
    assert (tree / "train.py").read_text() == CUDA_SRC


def test_user_rules_file(tree, tmp_path):
    extra = tmp_path / "mine.toml"
    extra.write_text(
        '[[rule]]\ncode = "ACME001"\nkind = "report"\nmatch = "acme.gpu"\n'
        'message = "{old} is our CUDA helper"\nfix = "use acme.npu"\n'
        'source = "team wiki"\n'
    )
    (tree / "acme_use.py").write_text("import acme.gpu\nacme.gpu.run()\n")
    res = run("--check", "--rules", extra, tree)
    assert "ACME001 [manual] acme.gpu is our CUDA helper" in res.output


@pytest.mark.parametrize(
    "content, needle",
    [
        ('[[rule]]\ncode = "NPU999"\nkind = "rename"\nold = "a"\nmessage = "m"\nsource = "s"\n', "lacks new"),
        (
            '[[rule]]\ncode = "bad"\nkind = "report"\nmatch = "a"\nmessage = "m"\nsource = "s"\n',
            "must look like NPU101",
        ),
        ('[[rule]]\ncode = "NPU999"\nkind = "report"\nmatch = "a"\nmessage = "m"\n', "lacks source"),
        ("not toml [", "invalid TOML"),
    ],
)
def test_bad_rules_file_is_one_line_exit_2(tree, tmp_path, content, needle):
    bad = tmp_path / "bad.toml"
    bad.write_text(content)
    res = run("--rules", bad, tree)
    assert res.exit_code == 2
    assert needle in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_missing_path_is_one_line_exit_2(tmp_path):
    res = run(tmp_path / "nope")
    assert res.exit_code == 2
    assert res.output.strip() == f"titan-doctor migrate: error: {tmp_path / 'nope'}: no such file or directory"


def test_help_documents_modes_and_exit_codes():
    res = run("--help")
    for text in ("--diff", "--check", "--output", "--allow-dirty", "Exit codes", "usage or tool error"):
        assert text in res.output


def test_list_rules():
    res = run("--list-rules")
    assert res.exit_code == 0
    assert "NPU101" in res.output and "NPU301" in res.output


def test_parse_failure_exit_1_and_file_untouched(tree):
    (tree / "broken.py").write_text("import torch\ntorch.cuda.x(\n")
    res = run(tree)
    assert res.exit_code == 1
    assert "NPU001 [fail]" in res.output
    assert (tree / "broken.py").read_text() == "import torch\ntorch.cuda.x(\n"


@pytest.mark.parametrize("mode", [["--check"], ["--diff"], [], ["--output", "OUT"], ["--format", "json"]])
def test_positions_are_input_lines_in_every_mode(tree, tmp_path, mode):
    """One convention for pre-commit, CI and editors: the line in the file as it was read,
    even when an inserted or split import moves it in the output."""
    src = "import torch\nfrom torch.cuda import synchronize, jiterator\ntorch.backends.cudnn.benchmark = True\n"
    (tree / "flags.py").write_text(src)
    args = [a if a != "OUT" else str(tmp_path / "out") for a in mode]
    res = run(*args, tree)
    if mode == ["--format", "json"]:
        [f] = [f for f in json.loads(res.output)["findings"] if f["code"] == "NPU603"]
        assert (f["line"], f["col"]) == (3, 1)
    else:
        line = [ln for ln in res.output.splitlines() if "NPU603" in ln and "[manual]" in ln][0]
        assert "flags.py:3:1 NPU603" in line
    assert src.splitlines()[2].startswith("torch.backends.cudnn.benchmark")


def test_unwritable_output_is_one_line_exit_2(tree, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder\n")
    res = run("--output", blocker / "out", tree)
    assert res.exit_code == 2
    assert res.output.startswith("titan-doctor migrate: error: cannot write")
    assert "Traceback" not in res.output


def test_progress_bar_on_a_terminal(tree, monkeypatch):
    from titan_doctor.migrate import command
    from titan_doctor.migrate.engine import runner as engine
    from titan_doctor.migrate.rules import load_rules

    files = [(p, p.name) for p in sorted(tree.iterdir())]
    monkeypatch.setattr(command, "PROGRESS_MIN_FILES", 1)
    monkeypatch.setattr(command.sys.stderr, "isatty", lambda: True, raising=False)
    results = command._with_progress(engine, files, load_rules(), 1, "text")
    assert [r.state for r in results] == [engine.UNCHANGED, engine.CHANGED]


ROOT = Path(__file__).resolve().parents[2]


def _hook() -> str:
    return (ROOT / ".pre-commit-hooks.yaml").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_pre_commit_hook_runs_check():
    text = _hook()
    assert "id: titan-doctor-migrate-check" in text
    assert "entry: titan-doctor migrate --check" in text
    assert 'titan-doctor = "titan_doctor.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_help_readme_and_hook_say_the_same_about_check_exit_1():
    from titan_doctor.migrate.command import CHECK_EXIT_1

    sentence = _flat(CHECK_EXIT_1)
    help_text = _flat(run("--help").output)
    readme = _flat((ROOT / "README.md").read_text())
    [description] = re.findall(r'^  description: "(.*)"$', _hook(), re.M)
    assert sentence in help_text
    assert sentence in readme
    assert _flat(description) == sentence
    for case in (
        "would change",
        "[manual]",
        "parsed or decoded",
        "titan-doctor: ignore[CODE]",
        "Suppressed lines do not count",
        "shell and Slurm scripts",
    ):
        assert case in sentence


@pytest.mark.parametrize(
    "name",
    [
        "a.py",
        "nb/x.ipynb",
        "run.sh",
        "r.bash",
        "r.zsh",
        "job.sbatch",
        "job.slurm",
        "c.json",
        "c.yaml",
        "c.yml",
        "c.toml",
        "setup.cfg",
        "t.ini",
        "k.cu",
        "k.cuh",
        "Dockerfile",
        "docker/Containerfile",
        ".env",
        ".env.local",
        "prod.env",
        "README.md",
        "notes.txt",
        "x.pyc",
        "Makefile",
        "a.py.bak",
        "data.jsonl",
        "lib.so",
        "docker/Dockerfile.dev",
        "requirements.txt",
        "requirements-dev.txt",
        "ci/constraints.txt",
        "requirements.in",
        "docs/requirements/notes.txt",
    ],
)
def test_hook_files_pattern_matches_exactly_what_migrate_reads(name):
    from titan_doctor.migrate.engine import filekinds as kinds
    from titan_doctor.migrate.rules import load_rules

    [pattern] = re.findall(r"^  files: '(.*)'$", _hook(), re.M)
    reads = kinds.kind_of(PurePosixPath(name), load_rules()) is not None
    assert bool(re.search(pattern, name)) == reads


def test_summary_says_what_was_skipped_and_why(tmp_path):
    src = tmp_path / "proj"
    src.mkdir()
    (src / "train.py").write_text(CUDA_SRC)
    (src / ".venv").mkdir()
    (src / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (src / ".venv" / "lib.py").write_text(CUDA_SRC)
    (src / "dist").mkdir()
    (src / "dist" / "launch.sh").write_text("export CUDA_VISIBLE_DEVICES=0\n")
    (src / ".gitignore").write_text("wandb/\n")
    (src / "wandb").mkdir()
    (src / "wandb" / "cfg.yaml").write_text("backend: nccl\n")
    res = run("--check", src)
    assert "dist/launch.sh:1:8 NPU301" in res.output  # dist/ is not skipped by name
    assert re.search(r"skipped \(not read\)\s+2\n", res.output)
    rows = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.startswith(("ignored", "virtualenv"))}
    assert "git ignores it" in rows["ignored"] and "wandb/" in rows["ignored"]
    assert "pyvenv.cfg" in rows["virtualenv"] and ".venv/" in rows["virtualenv"]
    data = json.loads(run("--check", "--format", "json", src).output)
    assert data["files"]["skipped"] == 2
    assert data["skipped"]["virtualenv"]["count"] == 1
    assert data["skipped"]["virtualenv"]["paths"][0].endswith(".venv/")
    assert data["skipped"]["ignored"]["why"].startswith("git ignores it")


def test_a_closed_pipe_is_not_an_internal_error():
    """`migrate --list-rules | head -1`: the reader went away; say nothing about it."""
    import shutil
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("titan-doctor")
    if not exe.exists() or shutil.which("head") is None:
        pytest.skip("needs the installed titan-doctor script and head")
    proc = subprocess.run(
        f"'{exe}' migrate --list-rules | head -1", shell=True, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.startswith("NPU")
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
