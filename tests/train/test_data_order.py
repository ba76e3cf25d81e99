"""Shuffled and mixed data: the order is a function of the samples consumed, so a run
stopped and resumed reads exactly the samples of an uninterrupted one; seeds give other
orders; a mix reads each dataset at its weight (data/order.py, data/samples.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from titan_train.config.job import ConfigError, DataConfig, from_raw, validate
from titan_train.data import order, prepare, samples
from titan_train.data import stream as data

SEQ = 32


def _folder(tmp_path, name: str, n_docs: int, seed: int):
    """A prepared folder (byte tokenizer) of `n_docs` distinct documents, written once."""
    rng = np.random.default_rng(seed)
    src = tmp_path / f"{name}.txt"
    src.write_text("\n\n".join(f"{name} document {i}: " + "x" * int(rng.integers(20, 200)) for i in range(n_docs)))
    out = tmp_path / name
    prepare.prepare([str(src)], "byte", out, workers=1, shard_tokens=5_000)  # reads stitch shards
    return out


def _open(**kw) -> samples.Samples:
    return samples.open_samples(DataConfig(**kw), 257, SEQ, log=lambda m: None)


def test_a_shuffled_pass_reads_every_window_once_and_the_next_pass_in_another_order(tmp_path):
    s = _open(dataset=str(_folder(tmp_path, "a", 300, 0)))
    n = (len(s.streams[0]) - 1) // SEQ
    first = [start for _, start in s.locate(range(n), SEQ)]
    second = [start for _, start in s.locate(range(n, 2 * n), SEQ)]
    assert sorted(first) == sorted(second) == [w * SEQ for w in range(n)]
    assert first != sorted(first) and first != second  # shuffled, and reshuffled each pass
    x, y = s.batch(range(5), SEQ)
    for row, (_, start) in zip(range(5), s.locate(range(5), SEQ)):  # the rows are those windows
        assert x[row].tolist() == s.streams[0].read(start, SEQ).tolist()
        assert y[row].tolist() == s.streams[0].read(start + 1, SEQ).tolist()


def test_two_seeds_give_different_orders_and_one_seed_always_the_same(tmp_path):
    folder = str(_folder(tmp_path, "a", 300, 0))
    a, a_again, b = _open(dataset=folder, seed=0), _open(dataset=folder, seed=0), _open(dataset=folder, seed=1)
    ids = lambda s: s.locate(range(200), SEQ)  # noqa: E731
    assert ids(a) == ids(a_again)
    assert ids(a) != ids(b)
    assert sum(x == y for x, y in zip(ids(a), ids(b))) < 20  # not merely a shifted copy


def test_shuffle_off_and_builtin_keep_the_stream_order(tmp_path):
    folder = str(_folder(tmp_path, "a", 300, 0))
    off = _open(dataset=folder, shuffle=False)
    indices = range(3, 40)
    for got, want in zip(off.batch(indices, SEQ), off.streams[0].batch(indices, SEQ)):
        assert np.array_equal(got, want)
    builtin = _open()  # generated in random order already: read as before
    assert "in order" in builtin.description and "shuffled" in _open(dataset=folder).description
    assert [start for _, start in builtin.locate(range(4), SEQ)] == [0, SEQ, 2 * SEQ, 3 * SEQ]


def _trainer_steps(s, *, steps: int, start_step: int, batch: int, accum: int, dp: int):
    """What the trainer's loop reads from step start_step + 1 to `steps`: per step and dp rank
    the sample ids (dataset, first id) and the input tensors (train._batches)."""
    from titan_train.train import _batches

    layout = data.BatchLayout(batch, accum, dp)
    out = {}
    for step in range(start_step, steps):
        consumed = step * batch  # Progress.samples after `step` steps: all the resume keeps
        for rank in range(dp):
            ids = [s.locate(data.sample_indices(consumed, layout, micro, rank), SEQ) for micro in range(layout.accum)]
            tensors = [x.tolist() for x, _ in _batches(s, layout, consumed, rank, SEQ, "cpu")]
            out[(step + 1, rank)] = (ids, tensors)
    return out


@pytest.mark.parametrize("mixed", [False, True])
def test_a_run_stopped_and_resumed_twice_reads_the_samples_of_an_uninterrupted_run(tmp_path, mixed):
    a, b = str(_folder(tmp_path, "a", 300, 0)), str(_folder(tmp_path, "b", 200, 1))
    kw = dict(datasets=[a, b], weights=[3.0, 1.0], seed=7) if mixed else dict(dataset=a, seed=7)
    layout = dict(batch=8, accum=2, dp=2)
    straight = _trainer_steps(_open(**kw), steps=30, start_step=0, **layout)
    resumed = {}
    for begin, end in ((0, 7), (7, 19), (19, 30)):  # each segment a new process: reopened from disk
        resumed.update(_trainer_steps(_open(**kw), steps=end, start_step=begin, **layout))
    assert resumed == straight
    # sanity: the batches are not trivially equal (every step reads new samples)
    ids = [start for (ids, _) in straight.values() for micro in ids for start in micro]
    assert len(set(ids)) == len(ids)
    if mixed:
        assert {k for k, _ in ids} == {0, 1}


def test_a_mix_reads_each_dataset_at_its_weight(tmp_path):
    folders = [str(_folder(tmp_path, name, 150, i)) for i, name in enumerate("abc")]
    weights = [0.6, 0.3, 0.1]
    s = _open(datasets=folders, weights=weights)
    for offset in (0, 12_345, order.BLOCK - 500):  # any 1,000 consecutive samples, across a block edge too
        owners = [k for k, _ in s.locate(range(offset, offset + 1000), SEQ)]
        shares = np.bincount(owners, minlength=3) / 1000
        assert np.abs(shares - weights).max() <= 0.02, (offset, shares)
    # each dataset is read in its own shuffled order: its first n samples are its n windows
    for k, stream in enumerate(s.streams):
        n = (len(stream) - 1) // SEQ
        starts = [start for d, start in s.locate(range(4 * n * 10), SEQ) if d == k][:n]
        assert sorted(starts) == [w * SEQ for w in range(n)], k
    assert s.description.startswith("mix of 60.0% ")
    # weights are relative: 6:3:1 is the same mix
    assert _open(datasets=folders, weights=[6, 3, 1]).locate(range(300), SEQ) == s.locate(range(300), SEQ)


def test_a_mix_records_one_identity_of_its_parts(tmp_path):
    a, b = str(_folder(tmp_path, "a", 100, 0)), str(_folder(tmp_path, "b", 100, 1))
    mix = _open(datasets=[a, b], weights=[1, 1])
    other = _open(datasets=[a, b], weights=[1, 2])
    assert mix.identity["tokenizer"] == _open(dataset=a).identity["tokenizer"]
    assert mix.identity["tokens"] != other.identity["tokens"]  # the weights are part of what was read


@pytest.mark.parametrize(
    "data_section,message",
    [
        ({"datasets": ["a", "b"], "weights": [1.0]}, "data.weights has 1 numbers for 2 data.datasets"),
        ({"dataset": "x", "datasets": ["a"]}, "data.dataset = 'x' and data.datasets are both set"),
        ({"weights": [1.0]}, "data.weights is set without data.datasets"),
        ({"datasets": ["a", "b"], "weights": [1.0, 1e-9]}, "'b' gets under 1 in 65,536 samples"),
    ],
)
def test_mix_settings_that_cannot_work_are_one_line(data_section, message):
    with pytest.raises(data.DataError, match=message):
        samples.check_mixture(dataclasses.replace(DataConfig(), **data_section))


def test_mix_settings_in_toml_are_typed_and_ranged():
    cfg = from_raw({"data": {"datasets": ["a", "b"], "weights": [2, 1], "seed": 3, "shuffle": False}})
    assert (cfg.data.datasets, cfg.data.weights, cfg.data.seed, cfg.data.shuffle) == (["a", "b"], [2.0, 1.0], 3, False)
    with pytest.raises(ConfigError, match=r"data.datasets = 'a': expected a list of strings"):
        from_raw({"data": {"datasets": "a"}})
    with pytest.raises(ConfigError, match=r"data.weights = \[1.0, 0.0\]: every element must be > 0"):
        validate(from_raw({"data": {"datasets": ["a", "b"], "weights": [1, 0]}}), 1)
