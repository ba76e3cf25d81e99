"""Shuffled, mixed data through the real trainer: a run stopped and resumed twice trains the
losses of an uninterrupted run (the data position is the samples consumed)."""

from __future__ import annotations

import pytest

from .conftest import FAST, losses, ok, run_trainer

pytestmark = pytest.mark.multirank  # starts trainer processes


def test_a_mixed_shuffled_run_stopped_twice_trains_the_losses_of_a_straight_run(tmp_path):
    from titan_train.data import prepare
    from titan_train.data import stream as data

    docs = list(data.builtin_documents())
    for name, part in (("a", docs[:300]), ("b", docs[300:500])):
        (tmp_path / f"{name}.txt").write_text("\n\n".join(part))
        prepare.prepare([str(tmp_path / f"{name}.txt")], "byte", tmp_path / name, workers=1)
    mix = [f'data.datasets=["{tmp_path / "a"}", "{tmp_path / "b"}"]', "data.weights=[0.75, 0.25]", "data.seed=5"]
    common = FAST + ["training.steps=6", "checkpoint.save_interval=2", *mix]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir(), stopped.mkdir()
    first = ok(run_trainer(straight, overrides=common))
    assert "data mix of 75.0% " in first.stdout and "shuffled" in first.stdout
    for _ in range(2):
        ok(run_trainer(stopped, overrides=common, extra=["--stop-after", "2"]))
    last = ok(run_trainer(stopped, overrides=common))
    assert "(step 4)" in last.stdout
    want, got = losses(straight), losses(stopped)
    assert sorted(got) == list(range(1, 7))
    for step in range(1, 7):
        assert got[step] == pytest.approx(want[step], abs=1e-6), (step, got, want)
