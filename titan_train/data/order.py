"""Which window of which dataset a global sample number reads: the seeded shuffle and the
weighted mix, both pure functions of the sample number.

The trainer's data position is one integer, the samples consumed (checkpointed with the
step). Everything here maps that number to a place without state, so a resumed run reads
exactly what an uninterrupted run would have read, and every rank computes the same order:

- mix: several datasets by weight. The weights become integer quotas over a block of
  `BLOCK` samples (largest remainder), interleaved smoothly (the j-th sample of dataset k
  sits at time (j + 0.5) / quota_k), and the block repeats. Sample i belongs to dataset
  pattern[i % BLOCK] and is that dataset's (i // BLOCK) * quota + (earlier ones in the
  block)-th sample, so each dataset is read in its own order, one sample after another.
- shuffle: a dataset's m-th sample is window perm_e(m mod n) of its n windows of seq_len
  ids in epoch e = m // n: a new permutation each epoch, drawn from (seed, dataset, epoch)
  by a keyed Feistel network with cycle walking (a bijection on [0, n) computed per index:
  no permutation table, so memory does not grow with the corpus).
"""

from __future__ import annotations

import numpy as np

BLOCK = 1 << 16  # samples per mixing period: weights are honoured to 1 / 65,536
_ROUNDS = 6
_U64 = (1 << 64) - 1


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a well-spread 64-bit hash of each element (uint64, wrapping)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(_U64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def epoch_key(seed: int, dataset: int, epoch: np.ndarray) -> np.ndarray:
    """The permutation key of (seed, dataset, epoch), one per element of `epoch`."""
    base = _mix64(np.array([seed & _U64], dtype=np.uint64)) ^ np.uint64(dataset & _U64)
    return _mix64(_mix64(base) + epoch.astype(np.uint64))


def permute(j: np.ndarray, n: int, keys: np.ndarray) -> np.ndarray:
    """perm_key(j) for each j in [0, n): a bijection of [0, n) per key."""
    j = np.asarray(j, dtype=np.uint64)
    if n <= 1:
        return np.zeros(j.shape, dtype=np.int64)
    half = max(1, ((n - 1).bit_length() + 1) // 2)  # the Feistel domain 4**half >= n, < 4n
    mask = np.uint64((1 << half) - 1)
    keys = np.broadcast_to(np.asarray(keys, dtype=np.uint64), j.shape)
    out = j.copy()
    todo = np.ones(j.shape, dtype=bool)
    while todo.any():  # cycle walking: apply again until the value falls inside [0, n)
        x, k = out[todo], keys[todo]
        left, right = x >> np.uint64(half), x & mask
        for r in range(_ROUNDS):
            left, right = right, left ^ (_mix64(right ^ _mix64(k + np.uint64(r))) & mask)
        out[todo] = (left << np.uint64(half)) | right
        todo = out >= np.uint64(n)
    return out.astype(np.int64)


def shuffled_windows(m: np.ndarray, n: int, seed: int, dataset: int = 0) -> np.ndarray:
    """The window number (of n) that a dataset's m-th sample reads, in shuffled order."""
    m = np.asarray(m, dtype=np.int64)
    epoch = m // n
    return permute(m % n, n, epoch_key(seed, dataset, epoch))


def quotas(weights: list[float], block: int = BLOCK) -> np.ndarray:
    """Integer samples per block for each weight (normalized, largest remainder)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = np.round(w / w.sum() * block, 6)  # 6:3:1 and 0.6:0.3:0.1 tie alike (no float noise)
    q = np.floor(exact).astype(np.int64)
    q[np.argsort(-(exact - q), kind="stable")[: block - int(q.sum())]] += 1
    return q


class Mixture:
    """Global sample numbers -> (dataset, that dataset's sample number), by weight."""

    def __init__(self, weights: list[float], block: int = BLOCK):
        self.block = block
        self.quotas = quotas(weights, block)
        times = np.concatenate([(np.arange(q) + 0.5) / q for q in self.quotas if q])
        owners = np.concatenate([np.full(q, k) for k, q in enumerate(self.quotas) if q])
        self.pattern = owners[np.argsort(times, kind="stable")]
        counts = np.zeros((block + 1, len(self.quotas)), dtype=np.int64)
        counts[np.arange(1, block + 1), self.pattern] = 1
        self.before = np.cumsum(counts, axis=0)[:-1]  # before[t, k]: dataset k's samples at t' < t

    def locate(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.asarray(i, dtype=np.int64)
        b, t = i // self.block, i % self.block
        k = self.pattern[t]
        return k, b * self.quotas[k] + self.before[t, k]
