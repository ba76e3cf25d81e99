"""examples/ is the quickstart's demo input: its migration is pinned here, and the
migrated copy written by --output must equal the reviewed expectation."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXPECTED = Path(__file__).parent / "examples_expected"
PAIRS = {"cuda_train_llama.py": "cuda_train_llama.out.py", "cuda_launch.sh": "cuda_launch.out.sh"}


def test_examples_migrate_to_expected(tmp_path):
    out = tmp_path / "npu"
    res = run("--output", out, EXAMPLES)
    # manual items remain (cudnn.benchmark, NCCL_DEBUG, nvidia-smi): exit 1 by design
    assert res.exit_code == 1, res.output
    for name, expected in PAIRS.items():
        assert (out / name).read_bytes() == (EXPECTED / expected).read_bytes(), name
    assert "NPU603 [manual]" in res.output and "NPU803 [manual]" in res.output


def test_migrated_examples_are_stable(tmp_path):
    for name, expected in PAIRS.items():
        (tmp_path / name).write_bytes((EXPECTED / expected).read_bytes())
    res = run("--check", "--format", "json", tmp_path)
    data = json.loads(res.output)
    assert data["files"]["changed"] == 0
    assert [f for f in data["findings"] if f["status"] == "fixed"] == []
