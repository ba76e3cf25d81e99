"""Tokenizers and datasets. The default needs no download: a generated corpus and a
byte-level tokenizer, both deterministic. Files (.txt / .jsonl) and HuggingFace
`tokenizer.json` are options.

Batches are a pure function of (samples consumed, step layout, dp rank): each dp rank reads
a disjoint slice of every global batch, all tp ranks of a group read the same slice, and
resuming only needs the number of samples consumed.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np


class DataError(Exception):
    """A data or tokenizer path/format problem (a user error, one line)."""


# ---------------------------------------------------------------- tokenizers

@dataclass(frozen=True)
class Tokenizer:
    name: str
    vocab_size: int
    eos_id: int | None
    encode_batch: Callable[[list[str]], list[list[int]]]


def byte_tokenizer() -> Tokenizer:
    """UTF-8 bytes are the ids 0..255; 256 ends a document."""
    return Tokenizer("byte", 257, 256, lambda texts: [list(t.encode("utf-8")) for t in texts])


_EOS_CANDIDATES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|eot_id|>")


def hf_tokenizer(path: str | Path) -> Tokenizer:
    """A HuggingFace `tokenizer.json` through the `tokenizers` package (extra: hf)."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise DataError(f"data.tokenizer: {path} not found (give a tokenizer.json file or \"byte\")")
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise DataError("data.tokenizer needs the 'tokenizers' package: pip install 'titan-npu[hf]'") from None
    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers library raises plain Exception subclasses
        raise DataError(f"data.tokenizer: cannot read {path}: {e}") from None
    eos = next((tok.token_to_id(t) for t in _EOS_CANDIDATES if tok.token_to_id(t) is not None), None)

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]

    return Tokenizer(f"hf:{path}", tok.get_vocab_size(), eos, encode)


def load_tokenizer(spec: str) -> Tokenizer:
    return byte_tokenizer() if spec == "byte" else hf_tokenizer(spec)


def checked_tokenizer(tokenizer: str, dataset: str, vocab_size: int) -> Tokenizer:
    """Load the tokenizer and check the data settings fit the model (before any training)."""
    tok = load_tokenizer(tokenizer)
    if tok.vocab_size > vocab_size:
        raise DataError(f"model.vocab_size = {vocab_size} is smaller than the tokenizer's "
                        f"{tok.vocab_size} ids; set model.vocab_size >= {tok.vocab_size}")
    if dataset != "builtin":
        _require_dataset(Path(dataset))
    return tok


def _require_dataset(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"data.dataset: {path} not found (give a .txt or .jsonl file, or \"builtin\")")


# ---------------------------------------------------------------- text sources

_SUBJECTS = ["the model", "a small llama", "the trainer", "every rank", "the optimizer", "our cluster",
             "the tokenizer", "a careful engineer", "the scheduler", "the checkpoint"]
_VERBS = ["reads", "shards", "writes", "averages", "gathers", "scales", "saves", "restores", "counts", "checks"]
_OBJECTS = ["the gradients", "each batch", "the weights", "a long sequence", "the loss", "every shard",
            "the learning rate", "its own slice", "the attention heads", "the token stream"]
_ENDINGS = ["before the next step", "on every device", "without a download", "in a fixed order",
            "after the warmup", "with care", "twice as fast", "at the end of the epoch"]


def builtin_documents(n_docs: int = 6000, seed: int = 1234) -> Iterable[str]:
    """A deterministic synthetic corpus with learnable structure (grammar + arithmetic)."""
    rng = random.Random(seed)
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(3, 8)):
            if rng.random() < 0.25:
                a, b = rng.randint(0, 99), rng.randint(0, 99)
                sentences.append(f"{a} plus {b} is {a + b}.")
            else:
                sentences.append(f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} "
                                 f"{rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}.")
        yield " ".join(sentences)


def file_documents(path: str | Path, text_field: str = "text") -> Iterable[str]:
    """Plain text (blank-line separated documents) or JSONL (one object per line)."""
    path = Path(path)
    _require_dataset(path)
    if path.suffix in (".jsonl", ".json"):
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"data.dataset: {path}:{lineno} is not valid JSON ({e.msg})") from None
                if not isinstance(obj, dict) or not isinstance(obj.get(text_field), str):
                    raise DataError(f"data.dataset: {path}:{lineno} has no string field {text_field!r} "
                                    "(set data.text_field)")
                yield obj[text_field]
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
        for doc in text.split("\n\n"):
            if doc.strip():
                yield doc


def tokenize_corpus(docs: Iterable[str], tok: Tokenizer, chunk: int = 512) -> np.ndarray:
    """All documents as one int32 stream, each followed by the end-of-document id."""
    parts: list[np.ndarray] = []
    batch: list[str] = []

    def flush():
        for ids in tok.encode_batch(batch):
            if tok.eos_id is not None:
                ids = ids + [tok.eos_id]
            parts.append(np.asarray(ids, dtype=np.int32))
        batch.clear()

    for doc in docs:
        batch.append(doc)
        if len(batch) >= chunk:
            flush()
    if batch:
        flush()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def load_tokens(dataset: str, tok: Tokenizer, text_field: str = "text") -> np.ndarray:
    docs = builtin_documents() if dataset == "builtin" else file_documents(dataset, text_field)
    return tokenize_corpus(docs, tok)


# ---------------------------------------------------------------- batching

@dataclass(frozen=True)
class BatchLayout:
    """How one global batch of `global_batch` sequences is cut: first into `accum`
    micro-batches, then each micro-batch over `dp` ranks."""

    global_batch: int
    accum: int
    dp: int

    @property
    def micro_batch(self) -> int:
        return self.global_batch // (self.accum * self.dp)


def sample_indices(consumed: int, layout: BatchLayout, micro: int, dp_rank: int) -> range:
    """Global sample numbers that `dp_rank` reads in micro-batch `micro` of the batch that
    starts after `consumed` samples."""
    start = consumed + micro * (layout.global_batch // layout.accum) + dp_rank * layout.micro_batch
    return range(start, start + layout.micro_batch)


def make_batch(tokens: np.ndarray, indices: range, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets for the given samples; the stream wraps around."""
    span = len(tokens) - seq_len - 1
    if span <= 0:
        raise DataError(f"the dataset has {len(tokens)} tokens, fewer than training.seq_len + 1 = {seq_len + 1}")
    starts = [(i * seq_len) % span for i in indices]
    rows = np.stack([tokens[s: s + seq_len + 1] for s in starts]).astype(np.int64)
    return rows[:, :-1], rows[:, 1:]
