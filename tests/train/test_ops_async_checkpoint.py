"""[checkpoint] async_save: training continues while DCP writes step-N.tmp; the folder is
renamed to step-N only when every rank's write is done, and it holds the state of step N."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from titan_train.runtime import launch

from .conftest import trainer_env

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes

WORKER = Path(__file__).with_name("async_ckpt_worker.py")


def test_async_save_holds_the_saved_step_and_is_named_only_when_written(tmp_path):
    env = dict(trainer_env(), CKPT_DIR=str(tmp_path / "ckpt"))
    result = launch.start_ranks(
        [sys.executable, str(WORKER)],
        launch.LaunchOptions(nproc=2),
        env,
        tmp_path / "logs",
        echo_rank0=False,
        timeout_s=240,
    )
    assert result.exit_code == 0, launch.summary(result, tmp_path) + launch.read_log(result.ranks[0].log)
    for rank in (0, 1):
        report = json.loads((tmp_path / f"async_rank{rank}.json").read_text())
        assert report["named_early"] is False  # not resumable while in flight
        assert report["moved"] is True  # the model did change during the write ...
        assert report["same"] is True  # ... and the checkpoint still holds step 2
        assert report["step"] == 2 and report["final"].endswith("step-2") and not report["tmp_left"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-2"]
