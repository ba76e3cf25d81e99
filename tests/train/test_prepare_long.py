"""prepare-data on long documents: a document is read and tokenized in bounded pieces (the
tokenizer's memory is ~200x what it gets at once), and the pieces' ids are the whole
document's: the cut places keep them for byte-level BPE and Metaspace tokenizers."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from titan_train.data import corpus, prepare
from titan_train.data import stream as data

from .conftest import TINYSHAKESPEARE, TOKENIZER_2K, needs_tokenizer_2k

MIB = 1 << 20
needs_shakespeare = pytest.mark.skipif(not TINYSHAKESPEARE.is_file(), reason="shared test assets absent")


def _one_long_document(n_chars: int, seed: int = 0) -> str:
    """Words, spaces and single line ends, never a blank line: one .txt document."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "ünïcode", "数据", "x", "12345", "end.", "don't", "(", "),"]
    parts, size = [], 0
    while size < n_chars:
        parts.append(rng.choice(words) + rng.choice([" ", " ", " ", "\n"]))
        size += len(parts[-1])
    return "start " + "".join(parts).rstrip()


def test_a_long_text_document_is_read_in_bounded_pieces(tmp_path):
    """Before: the reader held a document whole until its blank line (a 3 MiB item here; 4 GiB
    of RSS for a 20 MB document once tokenized)."""
    text = _one_long_document(3 * MIB)
    (tmp_path / "one.txt").write_text(text)
    chunks = list(corpus.read_chunks([tmp_path / "one.txt"]))
    assert max(len(item) for c in chunks for item in c.items) <= 2 * MIB  # a piece, plus one block of reading
    assert [c.open_end for c in chunks] == [True] * (len(chunks) - 1) + [False]
    assert "".join(item for c in chunks for item in c.items) == text


def _recording(tok: data.Tokenizer, calls: list[list[int]]) -> data.Tokenizer:
    def encode(texts):
        calls.append([len(t) for t in texts])
        return tok.encode_batch(texts)

    return dataclasses.replace(tok, encode_batch=encode)


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_the_tokenizer_never_gets_more_than_a_piece_of_a_long_document(tmp_path, monkeypatch, kind):
    """Before: one call got the whole document (a .txt without blank lines, one JSONL record).
    Now at most 1 MiB a call, in texts of at most 16 KiB: a long text costs the tokenizer
    about 200x its size, the same characters as short texts about 75x."""
    text = _one_long_document(3 * MIB)
    src = tmp_path / f"one.{kind}"
    src.write_text(text if kind == "txt" else json.dumps({"text": text}) + "\n")
    calls: list[list[int]] = []
    monkeypatch.setattr(data, "load_tokenizer", lambda spec: _recording(data.byte_tokenizer(), calls))
    index = prepare.prepare([str(src)], "byte", tmp_path / "out", workers=1)
    assert max(sum(c) for c in calls) <= MIB and sum(map(sum, calls)) == len(text)
    assert max(max(c) for c in calls) <= corpus.PIECE_CHARS == 16 * 1024
    tokens = np.load(tmp_path / "out" / "tokens-00000.npy")
    assert tokens.tolist() == list(text.encode("utf-8")) + [256]
    assert index["documents"] == 1 and np.load(tmp_path / "out" / "doc_ends-00000.npy").tolist() == [len(tokens)]


@needs_tokenizer_2k
@needs_shakespeare
@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_a_real_long_document_has_the_ids_of_the_whole_document(tmp_path, kind):
    """400 kB of tinyshakespeare as one document (blank lines made single), read in ~14
    pieces (.txt) or parsed whole (one JSONL record), tokenized in ~80 pieces across two
    worker processes: the ids equal the tokenizer's for the whole text."""
    text = TINYSHAKESPEARE.read_text(encoding="utf-8")[:400_000]
    while "\n\n" in text:
        text = text.replace("\n\n", "\n")
    src = tmp_path / f"one.{kind}"
    src.write_text(text if kind == "txt" else json.dumps({"text": text}) + "\n", encoding="utf-8")
    tok = data.load_tokenizer(str(TOKENIZER_2K))
    want = tok.encode_batch([text])[0] + [tok.eos_id]
    index = prepare.prepare(
        [str(src)], str(TOKENIZER_2K), tmp_path / "out", workers=2, chunk_bytes=30_000, piece_chars=5000
    )
    assert np.load(tmp_path / "out" / "tokens-00000.npy").tolist() == want
    assert index["documents"] == 1 and index["sources"][0]["documents"] == 1
    assert np.load(tmp_path / "out" / "doc_ends-00000.npy").tolist() == [len(want)]
    encoded = data.encode_documents(tok, [text], piece_chars=5000, call_chars=30_000)
    assert encoded[0].tolist() == want and encoded[1].tolist() == [len(want)]


def _trained(pre_tokenizer):
    """A small BPE (600 ids) trained in a fraction of a second on 300 kB of tinyshakespeare."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    alphabet = pre_tokenizers.ByteLevel.alphabet() if "ByteLevel" in repr(pre_tokenizer) else []
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False, initial_alphabet=alphabet)
    tok.train_from_iterator([TINYSHAKESPEARE.read_text(encoding="utf-8")[:300_000]], trainer)
    return tok


LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _tokenizers():
    from tokenizers import Regex, Tokenizer, pre_tokenizers

    llama3 = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return {
        "gpt2 (shared 2k)": Tokenizer.from_file(str(TOKENIZER_2K)),
        "llama3-style": _trained(llama3),
        "metaspace": _trained(pre_tokenizers.Metaspace(prepend_scheme="first")),
    }


def _adversarial(seed: int, separators: list[str]) -> str:
    rng = random.Random(seed)
    words = ["alpha", "ünïcode", "数据", "x", "12345", "end.", "'s", "don't", "。"]
    words += ["(", ")", ",", "!", "  ", "\t", "\n\n"]
    return "".join(rng.choice(words) + rng.choice(separators) for _ in range(10_000))


@needs_tokenizer_2k
@needs_shakespeare
def test_cut_places_keep_the_ids_of_three_kinds_of_tokenizer():
    """Tokenized apart, the pieces give the whole text's ids: byte-level BPE (GPT-2 and
    Llama 3 pre-tokenizers) and Metaspace, on real text, on words with every kind of blank
    between them, and (byte-level only) on text whose only cut places are line ends."""
    pytest.importorskip("tokenizers")
    texts = {
        "shakespeare": TINYSHAKESPEARE.read_text(encoding="utf-8")[:100_000],
        "adversarial": _adversarial(0, [" ", " ", "", "\n", "  ", " \n"]),
        "line ends only": _adversarial(1, ["\n", "", "\t"]).replace(" ", "_"),
    }
    for name, tok in _tokenizers().items():
        for label, text in texts.items():
            if label == "line ends only" and name == "metaspace":
                continue  # Metaspace splits at spaces alone (see corpus.cut_index)
            parts = list(corpus.pieces(text, 500))
            assert len(parts) > 50 and max(map(len, parts)) <= 500 and "".join(parts) == text
            assert all(p[0] in " \n" for p in parts[1:]), (name, label)  # no cut fell back to a hard one
            whole = tok.encode(text, add_special_tokens=False).ids
            apart = [i for p in parts for i in tok.encode(p, add_special_tokens=False).ids]
            assert apart == whole, (name, label)


def test_a_run_without_cut_places_is_cut_at_the_limit():
    assert [len(p) for p in corpus.pieces("x" * 1050, 500)] == [500, 500, 50]
    assert list(corpus.pieces("ab cd", 500)) == ["ab cd"]
    assert list(corpus.pieces("aaaa bbbb cccc", 6)) == ["aaaa", " bbbb", " cccc"]
    assert list(corpus.pieces("aa.\nbb\ncc", 6)) == ["aa.\nbb", "\ncc"]  # not after "." (Llama 3 keeps ".\n")


def test_a_blank_start_of_a_long_document_is_kept_with_it(tmp_path):
    """Leading blanks are the document's (str.split keeps them) and a blank run before a
    separator is no document at all, however long: the reader cuts only after the first
    non-blank character, at a cut place."""
    text = " \n" * 300 + "word " * 400 + "\n\n" + " \n" * 500 + "\n\nlast"
    (tmp_path / "c.txt").write_text(text)
    chunks = list(corpus.read_chunks([tmp_path / "c.txt"], chunk_bytes=64, hold_chars=100))
    docs, open_end = [], False
    for c in chunks:
        items = list(c.items)
        if open_end:
            docs[-1] += items.pop(0)
        docs += items
        open_end = c.open_end
    assert docs == [d for d in text.split("\n\n") if d.strip()]
    first = chunks[0].items[0]
    assert chunks[0].open_end and first.startswith(" \n" * 300 + "word") and first.endswith("word")
    assert max(len(i) for c in chunks for i in c.items) <= 600 + 100 + 64 + 3
