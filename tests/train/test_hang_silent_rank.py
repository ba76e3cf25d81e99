"""A hung rank that can write no stack dump (stopped with SIGSTOP, or stuck where Python's
signal handler never runs) is the one the hang summary names: the others, waiting for it
in a collective, all dumped theirs."""

from __future__ import annotations

import time

import pytest

from titan_train.runtime import faults
from titan_train.runtime.watchdog import EXIT_HANG, stuck_ranks

from .conftest import FAST, run_trainer


def _dump(rank: int, waiting: bool, issued: int) -> dict:
    return {"rank": rank, "path": None, "waiting": waiting, "issued": issued}


def test_a_rank_without_a_dump_is_named_before_any_other_evidence():
    dumps = [_dump(0, True, 12), _dump(2, True, 12), _dump(3, False, 11)]
    assert stuck_ranks(dumps, [0, 1, 2, 3]) == (
        [1],
        "wrote no stack dump: stopped, or stuck outside Python; the others wait for it",
    )


def test_without_a_silent_rank_the_idle_one_and_then_the_fewest_collectives_are_named():
    assert stuck_ranks([_dump(0, True, 5), _dump(1, False, 5)], [0, 1])[0] == [1]
    assert stuck_ranks([_dump(0, True, 5), _dump(1, True, 4)], [0, 1]) == (
        [1],
        "issued fewer collectives than the others",
    )
    assert stuck_ranks([], [0, 1]) == ([], "")  # nobody dumped: nothing to compare


@pytest.mark.multirank
def test_a_stopped_rank_is_named_in_the_hang_summary(tmp_path):
    watchdog = ["watchdog.factor=4", "watchdog.floor_s=2", "watchdog.startup_s=60"]
    start = time.monotonic()
    hung = run_trainer(
        tmp_path, nproc=2, overrides=FAST + ["training.steps=6"] + watchdog, env={faults.ENV: "stop@1:4"}, timeout=240
    )
    assert hung.returncode == EXIT_HANG, hung.stdout[-2000:] + hung.stderr[-2000:]
    assert time.monotonic() - start < 120
    dumps = tmp_path / "outputs" / "llama_debug" / "hang"
    assert sorted(p.name for p in dumps.iterdir()) == ["rank0.txt"]
    assert (
        "  stuck: rank 1 (wrote no stack dump: stopped, or stuck outside Python; the others wait for it)" in hung.stderr
    ), hung.stderr
