"""Dataset length and encoding are checked before any model is built: exactly seq_len + 1
tokens is one sample (no off-by-one), fewer is one line, and a file that is not UTF-8 is one
line naming file:line, in `run` (preflight and every rank) and in `prepare-data`."""

from __future__ import annotations

import functools
import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from titan_train.data import corpus
from titan_train.data import stream as data

from .conftest import REPO, run_in_process, run_trainer, trainer_env

SEQ = 64


def test_exactly_seq_len_plus_one_tokens_is_one_sample():
    stream = data.TokenStream([np.arange(SEQ + 1, dtype=np.uint16)])
    inputs, targets = stream.batch(range(5), SEQ)  # every sample is the only one there is
    assert (inputs == np.arange(SEQ)).all() and (targets == np.arange(1, SEQ + 1)).all()
    with pytest.raises(data.DataError, match=rf"has {SEQ:,} tokens, fewer than training.seq_len \+ 1 = {SEQ + 1}"):
        data.TokenStream([np.arange(SEQ, dtype=np.uint16)]).batch([0], SEQ)


def test_longer_datasets_keep_their_sample_order():
    """The fix must not move the samples of existing runs (a resume reads the same data)."""
    n = 1000
    stream = data.TokenStream([np.arange(n, dtype=np.uint16)])
    inputs, _ = stream.batch(range(20), SEQ)
    assert [int(r[0]) for r in inputs] == [(i * SEQ) % (n - SEQ - 1) for i in range(20)]


def _latin1_files(tmp_path):
    txt = tmp_path / "notes.txt"
    txt.write_bytes("first doc\n\nsecond doc\ncaf\u00e9 au lait\n".encode("latin-1"))
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_bytes(b'{"text": "ok"}\n{"text": "fine"}\n' + '{"text": "na\u00efve"}\n'.encode("latin-1"))
    return txt, jsonl


@pytest.mark.parametrize("block", [4, 1 << 20])
def test_non_utf8_is_named_by_file_line_and_byte_offset(tmp_path, block):
    txt, jsonl = _latin1_files(tmp_path)
    with pytest.raises(corpus.DataError) as e:
        list(corpus.read_chunks([txt], chunk_bytes=block))
    assert str(e.value).startswith(f"{txt}:4: not UTF-8 (byte 0xe9 at byte offset 25)")
    with pytest.raises(corpus.DataError) as e:
        list(corpus.read_chunks([jsonl], chunk_bytes=block))
    assert str(e.value).startswith(f"{jsonl}:3: not UTF-8 (byte 0xef at byte offset 44)")
    gz = tmp_path / "rows.jsonl.gz"
    gz.write_bytes(gzip.compress(jsonl.read_bytes()))
    with pytest.raises(corpus.DataError, match=r"rows.jsonl.gz:3: not UTF-8 .* of the decompressed text"):
        list(corpus.read_chunks([gz], chunk_bytes=block))


def test_crlf_text_reads_like_universal_newlines(tmp_path):
    src = tmp_path / "dos.txt"
    src.write_bytes(b"one\r\nline\r\n\r\ntwo\r\n")
    docs = [d for c in corpus.read_chunks([src], chunk_bytes=3) for d in corpus.documents(c, src)]
    assert docs == ["one\nline", "two\n"]


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "titan_train.cli", *args],
        cwd=cwd,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_error_line(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "UnicodeDecodeError" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.multirank
def test_non_utf8_is_one_line_in_run_and_prepare_data(tmp_path):
    txt, jsonl = _latin1_files(tmp_path)
    debug = str(REPO / "configs" / "llama_debug.toml")
    _one_error_line(
        _cli("run", "--config", debug, "--set", f'data.dataset="{jsonl}"', cwd=tmp_path), f"{jsonl}:3: not UTF-8"
    )
    _one_error_line(
        _cli("prepare-data", str(txt), "--tokenizer", "byte", "--out", str(tmp_path / "o"), cwd=tmp_path),
        f"{txt}:4: not UTF-8",
        "iconv",
    )
    assert not (tmp_path / "o").exists()


def _short_datasets(tmp_path):
    """A .txt, a .jsonl and a prepared folder, each one token short of a SEQ-token sample."""
    txt = tmp_path / "short.txt"
    txt.write_text("a" * (SEQ - 1))  # SEQ - 1 bytes + the end-of-document id = SEQ tokens
    jsonl = tmp_path / "short.jsonl"
    jsonl.write_text(json.dumps({"text": "b" * (SEQ - 1)}) + "\n")
    prepared = tmp_path / "prepared"
    proc = _cli("prepare-data", str(txt), "--tokenizer", "byte", "--out", str(prepared), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return [txt, jsonl, prepared]


@pytest.mark.multirank
def test_too_short_datasets_are_refused_before_any_rank_starts(tmp_path, monkeypatch):
    """The .txt in a real process (exit code end to end); the others' refusal is the same
    preflight, run in this process."""
    for path in _short_datasets(tmp_path):
        wd = tmp_path / f"run-{path.name}"
        wd.mkdir()
        run = run_trainer if path.suffix == ".txt" else functools.partial(run_in_process, monkeypatch=monkeypatch)
        proc = run(wd, nproc=2, overrides=[f"training.seq_len={SEQ}", f'data.dataset="{path}"'])
        _one_error_line(proc, f"{path} has {SEQ} tokens, fewer than training.seq_len + 1 = {SEQ + 1}")
        assert not (wd / "outputs").exists()  # no rank started, no run folder


@pytest.mark.multirank
def test_under_torchrun_every_rank_refuses_a_short_dataset_before_building_the_model(tmp_path):
    txt = _short_datasets(tmp_path)[0]
    proc = run_trainer(tmp_path, nproc=2, torchrun=True, overrides=[f"training.seq_len={SEQ}", f'data.dataset="{txt}"'])
    assert proc.returncode != 0
    assert f"{txt} has {SEQ} tokens, fewer than training.seq_len + 1" in proc.stderr
    assert "M params" not in proc.stdout  # printed once the model is built: it never was
    assert "titan_train/" not in proc.stderr  # no frame of ours (torchrun prints its own ChildFailedError)


@pytest.mark.multirank
def test_a_file_of_exactly_seq_len_plus_one_tokens_trains(tmp_path):
    txt = tmp_path / "exact.txt"
    txt.write_text("a" * SEQ)  # SEQ bytes + end-of-document = SEQ + 1 tokens
    proc = run_trainer(
        tmp_path,
        overrides=[
            f"training.seq_len={SEQ}",
            f'data.dataset="{txt}"',
            "training.steps=2",
            "training.batch_size=2",
            "checkpoint.save_interval=0",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{SEQ + 1} tokens tokenized in memory" in proc.stdout
