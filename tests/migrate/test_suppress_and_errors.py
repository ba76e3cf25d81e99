"""Inline suppression for pre-commit use, and where a parse error is reported."""

from __future__ import annotations

import json

import pytest

from titan_doctor.migrate.engine import runner as engine
from titan_doctor.migrate.suppress import is_suppressed, suppressions

from .helpers import rules, run

REVIEWED = (
    'import torch\n\nNAMES = {"cuda": "NVIDIA"}  # titan-doctor: ignore[NPU108]\n'
    "torch.cuda.synchronize()  # titan-doctor: ignore\n"
)


def test_comment_forms():
    table = suppressions(
        b"a = 1  # titan-doctor: ignore\nb = 2  #titan-doctor:ignore[NPU108, NPU2]\n"
        b"c = 3  # titan-doctor: ignore[]\nd = '# not titan'\n"
    )
    assert is_suppressed(table, 1, "NPU101")
    assert is_suppressed(table, 2, "NPU108") and is_suppressed(table, 2, "NPU201")
    assert not is_suppressed(table, 2, "NPU101")
    assert is_suppressed(table, 3, "NPU999")  # empty list = every code
    assert not is_suppressed(table, 4, "NPU108")
    assert suppressions(b"x = 1\n") == {}


def test_reviewed_lines_pass_check_and_are_counted(tmp_path):
    (tmp_path / "names.py").write_text(REVIEWED)
    res = run("--check", tmp_path)
    assert res.exit_code == 0, res.output
    assert "2 finding(s) suppressed" in res.output
    data = json.loads(run("--check", "--format", "json", tmp_path).output)
    assert data["suppressed"] == 2 and data["findings"] == [] and data["files"]["changed"] == 0


def test_a_suppression_for_another_code_does_not_hide_the_finding(tmp_path):
    (tmp_path / "t.py").write_text("import torch\ntorch.cuda.synchronize()  # titan-doctor: ignore[NPU108]\n")
    res = run("--check", tmp_path)
    assert res.exit_code == 1 and "NPU101 [fixed]" in res.output


def test_parse_error_points_at_the_line_the_parser_names(tmp_path):
    path = tmp_path / "broken.py"
    path.write_bytes(b"import torch\nx = foo(1,\n        2\ntorch.cuda.synchronize()\ny = 3\n")
    [finding] = engine.process_file(path, rules(), "broken.py").findings
    assert (finding.code, finding.line, finding.col) == ("NPU001", 2, 8)
    assert "'(' was never closed" in finding.message


# -- text files and notebooks honour the same comment ------------------------------------
TEXT_CASES = {
    # name: (content, the reviewed line that must stay, the line that must still change)
    "launch.sh": (
        "export NCCL_DEBUG=INFO  # titan-doctor: ignore[NPU301]\ntorchrun train.py --device cuda\n",
        "export NCCL_DEBUG=INFO  # titan-doctor: ignore[NPU301]\n",
        "torchrun train.py --device npu\n",
    ),
    "job.sbatch": (
        "#!/bin/bash\n#SBATCH --gpus-per-node=8  # titan-doctor: ignore[NPU902]\nexport CUDA_VISIBLE_DEVICES=0,1\n",
        "#SBATCH --gpus-per-node=8  # titan-doctor: ignore[NPU902]\n",
        "export ASCEND_RT_VISIBLE_DEVICES=0,1\n",
    ),
    ".env": (
        "CUDA_VISIBLE_DEVICES=0  # titan-doctor: ignore\nNCCL_BUFFSIZE=8388608\n",
        "CUDA_VISIBLE_DEVICES=0  # titan-doctor: ignore\n",
        "HCCL_BUFFSIZE=8\n",
    ),
    "train.yaml": (
        "device: cuda  # titan-doctor: ignore[NPU9]\nbackend: nccl\n",
        "device: cuda  # titan-doctor: ignore[NPU9]\n",
        "backend: hccl\n",
    ),
    "train.toml": (
        'device = "cuda"  # titan-doctor: ignore[NPU901]\nbackend = "nccl"\n',
        'device = "cuda"  # titan-doctor: ignore[NPU901]\n',
        'backend = "hccl"\n',
    ),
}


@pytest.mark.parametrize("name", sorted(TEXT_CASES))
def test_text_files_keep_and_count_suppressed_lines(tmp_path, name):
    content, kept, changed = TEXT_CASES[name]
    path = tmp_path / name
    path.write_text(content)
    result = engine.process_file(path, rules(), name)
    lines = result.new.decode().splitlines(keepends=True)
    assert kept in lines and changed in lines
    assert result.suppressed == 1
    assert all(f.line != lines.index(kept) + 1 for f in result.findings)


def test_text_suppression_names_one_code_and_leaves_the_others(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("torchrun train.py --device cuda --backend nccl  # titan-doctor: ignore[NPU901]\n")
    result = engine.process_file(path, rules(), "run.sh")
    assert result.new == b"torchrun train.py --device cuda --backend hccl  # titan-doctor: ignore[NPU901]\n"
    assert [f.code for f in result.findings] == ["NPU802"] and result.suppressed == 1


def test_reviewed_script_lines_pass_check(tmp_path):
    (tmp_path / "job.sbatch").write_text(
        "#SBATCH --gres=gpu:8  # titan-doctor: ignore[NPU902]\n"
        "srun --gpus=8 python train.py  # titan-doctor: ignore[NPU903]\n"
    )
    (tmp_path / "ds.yaml").write_text("device: cuda  # titan-doctor: ignore\n")
    res = run("--check", tmp_path)
    assert res.exit_code == 0, res.output
    assert "3 finding(s) suppressed" in res.output
    data = json.loads(run("--check", "--format", "json", tmp_path).output)
    assert data["suppressed"] == 3 and data["findings"] == []


def test_notebook_shell_and_python_lines_honour_the_comment(tmp_path):
    cells = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "a",
            "metadata": {},
            "outputs": [],
            "source": [
                "import torch\n",
                "!CUDA_VISIBLE_DEVICES=0 python train.py --device cuda  # titan-doctor: ignore\n",
                "x = torch.zeros(2).cuda()  # titan-doctor: ignore[NPU1]\n",
                "torch.cuda.synchronize()",
            ],
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "b",
            "metadata": {},
            "outputs": [],
            "source": [
                "%%bash\n",
                "export NCCL_DEBUG=WARN  # titan-doctor: ignore[NPU301]\n",
                "nvidia-smi --query-gpu=name --format=csv",
            ],
        },
    ]
    nb = {
        "cells": cells,
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    result = engine.process_file(path, rules(), "nb.ipynb")
    new = json.loads(result.new)
    first, second = new["cells"][0]["source"], new["cells"][1]["source"]
    assert first[0:2] == ["import torch\n", "import torch_npu\n"]
    assert first[2:4] == cells[0]["source"][1:3]  # both reviewed lines as they were
    assert "torch.npu.synchronize()" in "".join(first)  # the unmarked line still migrated
    assert second[1] == cells[1]["source"][1]
    assert result.suppressed == 4  # env + device on the shell line, .cuda(), NCCL_DEBUG
    assert not [f for f in result.findings if f.code == "NPU005"]
    assert {(f.code, f.data["cell"], f.data["cell_line"]) for f in result.findings} == {
        ("NPU100", 1, 2),
        ("NPU101", 1, 4),
        ("NPU803", 2, 3),
    }  # nvidia-smi: not marked
