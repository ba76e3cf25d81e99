"""Which files migrate reads: git's ignore rules (asked of git, or read from .gitignore
outside a work tree), environments and site-packages, symlinks, duplicates; and that every
left-out path is counted under its reason."""

from __future__ import annotations

import os
import subprocess

import pytest

from titan_doctor.migrate.engine import discovery
from titan_doctor.migrate.engine.gitignore import IgnoreReader

from .gitrepo import GIT_ENV, git, make
from .helpers import rules

TREE = {
    ".gitignore": "outputs/\n*.log\n/data\n!keep.log\n",
    "train.py": "x = 1\n",
    "build/gen.py": "x = 1\n",  # not skipped by name
    "dist/launch.sh": "echo\n",  # not skipped by name
    ".github/workflows/ci.yml": "on: push\n",
    "outputs/run1/cfg.yaml": "a: 1\n",
    "run.log": "x\n",
    "keep.log": "x\n",
    "data/x.json": "{}\n",
    "src/data/y.json": "{}\n",  # /data is anchored: this one is read
    "notes.txt": "hi\n",
    "env/pyvenv.cfg": "home = /usr\n",
    "env/lib/python3.11/site-packages/torch/x.py": "x = 1\n",
    "conda/conda-meta/history": "\n",
    "conda/lib/z.py": "x = 1\n",
    "third/site-packages/pkg.py": "x = 1\n",
    "nb/demo.ipynb": "{}\n",
    "k/kernel.cu": "\n",
    "job.sbatch": "#SBATCH -N 1\n",
}


def rels(found):
    return sorted(e.rel.as_posix() for e in found.files)


def reasons(found, tmp_path):
    return {r: sorted(p.replace(str(tmp_path) + "/", "") for p in ps) for r, ps in found.skipped.items()}


@pytest.mark.parametrize("with_git", [True, False])
def test_walk_skips_ignored_envs_packages_not_build_or_dist(tmp_path, monkeypatch, with_git):
    make(tmp_path, TREE)
    if with_git:
        git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    found = discovery.discover([tmp_path], rules())
    assert rels(found) == [
        ".github/workflows/ci.yml",
        "build/gen.py",
        "dist/launch.sh",
        "job.sbatch",
        "k/kernel.cu",
        "nb/demo.ipynb",
        "src/data/y.json",
        "train.py",
    ]
    skipped = reasons(found, tmp_path)
    assert skipped["ignored"] == ["data/", "outputs/", "run.log"]
    assert skipped["virtualenv"] == ["conda/", "env/"]
    assert skipped["site-packages"] == ["third/site-packages/"]
    assert skipped.get("vcs", []) == ([".git/"] if with_git else [])
    # everything kept is in entries (for --output), only known kinds are migrated
    copied = sorted(e.rel.as_posix() for e in found.entries if e.kind is None)
    assert copied == [".gitignore", "keep.log", "notes.txt"]


def test_nested_gitignore_and_git_info_exclude(tmp_path):
    make(
        tmp_path,
        {"a/.gitignore": "*.yaml\n!keep.yaml\n", "a/x.yaml": "", "a/keep.yaml": "", "b/x.yaml": "", "c/t.py": ""},
    )
    git(tmp_path, "init", "-q")
    (tmp_path / ".git" / "info" / "exclude").write_text("c/\n")
    found = discovery.discover([tmp_path], rules())
    assert rels(found) == ["a/keep.yaml", "b/x.yaml"]
    assert sorted(found.skipped["ignored"]) == [f"{tmp_path}/a/x.yaml", f"{tmp_path}/c/"]


PATTERNS = """\
# comment
*.log
!important.log
/root_only.py
build/
**/gen/*.py
docs/**/*.md
a/**/b
x?z.txt
[abc]_*.py
\\#hash.py
spaced\\ name.py
trailing.py   
dir_only/
"""
PATHS = [
    "a.log",
    "sub/a.log",
    "important.log",
    "sub/important.log",
    "root_only.py",
    "sub/root_only.py",
    "build",
    "sub/build",
    "x/gen/g.py",
    "gen/g.py",
    "docs/a/b/c.md",
    "docs/c.md",
    "a/b",
    "a/x/y/b",
    "xyz.txt",
    "xz.txt",
    "a_1.py",
    "d_1.py",
    "#hash.py",
    "spaced name.py",
    "trailing.py",
    "dir_only",
    "file_not_dir/dir_only",
]


def test_gitignore_reader_agrees_with_git(tmp_path):
    """The fallback reader against git check-ignore itself, pattern by pattern."""
    (tmp_path / ".gitignore").write_text(PATTERNS)
    dirs = {"build", "sub/build", "dir_only", "a/b", "a/x/y/b"}
    for rel in PATHS:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel in dirs:
            p.mkdir(exist_ok=True)
        else:
            p.write_text("")
    git(tmp_path, "init", "-q")
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=tmp_path,
        input="\n".join(PATHS) + "\n",
        capture_output=True,
        text=True,
        env=GIT_ENV,
    )
    by_git = set(out.stdout.split("\n")) - {""}
    reader = IgnoreReader(tmp_path)
    for folder in sorted({(tmp_path / r).parent for r in PATHS}):
        reader.enter(folder)
    by_us = {r for r in PATHS if reader.ignored(tmp_path / r, (tmp_path / r).is_dir())}
    assert by_us == by_git
    assert {
        "a.log",
        "sub/a.log",
        "build",
        "sub/build",
        "x/gen/g.py",
        "docs/a/b/c.md",
        "#hash.py",
        "dir_only",
    } <= by_us  # the test exercises both verdicts
    assert {"important.log", "xz.txt", "file_not_dir/dir_only", "d_1.py"}.isdisjoint(by_us)


def test_a_named_ignored_folder_is_walked(tmp_path, monkeypatch):
    make(tmp_path, {".gitignore": "build/\n", "build/gen.py": "x\n", "build/.gitignore": "*.tmp\n", "build/a.tmp": ""})
    git(tmp_path, "init", "-q")
    found = discovery.discover([tmp_path / "build"], rules())
    assert rels(found) == ["gen.py"]
    assert found.skipped["ignored"] == [f"{tmp_path}/build/a.tmp"]


def test_nested_repository_uses_its_own_ignore_rules(tmp_path):
    make(tmp_path, {"vendor/lib/.gitignore": "gen/\n", "vendor/lib/gen/x.py": "", "vendor/lib/y.py": "", "z.py": ""})
    git(tmp_path, "init", "-q")
    git(tmp_path / "vendor" / "lib", "init", "-q")
    found = discovery.discover([tmp_path], rules())
    assert rels(found) == ["vendor/lib/y.py", "z.py"]
    assert found.skipped["vcs"] == [f"{tmp_path}/.git/", f"{tmp_path}/vendor/lib/.git/"]


def test_symlinks_are_never_followed_and_files_are_read_once(tmp_path):
    outside = tmp_path / "outside"
    make(outside, {"secret.py": "x\n", "pkg/m.py": "x\n"})
    tree = tmp_path / "tree"
    make(tree, {"real.py": "x\n", "sub/cfg.yaml": "a: 1\n"})
    (tree / "alias.py").symlink_to("real.py")
    (tree / "sub" / "up.yaml").symlink_to("../sub/cfg.yaml")
    (tree / "out.py").symlink_to(outside / "secret.py")
    (tree / "outdir").symlink_to(outside / "pkg")
    (tree / "gone.py").symlink_to(tree / "missing.py")
    os.link(tree / "real.py", tree / "hard.py")
    (tree / "README.md").write_text("docs\n")
    (tree / "AGENTS.md").symlink_to("README.md")  # not a kind migrate reads: not counted
    found = discovery.discover([tree, tree / "real.py"], rules())
    # real.py and hard.py are one file (a hard link): read once, under the first name met
    assert [e.path for e in found.files] == [(tree / "hard.py").resolve(), (tree / "sub" / "cfg.yaml").resolve()]
    sk = reasons(found, tmp_path)
    assert sk["symlink"] == ["tree/alias.py", "tree/sub/up.yaml"]
    assert sk["symlink-outside"] == ["tree/out.py", "tree/outdir"]
    assert sk["broken-symlink"] == ["tree/gone.py"]
    assert sk["duplicate"] == ["tree/real.py", "tree/real.py"]  # hard link, and named twice
    assert len(found.links) == 6  # all kept for --output


def test_named_link_out_of_its_folder_is_not_followed(tmp_path):
    make(tmp_path, {"elsewhere/t.py": "x\n", "proj/a.py": "x\n"})
    (tmp_path / "proj" / "t.py").symlink_to(tmp_path / "elsewhere" / "t.py")
    found = discovery.discover([tmp_path / "proj" / "t.py"], rules())
    assert found.files == [] and list(found.skipped) == ["symlink-outside"]
    (tmp_path / "notes.txt").write_text("")
    found = discovery.discover([tmp_path / "proj" / "a.py", tmp_path / "notes.txt"], rules())
    assert rels(found) == ["a.py"]
    assert list(found.skipped) == ["not-migratable"]


def test_exclude_and_size_limit_are_reasons_too(tmp_path, monkeypatch):
    make(tmp_path, {"a.py": "x = 1\n", "big.json": "{}" + " " * 100, "third_party/v.py": ""})
    monkeypatch.setattr(discovery, "MAX_BYTES", 50)
    found = discovery.discover([tmp_path], rules(), exclude=["third_party"])
    assert rels(found) == ["a.py"]
    sk = reasons(found, tmp_path)
    assert sk["excluded"] == ["third_party/"] and sk["too-large"] == ["big.json"]
