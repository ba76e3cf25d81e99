"""The trainer's samples: one dataset or a weighted mix, read in order or shuffled.

`open_samples(cfg.data, ...)` opens `data.dataset` (or each of `data.datasets`, every one
through `stream.open_dataset`: a prepared folder is mapped, never prepared again) and
returns `Samples`, whose `batch(indices, seq_len)` is what `TokenStream.batch` is to one
stream. Sample i is found by order.py from i alone, so resuming needs only the samples
consumed. With `data.shuffle` (the default) a prepared folder or corpus file is read as
whole windows of seq_len ids in a seeded random order, a new one each pass over the data;
"builtin" (generated in random order already) and `shuffle = false` read the stream in
order, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable

import numpy as np

from titan_train.data import order, stream
from titan_train.data.corpus import DataError


def entries(cfg) -> list[tuple[str, float]]:
    """(dataset, weight) of the [data] section: `datasets` with `weights`, else `dataset`."""
    if not cfg.datasets:
        return [(cfg.dataset, 1.0)]
    return list(zip(cfg.datasets, cfg.weights or [1.0] * len(cfg.datasets)))


def check_mixture(cfg) -> None:
    """The [data] mix settings against each other, one line each (the CLI's preflight)."""
    if not cfg.datasets:
        if cfg.weights:
            raise DataError("data.weights is set without data.datasets; list the datasets to mix, one weight each")
        return
    if cfg.dataset != "builtin":
        raise DataError(
            f"data.dataset = {cfg.dataset!r} and data.datasets are both set; put every dataset in data.datasets"
        )
    if cfg.weights and len(cfg.weights) != len(cfg.datasets):
        raise DataError(
            f"data.weights has {len(cfg.weights)} numbers for {len(cfg.datasets)} data.datasets; give one each"
        )
    if any(w <= 0 for w in cfg.weights):
        raise DataError(f"data.weights = {cfg.weights}: every weight must be > 0 (leave a dataset out instead)")
    starved = [d for d, q in zip(cfg.datasets, order.quotas([w for _, w in entries(cfg)])) if q == 0]
    if starved:
        raise DataError(
            f"data.weights: {starved[0]!r} gets under 1 in {order.BLOCK:,} samples; raise its weight or leave it out"
        )


def _shuffled(cfg, dataset: str) -> bool:
    return cfg.shuffle and dataset != "builtin"


class Samples:
    """Global sample numbers -> rows of seq_len + 1 ids, over one stream or a weighted mix."""

    def __init__(self, streams: list[stream.TokenStream], weights: list[float], shuffle: list[bool], seed: int):
        self.streams, self.shuffle, self.seed = streams, shuffle, seed
        self.mixture = order.Mixture(weights) if len(streams) > 1 else None
        self.identity = _identity(streams, weights) if len(streams) > 1 else streams[0].identity
        self.description = _describe(streams, weights, shuffle)

    def check_fits(self, seq_len: int, names: list[str]) -> None:
        for s, name in zip(self.streams, names):
            s.check_fits(seq_len, name)

    def locate(self, indices: Iterable[int], seq_len: int) -> list[tuple[int, int]]:
        """(dataset number, first id) of each global sample: its identity, for tests and logs."""
        i = np.fromiter(indices, dtype=np.int64)
        if self.mixture is None:
            k, m = np.zeros_like(i), i
        else:
            k, m = self.mixture.locate(i)
        starts = np.empty_like(i)
        for d, s in enumerate(self.streams):
            mine = k == d
            starts[mine] = _starts(s, m[mine], seq_len, self.shuffle[d], self.seed, d)
        return list(zip(k.tolist(), starts.tolist()))

    def batch(self, indices: Iterable[int], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Inputs and next-token targets of the given global samples."""
        rows = np.stack(
            [self.streams[k].read(start, seq_len + 1) for k, start in self.locate(indices, seq_len)]
        ).astype(np.int64)
        return rows[:, :-1], rows[:, 1:]


def _starts(s: stream.TokenStream, m: np.ndarray, seq_len: int, shuffle: bool, seed: int, dataset: int) -> np.ndarray:
    """First id of a dataset's m-th samples: a shuffled whole window, or the stream's own
    wrap-around order (`TokenStream.batch`'s formula, kept for unshuffled data)."""
    s.check_fits(seq_len)
    if shuffle:
        windows = (len(s) - 1) // seq_len  # window w reads ids [w * seq_len, (w + 1) * seq_len + 1)
        return order.shuffled_windows(m, windows, seed, dataset) * seq_len
    return (m * seq_len) % max(len(s) - seq_len - 1, 1)


def _identity(streams: list[stream.TokenStream], weights: list[float]) -> dict:
    """One identity for the mix: the tokenizer, and a digest of every part's content and weight."""
    parts = [{"identity": s.identity, "weight": w} for s, w in zip(streams, weights)]
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return {"tokenizer": streams[0].identity.get("tokenizer", ""), "tokens": digest}


def _describe(streams: list[stream.TokenStream], weights: list[float], shuffle: list[bool]) -> str:
    how = lambda on: "shuffled" if on else "in order"  # noqa: E731
    if len(streams) == 1:
        return f"{streams[0].description}, {how(shuffle[0])}"
    total = sum(weights)
    return "mix of " + "; ".join(
        f"{w / total:.1%} {s.description}, {how(on)}" for s, w, on in zip(streams, weights, shuffle)
    )


def open_samples(cfg, vocab_size: int, seq_len: int, log: Callable[[str], None] = print) -> Samples:
    """The [data] section's samples (every dataset refused here when too short for one)."""
    check_mixture(cfg)
    pairs = entries(cfg)
    streams = [stream.open_dataset(dataclasses.replace(cfg, dataset=d), vocab_size, seq_len, log) for d, _ in pairs]
    return Samples(streams, [w for _, w in pairs], [_shuffled(cfg, d) for d, _ in pairs], cfg.seed)


def check_samples(cfg, vocab_size: int, seq_len: int, validation: str = "") -> None:
    """What `open_samples` would refuse, before any rank starts: the mix settings, then
    stream.check_dataset for every dataset and for the `validation` one (when set)."""
    check_mixture(cfg)
    for d, _ in entries(cfg):
        stream.check_dataset(dataclasses.replace(cfg, dataset=d), vocab_size, seq_len)
    if validation:
        with _named_as_validation():
            stream.check_dataset(dataclasses.replace(cfg, dataset=validation), vocab_size, seq_len)


def open_held_out(cfg, dataset: str, vocab_size: int, seq_len: int, log=print) -> stream.TokenStream:
    """[validation] dataset's stream, read in order, with the [data] tokenizer."""
    with _named_as_validation():
        return stream.open_dataset(dataclasses.replace(cfg, dataset=dataset), vocab_size, seq_len, log)


@contextlib.contextmanager
def _named_as_validation():
    """A refusal of the validation dataset names validation.dataset, not data.dataset."""
    try:
        yield
    except DataError as e:
        raise DataError(str(e).replace("data.dataset", "validation.dataset")) from None
