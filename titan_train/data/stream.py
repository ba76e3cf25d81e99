"""Tokenizers and the token stream the trainer samples from.

`data.dataset` is one of: "builtin" (a generated offline corpus), a folder written by
`titan-train prepare-data` (memory-mapped: no rank reads or tokenizes the corpus at start,
so start-up time and RAM do not grow with it), or a small corpus file tokenized in memory by
every rank (a convenience; the log says so and how large it is).

Batches are a pure function of (samples consumed, step layout, dp rank): each dp rank reads
a disjoint slice of every global batch, all tp ranks of a group read the same slice, and
resuming only needs the number of samples consumed.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from titan_train.data import corpus, token_folder
from titan_train.data.corpus import DataError

__all__ = ["DataError"]  # re-exported: the trainer and CLI catch data.DataError


# ---------------------------------------------------------------- tokenizers


@dataclass(frozen=True)
class Tokenizer:
    name: str
    vocab_size: int
    eos_id: int | None
    encode_batch: Callable[[list[str]], list[list[int]]]
    sha256: str = ""  # of the tokenizer's definition: what a prepared dataset is checked against


def byte_tokenizer() -> Tokenizer:
    """UTF-8 bytes are the ids 0..255; 256 ends a document."""
    return Tokenizer(
        "byte",
        257,
        256,
        lambda texts: [list(t.encode("utf-8")) for t in texts],
        hashlib.sha256(b"titan-npu byte tokenizer: utf-8 bytes 0-255, eos 256").hexdigest(),
    )


_EOS_CANDIDATES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|eot_id|>")


def hf_tokenizer(path: str | Path) -> Tokenizer:
    """A HuggingFace `tokenizer.json` through the `tokenizers` package (extra: hf)."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise DataError(f'data.tokenizer: {path} not found (give a tokenizer.json file or "byte")')
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise DataError("data.tokenizer needs the 'tokenizers' package: pip install 'titan-npu[hf]'") from None
    definition = path.read_bytes()
    try:
        tok = HFTokenizer.from_str(definition.decode("utf-8"))
    except Exception as e:  # the tokenizers library raises plain Exception subclasses
        raise DataError(f"data.tokenizer: cannot read {path}: {e}") from None
    eos = next((tok.token_to_id(t) for t in _EOS_CANDIDATES if tok.token_to_id(t) is not None), None)

    # encode_batch_fast (tokenizers >= 0.20) skips character offsets we never read: ~15% less CPU
    batch_encoder = getattr(tok, "encode_batch_fast", tok.encode_batch)

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in batch_encoder(texts, add_special_tokens=False)]

    return Tokenizer(f"hf:{path}", tok.get_vocab_size(), eos, encode, hashlib.sha256(definition).hexdigest())


def load_tokenizer(spec: str) -> Tokenizer:
    return byte_tokenizer() if spec == "byte" else hf_tokenizer(spec)


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id: uint16 up to 65,536 ids."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def encode_documents(
    tok: Tokenizer,
    texts: list[str],
    *,
    open_end: bool = False,
    piece_chars: int = corpus.PIECE_CHARS,
    call_chars: int = corpus.CHUNK_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    """The documents' ids as one array, each document followed by the end-of-document id
    (when the tokenizer has one), and each document's length including it. With `open_end`
    the last text is the start of a document that the next call goes on with: no
    end-of-document id after it yet.

    The tokenizer's memory is about 200x a long text it is given whole, so it gets texts of
    at most `piece_chars` (a longer one is cut: `corpus.pieces`; where, and why the ids stay
    those of the whole text: `corpus.cut_index`), at most `call_chars` of them a call."""
    dtype = token_dtype(tok.vocab_size)
    eos = [] if tok.eos_id is None else [tok.eos_id]
    lengths = np.zeros(len(texts), dtype=np.int64)
    parts = []
    for owners, batch in _piece_batches(texts, piece_chars, call_chars):
        flat: list[int] = []
        for (doc, ends_doc), ids in zip(owners, tok.encode_batch(batch)):
            flat += ids
            lengths[doc] += len(ids)
            if ends_doc and not (open_end and doc == len(texts) - 1):
                flat += eos
                lengths[doc] += len(eos)
        parts.append(np.array(flat, dtype=dtype))  # per call: a huge record's ids never are one Python list
    if len(parts) == 1:
        return parts[0], lengths
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)), lengths


def _piece_batches(texts: list[str], piece_chars: int, call_chars: int):
    """(owners, pieces): the texts, cut into pieces of at most `piece_chars`, in batches of at
    most `call_chars` characters (or one piece); owners[i] = (document number, whether
    pieces[i] ends that document)."""
    if max(map(len, texts), default=0) <= piece_chars and sum(map(len, texts)) <= call_chars:
        yield [(i, True) for i in range(len(texts))], texts  # the usual chunk: one call
        return
    owners, batch, size = [], [], 0
    for doc, text in enumerate(texts):
        for piece, last in _with_last(corpus.pieces(text, piece_chars)):
            if batch and size + len(piece) > call_chars:
                yield owners, batch
                owners, batch, size = [], [], 0
            owners.append((doc, last))
            batch.append(piece)
            size += len(piece)
    if batch:
        yield owners, batch


def _with_last(items):
    """(item, whether it is the last) for each item, without listing them first."""
    it = iter(items)
    item = next(it)
    for following in it:
        yield item, False
        item = following
    yield item, True


def checked_tokenizer(tokenizer: str, dataset: str, vocab_size: int, index: dict | None = None) -> Tokenizer:
    """Load the tokenizer and check the data settings fit the model and each other, without
    reading the corpus (the CLI runs this before any rank starts). `index`: a prepared
    folder's index, when the caller has read it already."""
    tok = load_tokenizer(tokenizer)
    if tok.vocab_size > vocab_size:
        raise DataError(
            f"model.vocab_size = {vocab_size} is smaller than the tokenizer's "
            f"{tok.vocab_size} ids; set model.vocab_size >= {tok.vocab_size}"
        )
    if dataset == "builtin":
        return tok
    path = Path(dataset)
    if path.is_dir():
        index = index if index is not None else token_folder.read_index(path)
        token_folder.check_tokenizer(index, path, tokenizer, tok.sha256, tok.vocab_size)
    elif not path.is_file():
        raise DataError(
            f"data.dataset: {path} not found (give a folder made by `titan-train prepare-data`, "
            'a .txt / .jsonl file, or "builtin")'
        )
    elif not corpus.suffix_of(path):
        raise DataError(
            f"data.dataset: {path}: unsupported file type; use a folder made by "
            f"`titan-train prepare-data`, or one of {', '.join(corpus.SUFFIXES)}"
        )
    return tok


# ---------------------------------------------------------------- text sources

_SUBJECTS = [
    "the model",
    "a small llama",
    "the trainer",
    "every rank",
    "the optimizer",
    "our cluster",
    "the tokenizer",
    "a careful engineer",
    "the scheduler",
    "the checkpoint",
]
_VERBS = ["reads", "shards", "writes", "averages", "gathers", "scales", "saves", "restores", "counts", "checks"]
_OBJECTS = [
    "the gradients",
    "each batch",
    "the weights",
    "a long sequence",
    "the loss",
    "every shard",
    "the learning rate",
    "its own slice",
    "the attention heads",
    "the token stream",
]
_ENDINGS = [
    "before the next step",
    "on every device",
    "without a download",
    "in a fixed order",
    "after the warmup",
    "with care",
    "twice as fast",
    "at the end of the epoch",
]


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
                sentences.append(
                    f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} "
                    f"{rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}."
                )
        yield " ".join(sentences)


def builtin_chunks(chunk_docs: int = 512) -> Iterable[list[str]]:
    docs = list(builtin_documents())
    return (docs[i : i + chunk_docs] for i in range(0, len(docs), chunk_docs))


def load_tokens(dataset: str, tok: Tokenizer, text_field: str = "text") -> np.ndarray:
    """Tokenize "builtin" or one corpus file in this process, through the same reader and
    encoder as `prepare-data`, so both give the same stream."""
    if dataset == "builtin":
        parts = [encode_documents(tok, t)[0] for t in builtin_chunks()]
    else:
        files = corpus.find_sources([dataset])
        parts = [
            encode_documents(tok, corpus.documents(c, files[0], text_field), open_end=c.open_end)[0]
            for c in corpus.read_chunks(files, text_field)
        ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=token_dtype(tok.vocab_size))


# ---------------------------------------------------------------- the token stream


class TokenStream:
    """The corpus as one sequence of ids over one or more arrays (memory-mapped shards, or
    one array in RAM); reads that cross a shard boundary are stitched."""

    def __init__(self, parts: list[np.ndarray], description: str = "", identity: dict | None = None):
        self.parts = [p for p in parts if len(p)]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])
        self.description = description
        self.identity = identity or {}  # what the data is, by content: compared across ranks (same_job)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, start: int, length: int) -> np.ndarray:
        """ids [start, start + length) of the stream."""
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        pieces, need = [], length
        while need > 0:
            offset = start - int(self.starts[i])
            piece = self.parts[i][offset : offset + need]
            pieces.append(piece)
            need, start, i = need - len(piece), start + len(piece), i + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def check_fits(self, seq_len: int, where: str = "the dataset") -> None:
        """One sample needs seq_len + 1 ids (inputs and the shifted targets); exactly that many is enough."""
        if len(self) < seq_len + 1:
            raise DataError(
                f"{where} has {len(self):,} tokens, fewer than training.seq_len + 1 = {seq_len + 1:,} "
                f"that one sample needs; use more data or training.seq_len <= {max(len(self) - 1, 0)}"
            )

    def batch(self, indices: Iterable[int], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Inputs and next-token targets for the given samples; sample i starts at
        (i * seq_len) mod span and the stream wraps around. span stays len - seq_len - 1 (one
        start short of the last) so that longer datasets keep the sample order earlier runs
        trained and resumed with; a dataset of exactly seq_len + 1 ids has its one start."""
        self.check_fits(seq_len)
        span = max(len(self) - seq_len - 1, 1)
        rows = np.stack([self.read((i * seq_len) % span, seq_len + 1) for i in indices]).astype(np.int64)
        return rows[:, :-1], rows[:, 1:]


def make_batch(tokens: np.ndarray | TokenStream, indices: Iterable[int], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    stream = tokens if isinstance(tokens, TokenStream) else TokenStream([tokens])
    return stream.batch(indices, seq_len)


def _is_prepared(dataset: str) -> bool:
    return dataset != "builtin" and Path(dataset).is_dir()


def _mapped(folder: Path, index: dict | None = None) -> TokenStream:
    """A prepared folder's shards, memory-mapped (headers read and checked, no token data)."""
    index = index if index is not None else token_folder.read_index(folder)
    shards = token_folder.open_shards(folder, index)
    return TokenStream(
        shards,
        f"{folder} (memory-mapped, {index['tokens']:,} {index['dtype']} tokens "
        f"in {len(shards)} shard(s), {index['documents']:,} documents)",
    )


# A corpus file up to this size is tokenized once more by the CLI's preflight, to check its
# length before any rank starts; larger ones are checked by every rank before building the model.
PREFLIGHT_TOKENIZE_BYTES = 16 << 20


def check_dataset(cfg, vocab_size: int, seq_len: int) -> None:
    """What `open_dataset` would refuse, checked once before any rank starts (the CLI's
    preflight): the tokenizer against the model and a prepared folder's index, every shard's
    header against the index, and at least one sample (seq_len + 1 tokens) in a prepared
    folder or a corpus file (tokenized here when it is small; a text that is not UTF-8 is
    named by file:line)."""
    tok = checked_tokenizer(cfg.tokenizer, cfg.dataset, vocab_size)
    if _is_prepared(cfg.dataset):
        _mapped(Path(cfg.dataset)).check_fits(seq_len, cfg.dataset)
    elif cfg.dataset != "builtin" and Path(cfg.dataset).stat().st_size <= PREFLIGHT_TOKENIZE_BYTES:
        TokenStream([load_tokens(cfg.dataset, tok, cfg.text_field)]).check_fits(seq_len, cfg.dataset)


def open_dataset(cfg, vocab_size: int, seq_len: int = 0, log: Callable[[str], None] = print) -> TokenStream:
    """The token stream of the [data] section `cfg`: a prepared folder is memory-mapped;
    "builtin" and corpus files are tokenized here, in memory (the log says so, and how large).
    With `seq_len`, a stream too short for one sample is refused here, before any model is built."""
    stream = _open(cfg, vocab_size, log)
    if seq_len:
        stream.check_fits(seq_len, cfg.dataset)
    return stream


def _open(cfg, vocab_size: int, log: Callable[[str], None]) -> TokenStream:
    dataset, tokenizer = cfg.dataset, cfg.tokenizer
    path = Path(dataset)
    if _is_prepared(dataset):  # the index is read once: checked, mapped and recorded as the same bytes
        index, digest = token_folder.read_index_and_digest(path)
        tok = checked_tokenizer(tokenizer, dataset, vocab_size, index)
        stream = _mapped(path, index)
        stream.identity = {"tokenizer": tok.sha256, "index": digest}
        return stream
    tok = checked_tokenizer(tokenizer, dataset, vocab_size)
    if dataset != "builtin":
        log(
            f"[titan-train] data: tokenizing {path} ({path.stat().st_size / 1e6:,.1f} MB) in memory, in every "
            f"rank; for a large corpus run `titan-train prepare-data {path} --tokenizer {tokenizer} --out DIR` "
            "once and set data.dataset = DIR"
        )
    tokens = load_tokens(dataset, tok, cfg.text_field)
    identity = {"tokenizer": tok.sha256, "tokens": hashlib.sha256(np.ascontiguousarray(tokens).data).hexdigest()}
    return TokenStream([tokens], f"{tok.name}, {len(tokens):,} tokens tokenized in memory", identity)


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
