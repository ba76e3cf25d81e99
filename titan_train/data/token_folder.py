"""A prepared dataset folder: what `titan-train prepare-data` writes and the trainer maps.

    DIR/index.json          what is inside (tokenizer, dtype, shards, sources); written last
    DIR/tokens-00000.npy    token ids, 1-D, uint16 (vocabularies up to 65,536 ids) or uint32;
                            the corpus is the shards in order, one document after another
    DIR/doc_ends-00000.npy  int64 end offsets, in the whole stream, of the documents that
                            end in that shard (the document boundaries)

Shards are plain `.npy` files, opened with `np.load(mmap_mode="r")`: the trainer reads their
headers at start and only the pages its batches touch. The folder is written as a hidden
sibling `.DIR.partial-PID` and renamed to DIR after every file is synced, so a folder named
DIR is always complete; a killed run leaves only the hidden one (removed by the next run).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from titan_train.data.corpus import DataError
from titan_train.runtime.processes import pid_alive as _alive

FORMAT = "titan-npu/tokens"
VERSION = 1
INDEX = "index.json"
PREPARE_HINT = "run `titan-train prepare-data` to make one"


# ---------------------------------------------------------------- writing


class ShardWriter:
    """Cuts the token stream into shards of `shard_tokens` ids, holding at most one shard in RAM."""

    def __init__(self, folder: Path, dtype: np.dtype, shard_tokens: int):
        self.folder, self.dtype = folder, np.dtype(dtype)
        self.buffer = np.empty(shard_tokens, dtype=self.dtype)
        self.fill = 0  # ids in the buffer
        self.written = 0  # ids already in shard files
        self.pending_ends: list[np.ndarray] = []
        self.shards: list[dict] = []
        self.open_tokens = 0  # ids so far of a document that the next add goes on with

    @property
    def total(self) -> int:
        return self.written + self.fill

    def add(self, tokens: np.ndarray, doc_lengths: np.ndarray, open_end: bool = False) -> int:
        """Append documents; returns how many ended here with at least one id (a document
        with none, empty and no end-of-document id, has no boundary of its own). With
        `open_end` the last length is the start of a long document, read in pieces, that the
        next add goes on with; the first length of an add is then that document's next piece."""
        ends = self.total + np.cumsum(doc_lengths, dtype=np.int64)
        whole = doc_lengths.copy()  # each document's ids, with those of its pieces in earlier adds
        whole[:1] += self.open_tokens
        self.open_tokens = int(whole[-1]) if open_end else 0
        if open_end:
            ends, whole = ends[:-1], whole[:-1]
        ended = ends[whole > 0]
        self.pending_ends.append(ended)
        pos = 0
        while pos < len(tokens):
            n = min(len(self.buffer) - self.fill, len(tokens) - pos)
            self.buffer[self.fill : self.fill + n] = tokens[pos : pos + n]
            self.fill, pos = self.fill + n, pos + n
            if self.fill == len(self.buffer):
                self._flush()
        return len(ended)

    def close(self) -> list[dict]:
        if self.open_tokens:  # the reader's promise that a continued document goes on was broken
            raise RuntimeError("the last document was left open (a corpus reader bug)")
        if self.fill:
            self._flush()
        return self.shards

    def _flush(self) -> None:
        end = self.written + self.fill
        ends = np.concatenate(self.pending_ends) if self.pending_ends else np.empty(0, np.int64)
        self.pending_ends = [ends[ends > end]]
        i = len(self.shards)
        entry = {
            "tokens_file": f"tokens-{i:05d}.npy",
            "doc_ends_file": f"doc_ends-{i:05d}.npy",
            "tokens": int(self.fill),
            "documents_ending": int((ends <= end).sum()),
        }
        _save(self.folder / entry["tokens_file"], self.buffer[: self.fill])
        _save(self.folder / entry["doc_ends_file"], ends[ends <= end])
        self.shards.append(entry)
        self.written, self.fill = end, 0


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())


def partial_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.partial-{os.getpid()}"


def check_destination(out: Path, force: bool) -> None:
    """Refuse before any work: an existing DIR needs --force, and --force only replaces a
    prepared dataset or an empty folder, never anything else."""
    if not out.exists():
        return
    if not force:
        raise DataError(f"{out} already exists; pass --force to replace it")
    if not out.is_dir() or not ((out / INDEX).is_file() or not any(out.iterdir())):
        raise DataError(f"refusing to replace {out}: it is not a prepared dataset (no {INDEX})")


def remove_stale_partials(out: Path) -> list[Path]:
    """Hidden partial folders of runs that are no longer alive (killed mid-way)."""
    removed = []
    for p in out.parent.glob(f".{out.name}.partial-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def publish(partial: Path, index: dict, out: Path, force: bool) -> None:
    """Write index.json last, sync, and rename the partial folder to `out` in one step."""
    with open(partial / INDEX, "w", encoding="utf-8") as fh:
        json.dump(index, fh, indent=1)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    check_destination(out, force)  # again: something may have appeared meanwhile
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
    os.rename(partial, out)
    _sync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old)


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync a directory; the rename itself is still atomic
    finally:
        os.close(fd)


# ---------------------------------------------------------------- reading


def read_index(folder: Path) -> dict:
    return read_index_and_digest(folder)[0]


def read_index_and_digest(folder: Path) -> tuple[dict, str]:
    """The index and the sha256 of its bytes, from one read: the identity a checkpoint records
    is then that of the very index the run opened, even if the folder is rebuilt meanwhile."""
    path = folder / INDEX
    if not path.is_file():
        raise DataError(f"data.dataset: {folder} is a folder without {INDEX}, not a prepared dataset; {PREPARE_HINT}")
    raw = path.read_bytes()
    try:
        index = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"data.dataset: {path} is not valid JSON ({e}); prepare the data again") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"data.dataset: {path} is not a titan-npu token index (format {FORMAT!r})")
    if index.get("version", 0) > VERSION:
        raise DataError(
            f"data.dataset: {folder} has format version {index['version']}, newer than this "
            f"titan-npu reads ({VERSION}); upgrade titan-npu or prepare the data again"
        )
    return index, hashlib.sha256(raw).hexdigest()


def check_tokenizer(index: dict, folder: Path, spec: str, sha256: str, vocab_size: int) -> None:
    """The configured tokenizer must be the one the folder was tokenized with."""
    made = index["tokenizer"]
    if made["sha256"] != sha256:
        raise DataError(
            f"data.tokenizer = {spec!r} is not the tokenizer {folder} was prepared with "
            f"({made['spec']}, sha256 {made['sha256'][:12]}); set data.tokenizer = {made['spec']!r} "
            "or prepare the data again with this tokenizer"
        )
    if made["vocab_size"] != vocab_size:
        raise DataError(
            f"data.tokenizer = {spec!r} has {vocab_size} ids but {folder} was prepared with "
            f"{made['vocab_size']}; prepare the data again"
        )


def open_shards(folder: Path, index: dict) -> list[np.ndarray]:
    """Memory-map every shard (reads headers only) and check each against the index."""
    dtype = np.dtype(index["dtype"])
    arrays = []
    for shard in index["shards"]:
        path = folder / shard["tokens_file"]
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"data.dataset: {path} cannot be mapped ({e}); prepare the data again") from None
        if array.dtype != dtype or array.shape != (shard["tokens"],):
            raise DataError(
                f"data.dataset: {path} holds {array.shape[0]:,} {array.dtype} ids but {INDEX} says "
                f"{shard['tokens']:,} {dtype}; prepare the data again"
            )
        arrays.append(array)
    return arrays
