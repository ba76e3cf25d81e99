"""`titan-train prepare-data`: tokenize a corpus once, offline, into a folder the trainer
memory-maps (format: token_folder.py).

Work is cut into chunks of about 1 MiB of text (corpus.py), and a long document is read and
tokenized in pieces, so memory grows neither with the corpus nor with its longest document.
Worker processes parse the JSON and run the `tokenizers` batch encoder on each chunk, one
Rust thread each, so parsing and the id conversion (which hold the GIL) run in parallel too;
this process only reads, and writes the results back in input order. The output is
therefore the same for any number of workers, and the same as the trainer's in-memory path
(`data.load_tokens`).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from titan_train.data import corpus, token_folder
from titan_train.data import stream as data
from titan_train.data.corpus import DataError

DEFAULT_SHARD_TOKENS = 1 << 27  # 128 Mi ids: 256 MiB of uint16 per shard


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Encoded:
    source: int
    tokens: np.ndarray
    doc_lengths: np.ndarray
    nbytes: int
    open_end: bool  # the last document goes on in the next chunk (corpus.Chunk.open_end)


class ChunkEncoder:
    """Chunk -> ids; one per process (the tokenizer is loaded where it runs)."""

    def __init__(
        self,
        tokenizer: str,
        text_field: str,
        files: list[Path],
        piece_chars: int = corpus.PIECE_CHARS,
        call_chars: int = corpus.CHUNK_BYTES,
    ):
        self.tok = data.load_tokenizer(tokenizer)
        self.text_field, self.files = text_field, files
        self.sizes = {"piece_chars": piece_chars, "call_chars": call_chars}

    def __call__(self, chunk: corpus.Chunk) -> Encoded:
        texts = corpus.documents(chunk, self.files[chunk.source], self.text_field)
        tokens, lengths = data.encode_documents(self.tok, texts, open_end=chunk.open_end, **self.sizes)
        return Encoded(chunk.source, tokens, lengths, chunk.nbytes, chunk.open_end)


_WORKER: ChunkEncoder | None = None


def _start_worker(*encoder_args) -> None:
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle, once
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    _WORKER = ChunkEncoder(*encoder_args)


def _encode_in_worker(chunk: corpus.Chunk) -> Encoded:
    return _WORKER(chunk)


def _encoded_in_order(chunks, encoder_args: tuple, workers: int):
    """Encoded chunks in input order; at most 2 per worker in flight, so memory stays flat
    however large the corpus."""
    if workers <= 1:
        encode = ChunkEncoder(*encoder_args)
        yield from map(encode, chunks)
        return
    pool = ProcessPoolExecutor(
        workers, mp_context=get_context("spawn"), initializer=_start_worker, initargs=encoder_args
    )
    pending: deque = deque()
    try:
        for chunk in chunks:
            pending.append(pool.submit(_encode_in_worker, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool:
        raise DataError(
            f"a tokenizing worker process died (killed, or out of memory); "
            f"try fewer workers (--workers {max(1, workers // 2)})"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def check_apart(sources: list[str], out: Path) -> None:
    """Refuse, before any work, an output folder inside an input folder (the next run would
    read the written folder as input) or an input inside the output folder (--force
    would replace it). Compared as resolved paths, so `./x`, `x/../x` and symlinks count."""
    target = out.resolve()
    for spec in sources:
        source = Path(spec).resolve()
        if target == source or target.is_relative_to(source):
            raise DataError(
                f"the output folder {out} is inside the input {spec}, so a later run would read it as input; "
                "choose an --out outside the inputs"
            )
        if source.is_relative_to(target):
            raise DataError(
                f"the input {spec} is inside the output folder {out}, which --force replaces; "
                "choose an --out outside the inputs"
            )


def prepare(
    sources: list[str],
    tokenizer: str,
    out: str | Path,
    *,
    text_field: str = "text",
    workers: int = 0,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    force: bool = False,
    on_progress: Callable[[int], None] = lambda nbytes: None,
    chunk_bytes: int = corpus.CHUNK_BYTES,
    piece_chars: int = corpus.PIECE_CHARS,
) -> dict:
    """Tokenize `sources` into the folder `out`; returns its index. Nothing named `out`
    exists until the whole folder is written. Each file is read once however it was named,
    and must not change while it is read (its recorded size would be wrong)."""
    out = Path(out)
    check_apart(sources, out)
    files = corpus.find_sources(sources)
    tok = data.load_tokenizer(tokenizer)
    token_folder.check_destination(out, force)
    states = [corpus.file_state(f) for f in files]  # before reading: the sizes the index records
    out.parent.mkdir(parents=True, exist_ok=True)
    token_folder.remove_stale_partials(out)
    partial = token_folder.partial_folder(out)
    partial.mkdir()
    started = time.perf_counter()
    try:
        dtype = data.token_dtype(tok.vocab_size)
        writer = token_folder.ShardWriter(partial, dtype, shard_tokens)
        stats = [
            {"path": str(f.resolve()), "bytes": state[0], "documents": 0, "tokens": 0}
            for f, state in zip(files, states)
        ]
        chunks = corpus.read_chunks(files, text_field, chunk_bytes, hold_chars=chunk_bytes, states=states)
        spec = tokenizer if tokenizer == "byte" else str(Path(tokenizer).resolve())
        encoder_args = (spec, text_field, files, piece_chars, chunk_bytes)
        for enc in _encoded_in_order(chunks, encoder_args, workers or default_workers()):
            stats[enc.source]["documents"] += writer.add(enc.tokens, enc.doc_lengths, enc.open_end)
            stats[enc.source]["tokens"] += len(enc.tokens)
            on_progress(enc.nbytes)
        shards = writer.close()
        if not shards:
            raise DataError(f"no documents in {', '.join(sources)} (empty files, or no text in field {text_field!r})")
        elapsed = time.perf_counter() - started
        index = {
            "format": token_folder.FORMAT,
            "version": token_folder.VERSION,
            "dtype": dtype.name,
            "tokens": writer.total,
            "documents": sum(s["documents"] for s in stats),
            "tokenizer": {
                "spec": spec,
                "name": tok.name,
                "sha256": tok.sha256,
                "vocab_size": tok.vocab_size,
                "eos_id": tok.eos_id,
            },
            "text_field": text_field,
            "shards": shards,
            "sources": stats,
            "prepare": {"seconds": round(elapsed, 3), "workers": workers or default_workers()},
        }
        token_folder.publish(partial, index, out, force)
        return index
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # gone already when published


def summary(index: dict, out: Path) -> str:
    size = sum(s["bytes"] for s in index["sources"])
    secs = max(index["prepare"]["seconds"], 1e-9)
    return (
        f"wrote {out}: {index['tokens']:,} tokens ({index['dtype']}, {len(index['shards'])} shard(s)) from "
        f"{index['documents']:,} documents in {len(index['sources'])} file(s), {size / 1e6:,.1f} MB in "
        f"{secs:.1f} s: {size / 1e6 / secs:,.2f} MB/s, {index['tokens'] / secs:,.0f} tokens/s "
        f"({index['prepare']['workers']} workers)"
    )
