"""An async checkpoint is complete the moment its background write is: a rank killed after
that, before the next save, resumes from it; one killed between the write and the rename
has it kept by the next run; only an incomplete step-N.tmp is set aside, with a line."""

from __future__ import annotations

from pathlib import Path

import pytest

from titan_train.checkpoint import lineage
from titan_train.checkpoint.manager import recover_partial
from titan_train.runtime import faults

from .conftest import FAST, losses, ok, run_trainer

STEPS = 6
COMMON = FAST + [f"training.steps={STEPS}"]
ASYNC_EVERY_4 = ["checkpoint.save_interval=4", "checkpoint.keep_last_n=0", "checkpoint.async=true"]


def checkpoints(workdir: Path) -> list[str]:
    return sorted(p.name for p in (workdir / "outputs" / "llama_debug" / "checkpoints").iterdir())


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, float]:
    """Losses of an uninterrupted 2-rank run."""
    wd = tmp_path_factory.mktemp("reference")
    ok(run_trainer(wd, nproc=2, overrides=COMMON))
    return losses(wd)


@pytest.mark.multirank
def test_kill_after_an_async_write_completed_resumes_from_it(tmp_path, reference):
    killed = run_trainer(tmp_path, nproc=2, overrides=COMMON + ASYNC_EVERY_4, env={faults.ENV: "kill_after_rename@0:4"})
    assert killed.returncode == 1, killed.stderr
    assert checkpoints(tmp_path) == ["step-4"]  # written whole, named at once
    resumed = ok(run_trainer(tmp_path, nproc=2, overrides=COMMON + ASYNC_EVERY_4))
    assert "resumed from outputs/llama_debug/checkpoints/step-4 (step 4)" in resumed.stdout
    got = losses(tmp_path)
    for step in (5, 6):
        assert got[step] == pytest.approx(reference[step], abs=1e-6), (step, got, reference)


@pytest.mark.multirank
def test_a_complete_write_whose_rename_a_crash_interrupted_is_kept(tmp_path, reference):
    killed = run_trainer(
        tmp_path, nproc=2, overrides=COMMON + ASYNC_EVERY_4, env={faults.ENV: "kill_before_rename@0:4"}
    )
    assert killed.returncode == 1, killed.stderr
    assert checkpoints(tmp_path) == ["step-4.tmp"]
    resumed = ok(run_trainer(tmp_path, nproc=2, overrides=COMMON + ASYNC_EVERY_4))
    assert (
        "[titan-train] step-4.tmp was completely written (a save whose rename a crash interrupted): kept as step-4"
    ) in resumed.stdout
    assert "resumed from outputs/llama_debug/checkpoints/step-4 (step 4)" in resumed.stdout
    assert checkpoints(tmp_path) == ["step-4", "step-6"]
    got = losses(tmp_path)
    for step in (5, 6):
        assert got[step] == pytest.approx(reference[step], abs=1e-6), (step, got, reference)


def test_an_incomplete_save_is_set_aside_with_a_line(tmp_path):
    half = tmp_path / "step-8.tmp"
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"half-written")
    (half / lineage.RECORD).write_text("{}")  # the record alone does not make it whole
    said = []
    recover_partial(tmp_path, said.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-8.incomplete"]
    assert (tmp_path / "step-8.incomplete" / "__0_0.distcp").read_bytes() == b"half-written"
    assert said == [
        "[titan-train] step-8.tmp is an incomplete save (a crash during the write): moved to "
        "step-8.incomplete, never resumed from; delete it to free the space"
    ]


def test_a_whole_tmp_never_replaces_a_complete_step(tmp_path):
    """step-N and a whole step-N.tmp (a rerun's save of the same step, cut off): the complete
    step-N stays; the tmp is set aside."""
    for name in ("step-4", "step-4.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / ".metadata").write_bytes(name.encode())
        (tmp_path / name / lineage.RECORD).write_text("{}")
    recover_partial(tmp_path, lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-4", "step-4.incomplete"]
    assert (tmp_path / "step-4" / ".metadata").read_bytes() == b"step-4"
