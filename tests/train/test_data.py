"""Offline data: deterministic corpus, tokenizers, and the disjoint per-rank batch layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

from titan_train.data import corpus
from titan_train.data import stream as data

from .conftest import TINYSHAKESPEARE, TOKENIZER_2K, needs_tokenizer_2k


def test_builtin_corpus_is_deterministic_and_byte_tokenized():
    tok = data.byte_tokenizer()
    a = data.load_tokens("builtin", tok)
    b = data.load_tokens("builtin", tok)
    assert np.array_equal(a, b) and len(a) > 1_000_000
    assert a.max() == 256 and a.min() >= 0  # bytes plus the end-of-document id
    assert (a == 256).sum() == 6000


@pytest.mark.parametrize("dp,accum", [(1, 1), (2, 1), (4, 2), (8, 1)])
def test_each_dp_rank_reads_a_disjoint_slice_of_the_global_batch(dp, accum):
    layout = data.BatchLayout(global_batch=16, accum=accum, dp=dp)
    seen = []
    for micro in range(accum):
        for rank in range(dp):
            seen.extend(data.sample_indices(32, layout, micro, rank))
    assert sorted(seen) == list(range(32, 48))  # exactly the batch, no overlap, nothing missing


def test_make_batch_targets_are_inputs_shifted_and_the_stream_wraps():
    tokens = np.arange(100, dtype=np.int32)
    x, y = data.make_batch(tokens, range(0, 2), seq_len=8)
    assert x.tolist()[0] == list(range(0, 8)) and y.tolist()[0] == list(range(1, 9))
    assert x.tolist()[1] == list(range(8, 16))
    xw, _ = data.make_batch(tokens, range(1000, 1001), seq_len=8)
    assert xw.shape == (1, 8) and xw.max() < 100
    with pytest.raises(data.DataError, match="fewer than training.seq_len"):
        data.make_batch(tokens, range(1), seq_len=200)


def _documents(path) -> list[str]:
    files = corpus.find_sources([str(path)])
    return [d for c in corpus.read_chunks(files) for d in corpus.documents(c, path)]


def test_jsonl_and_text_files(tmp_path):
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"text": "hi"}) + "\n\n" + json.dumps({"text": "yo"}) + "\n")
    assert _documents(jl) == ["hi", "yo"]
    assert data.load_tokens(str(jl), data.byte_tokenizer()).tolist() == [104, 105, 256, 121, 111, 256]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n\n{"body": "x"}\n')
    with pytest.raises(data.DataError, match="bad.jsonl:3 has no string field 'text'"):
        _documents(bad)
    txt = tmp_path / "c.txt"
    txt.write_text("first doc\n\nsecond doc\n")
    assert _documents(txt) == ["first doc", "second doc\n"]


def test_tokenizer_errors_are_one_line(tmp_path):
    with pytest.raises(data.DataError, match="not found"):
        data.load_tokenizer(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(data.DataError, match="cannot read"):
        data.load_tokenizer(str(tmp_path / "tokenizer.json"))


@needs_tokenizer_2k
def test_hf_tokenizer_on_tinyshakespeare():
    pytest.importorskip("tokenizers")
    tok = data.load_tokenizer(str(TOKENIZER_2K))
    assert tok.vocab_size <= 2048 + 16 and tok.name.startswith("hf:")
    text = TINYSHAKESPEARE.read_text()[:5000]
    ids = tok.encode_batch([text])[0]
    assert 0 < len(ids) < 0.9 * len(text)  # BPE merges: fewer tokens than bytes
    assert max(ids) < tok.vocab_size
