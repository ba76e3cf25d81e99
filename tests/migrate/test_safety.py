"""In-place safety, end to end through the CLI on real git repositories: the guard sees
every file (odd names too), ignored files need --allow-ignored, links are never replaced
or written through, writes are atomic, --output copies links as links."""

from __future__ import annotations

import json
import os
import stat

import pytest

from titan_doctor.migrate import command
from titan_doctor.migrate.engine import writes

from .gitrepo import commit_all as commit
from .gitrepo import git, make
from .helpers import run

CUDA = "import torch\n\ntorch.cuda.synchronize()\n"
NPU = "import torch\n\ntorch.npu.synchronize()\n"  # a module: torch loads torch_npu by itself


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    make(root, {"train.py": CUDA, ".gitignore": "scratch/\n*.local.py\n"})
    git(root, "init", "-q")
    commit(root)
    return root


@pytest.mark.parametrize("name", ["模型 训练.py", "caf\u00e9 (copy).py", 'quote"d.py', "tab\tname.py", "new\nline.py"])
def test_dirty_guard_sees_files_git_would_quote(repo, name):
    (repo / name).write_text(CUDA)
    commit(repo)
    (repo / name).write_text(CUDA + "# local edit\n")
    res = run(repo)
    assert res.exit_code == 2, res.output
    assert "refusing to rewrite 1 file(s) with uncommitted changes" in res.output
    assert (repo / name).read_text() == CUDA + "# local edit\n"
    assert (repo / "train.py").read_text() == CUDA  # nothing written at all


def test_untracked_and_renamed_files_count_as_dirty(repo):
    (repo / "new.py").write_text(CUDA)
    assert run(repo).exit_code == 2
    (repo / "new.py").unlink()
    git(repo, "mv", "train.py", "moved.py")
    res = run(repo)
    assert res.exit_code == 2 and "moved.py" in res.output
    assert run("--allow-dirty", repo).exit_code == 0
    assert (repo / "moved.py").read_text() == NPU


def test_ignored_files_need_allow_ignored_in_place_only(repo):
    make(repo, {"scratch/exp.py": CUDA, "mine.local.py": CUDA})
    # a walk does not enter what git ignores
    res = run("--format", "json", "--check", repo)
    data = json.loads(res.output)
    assert [os.path.basename(c) for c in data["changed"]] == ["train.py"]
    assert data["skipped"]["ignored"]["count"] == 2
    # named explicitly they are read, but not rewritten in place without the flag
    res = run(repo / "scratch" / "exp.py", repo / "mine.local.py")
    assert res.exit_code == 2
    assert "2 file(s) that git ignores" in res.output and "--allow-ignored" in res.output
    assert (repo / "scratch" / "exp.py").read_text() == CUDA
    assert run("--check", repo / "scratch" / "exp.py").exit_code == 1  # reading is fine
    assert run("--allow-ignored", repo / "scratch" / "exp.py").exit_code == 0
    assert (repo / "scratch" / "exp.py").read_text() == NPU
    res = run(repo / "scratch")  # an ignored folder named on the command line
    assert res.exit_code == 0  # exp.py is migrated already: nothing to write
    (repo / "scratch" / "b.py").write_text(CUDA)
    assert run(repo / "scratch").exit_code == 2


def test_help_names_the_ignored_flag():
    res = run("--help")
    assert "--allow-ignored" in res.output and "git ignores" in res.output


def test_links_are_kept_and_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    make(outside, {"shared.py": CUDA})
    tree = tmp_path / "tree"
    make(tree, {"real.py": CUDA})
    (tree / "alias.py").symlink_to("real.py")
    (tree / "shared.py").symlink_to(outside / "shared.py")
    res = run(tree)
    assert res.exit_code == 0, res.output
    assert (tree / "real.py").read_text() == NPU
    assert os.readlink(tree / "alias.py") == "real.py"  # still a link, to the migrated file
    assert (outside / "shared.py").read_text() == CUDA  # never written through a link
    assert os.readlink(tree / "shared.py") == str(outside / "shared.py")
    assert res.output.count("NPU101") == 2  # one finding line + the count table: read once
    assert "symlink-outside" in res.output and "symlink " in res.output


def test_write_atomic_keeps_mode_refuses_links_and_changed_files(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text("old\n")
    os.chmod(p, 0o755)
    writes.write_atomic(p, b"new\n", expected=b"old\n")
    assert p.read_bytes() == b"new\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o755
    assert [x.name for x in tmp_path.iterdir()] == ["run.sh"]
    with pytest.raises(writes.WriteRefused):
        writes.write_atomic(p, b"newer\n", expected=b"old\n")
    (tmp_path / "link.sh").symlink_to(p)
    with pytest.raises(writes.WriteRefused):
        writes.write_atomic(tmp_path / "link.sh", b"x\n")
    assert p.read_bytes() == b"new\n" and (tmp_path / "link.sh").is_symlink()


def test_a_file_edited_during_the_run_is_not_overwritten(tmp_path, monkeypatch):
    make(tmp_path, {"a.py": CUDA, "b.py": CUDA})
    real = command._with_progress

    def edit_midway(engine, files, rules, jobs, fmt, torch_npu_import):
        results = real(engine, files, rules, jobs, fmt, torch_npu_import)
        (tmp_path / "b.py").write_text(CUDA + "# saved by an editor\n")
        return results

    monkeypatch.setattr(command, "_with_progress", edit_midway)
    res = run(tmp_path)
    assert res.exit_code == 2 and "changed while migrate ran" in res.output
    assert (tmp_path / "a.py").read_text() == CUDA  # nothing written
    assert (tmp_path / "b.py").read_text().endswith("# saved by an editor\n")


def test_output_copy_keeps_links_and_leaves_out_ignored(repo, tmp_path):
    make(
        repo,
        {
            "scratch/big.bin": "x",
            "cfg/base.yaml": "backend: nccl\n",
            "nb.ipynb": json.dumps(
                {
                    "cells": [
                        {
                            "cell_type": "code",
                            "metadata": {},
                            "outputs": [],
                            "execution_count": None,
                            "source": ["import torch\n", "x = torch.ones(1).cuda()"],
                        }
                    ],
                    "metadata": {},
                    "nbformat": 4,
                    "nbformat_minor": 5,
                },
                indent=1,
            )
            + "\n",
        },
    )
    (repo / "cfg" / "run.yaml").symlink_to("base.yaml")
    (repo / "abs.yaml").symlink_to(repo / "cfg" / "base.yaml")
    out = tmp_path / "out"
    res = run("--output", out, repo)
    assert res.exit_code == 0, res.output
    assert (out / "train.py").read_text() == NPU
    assert (out / "cfg" / "base.yaml").read_text() == "backend: hccl\n"
    assert os.readlink(out / "cfg" / "run.yaml") == "base.yaml"
    assert (out / "abs.yaml").resolve() == (out / "cfg" / "base.yaml").resolve()  # into the copy
    assert not (out / "scratch").exists() and not (out / ".git").exists()
    assert "torch.npu()" not in (out / "nb.ipynb").read_text()
    assert ".npu()" in (out / "nb.ipynb").read_text()
    assert (repo / "train.py").read_text() == CUDA  # the source tree is untouched
    # a second copy over the first never writes through a link left in DIR
    victim = tmp_path / "victim.py"
    victim.write_text("keep\n")
    (out / "train.py").unlink()
    (out / "train.py").symlink_to(victim)
    assert run("--output", out, repo).exit_code == 0
    assert victim.read_text() == "keep\n" and (out / "train.py").read_text() == NPU
