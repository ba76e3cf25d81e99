"""A checkpoint save that runs out of disk space, in real ranks (issue 18): the run exits
with one line naming the path, the free space and what the save needed; the partial
step-N.tmp is removed; the previous step-N is untouched and the next run resumes from it.

The full disk comes from the TITAN_TRAIN_FAULT hook (`enospc@RANK:STEP`: the rank's DCP
writer raises the real OSError(ENOSPC) after writing its files), so this runs anywhere; where
root may mount one, a real tmpfs too small for a second checkpoint does the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from titan_train.runtime import faults, write_errors

from ..disk import small_tmpfs
from .conftest import FAST, ok, run_trainer

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks

COMMON = FAST + ["training.steps=6", "checkpoint.save_interval=2", "checkpoint.keep_last_n=0"]
HEADER = re.compile(r"^titan-train: rank [01] failed first \(out of disk space, exit 2\) after [\d.]+ s$")


def _error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert HEADER.match(lines[0]), stderr[-3000:]
    assert lines[1].startswith("  error: "), lines[:3]
    return lines[1].removeprefix("  error: ")


def _folder(workdir: Path) -> Path:
    return workdir / "outputs" / "llama_debug" / "checkpoints"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_save_that_runs_out_of_space_is_one_line_and_the_previous_checkpoint_resumes(tmp_path, mode):
    """Rank 1's write of step 4 meets ENOSPC (with async, in the background; the run learns it
    at the next save, step 6)."""
    ckpt = COMMON + [f"checkpoint.async={'true' if mode == 'async' else 'false'}"]
    full = run_trainer(tmp_path, nproc=2, overrides=ckpt, env={faults.ENV: "enospc@1:4"})
    assert full.returncode == 2, full.stderr[-3000:]
    step2 = _folder(tmp_path) / "step-2"
    line = _error_line(full.stderr)
    assert line.startswith("no space left on device writing outputs/llama_debug/checkpoints/step-4: "), line
    size = write_errors.size_text(write_errors.tree_size(step2))
    assert re.search(rf" free on /\S*, about {re.escape(size)} needed; ", line), line  # the previous save's size
    assert "step-4.tmp was removed, step-2 is untouched" in line
    assert "inline_container" not in full.stderr and "Traceback" not in full.stderr.partition("---- last")[0]
    assert sorted(p.name for p in _folder(tmp_path).iterdir()) == ["step-2"]  # no step-4.tmp left

    resumed = ok(run_trainer(tmp_path, nproc=2, overrides=ckpt))
    assert "resumed from outputs/llama_debug/checkpoints/step-2 (step 2)" in resumed.stdout
    assert sorted(p.name for p in _folder(tmp_path).iterdir()) == ["step-2", "step-4", "step-6"]


def test_a_real_tmpfs_too_small_for_the_second_checkpoint(tmp_path):
    """root only: the debug model's checkpoint is about 73 MB; a 100 MiB tmpfs holds one."""
    with small_tmpfs(tmp_path / "small", "100m") as small:
        folder = small / "ck"
        full = run_trainer(tmp_path, nproc=2, overrides=COMMON + [f'checkpoint.folder="{folder}"'])
        assert full.returncode == 2, full.stderr[-3000:]
        line = _error_line(full.stderr)
        assert line.startswith(f"no space left on device writing {folder}/step-4: "), line
        assert f" free on {small}, about " in line
        assert "inline_container" not in full.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["step-2"]
