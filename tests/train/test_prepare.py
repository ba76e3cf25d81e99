"""prepare-data: every format reads the same documents, the prepared folder gives exactly the
batches of the in-memory path, output is atomic, and bad input is one line."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from titan_train.cli import main
from titan_train.data import corpus, prepare, token_folder
from titan_train.data import stream as data

from .conftest import REPO, TOKENIZER_2K, needs_tokenizer_2k, trainer_env


def _random_docs(n: int, seed: int = 0) -> list[str]:
    """Multi-line documents (never a blank line inside, so .txt can hold them too)."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "ünïcode", "数据", "x", "\t", "end."]
    docs = []
    for _ in range(n):
        body = "".join(rng.choice(words) + rng.choice([" ", " ", "\n"]) for _ in range(rng.randint(1, 60)))
        docs.append(("start " + body).rstrip())
    return docs


def _write_jsonl(path, docs, opener=open):
    with opener(path, "wt", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"text": d, "id": 1}) + "\n")


def _read_all(path, **kw) -> list[str]:
    """The documents of `path`, the pieces of a long one joined again."""
    files = corpus.find_sources([str(path)])
    docs, open_end = [], False
    for chunk in corpus.read_chunks(files, **kw):
        items = corpus.documents(chunk, path)
        if open_end:
            docs[-1] += items.pop(0)
        docs += items
        open_end = chunk.open_end
    return docs


@pytest.mark.parametrize("hold_chars", [3, 40, 1 << 20])
@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 5, 64, 1 << 20])
def test_text_files_split_exactly_like_str_split_at_any_block_size(tmp_path, chunk_bytes, hold_chars):
    """...and at any size of the pieces of a long document: joined, they are the document."""
    rng = random.Random(chunk_bytes)
    pieces = ["a", "b c", "\n", "\n\n", "\n\n\n", " ", "dd ee", "  "]
    text = "".join(rng.choices(pieces, weights=[9, 9, 9, 1, 1, 9, 9, 3], k=3000))
    (tmp_path / "c.txt").write_text(text)
    got = _read_all(tmp_path / "c.txt", chunk_bytes=chunk_bytes, hold_chars=hold_chars)
    assert got == [d for d in text.split("\n\n") if d.strip()]


def test_every_format_reads_the_same_documents(tmp_path):
    docs = _random_docs(300)
    _write_jsonl(tmp_path / "a.jsonl", docs)
    _write_jsonl(tmp_path / "a.jsonl.gz", docs, gzip.open)
    (tmp_path / "a.txt").write_text("\n\n".join(docs))
    want = {"a.jsonl": docs, "a.jsonl.gz": docs, "a.txt": docs}
    try:
        import zstandard

        (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress((tmp_path / "a.jsonl").read_bytes()))
        want["a.jsonl.zst"] = docs
    except ImportError:
        pass
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": docs, "n": list(range(len(docs)))}), tmp_path / "a.parquet", row_group_size=70)
        want["a.parquet"] = docs
    except ImportError:
        pass
    for name, expected in want.items():
        assert _read_all(tmp_path / name, chunk_bytes=500) == expected, name


def _prepare_and_raw(tmp_path, tokenizer: str, workers: int):
    docs = _random_docs(400, seed=1)
    src = tmp_path / "corpus.jsonl"
    _write_jsonl(src, docs)
    out = tmp_path / "prepared"
    index = prepare.prepare([str(src)], tokenizer, out, workers=workers, shard_tokens=3001)
    cfg = lambda ds: type("Data", (), {"dataset": ds, "tokenizer": tokenizer, "text_field": "text"})  # noqa: E731
    mapped = data.open_dataset(cfg(str(out)), 4096, log=lambda m: None)
    logged = []
    raw = data.open_dataset(cfg(str(src)), 4096, log=logged.append)
    return index, mapped, raw, logged, docs, out


@pytest.mark.parametrize(
    "tokenizer,workers", [("byte", 1), pytest.param(str(TOKENIZER_2K), 2, marks=needs_tokenizer_2k)]
)
def test_prepared_folder_gives_the_batches_of_the_raw_path(tmp_path, tokenizer, workers):
    index, mapped, raw, logged, docs, out = _prepare_and_raw(tmp_path, tokenizer, workers)
    assert len(index["shards"]) > 2  # reads must stitch shard boundaries
    assert isinstance(mapped.parts[0], np.memmap) and mapped.parts[0].dtype == np.uint16
    assert len(mapped) == len(raw) == index["tokens"] > 0
    seq = 64
    for start in (0, 3, 40, 46, 47, 1000, 10**6):  # past the end wraps around
        indices = range(start, start + 8)
        for a, b in zip(mapped.batch(indices, seq), raw.batch(indices, seq)):
            assert np.array_equal(a, b)
    stream = np.concatenate([np.asarray(p) for p in mapped.parts])
    assert np.array_equal(stream, raw.parts[0])
    # the index: documents, boundaries at end-of-document ids, sources with sizes, tokenizer
    ends = np.concatenate([np.load(out / s["doc_ends_file"]) for s in index["shards"]])
    tok = data.load_tokenizer(tokenizer)
    assert index["documents"] == len(docs) == len(ends) and ends[-1] == len(stream)
    if tok.eos_id is not None:
        assert (stream[ends - 1] == tok.eos_id).all() and (stream == tok.eos_id).sum() == len(docs)
    assert index["sources"] == [
        {
            "path": str((tmp_path / "corpus.jsonl").resolve()),
            "bytes": (tmp_path / "corpus.jsonl").stat().st_size,
            "documents": len(docs),
            "tokens": len(stream),
        }
    ]
    assert index["tokenizer"]["vocab_size"] == tok.vocab_size and index["tokenizer"]["sha256"] == tok.sha256
    assert "tokenizing" in logged[0] and "MB) in memory" in logged[0] and "prepare-data" in logged[0]


def test_ids_beyond_uint16_are_stored_as_uint32(tmp_path):
    assert data.token_dtype(65536) == np.uint16 and data.token_dtype(65537) == np.uint32
    writer = token_folder.ShardWriter(tmp_path, data.token_dtype(100_000), shard_tokens=4)
    ids = np.array([99_999, 65_536, 1, 2, 3, 70_000], dtype=np.uint32)
    writer.add(ids, np.array([2, 0, 4]))
    shards = writer.close()
    got = np.concatenate([np.load(tmp_path / s["tokens_file"]) for s in shards])
    assert got.dtype == np.uint32 and got.tolist() == ids.tolist()
    assert [np.load(tmp_path / s["doc_ends_file"]).tolist() for s in shards] == [[2], [6]]


def test_failure_leaves_no_folder_and_existing_output_is_protected(tmp_path):
    good, bad = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_jsonl(good, _random_docs(50))
    bad.write_text('{"text": "ok"}\n{"text": 3}\n')
    out = tmp_path / "out"
    with pytest.raises(data.DataError, match=r"b.jsonl:2 has no string field 'text'"):
        prepare.prepare([str(good), str(bad)], "byte", out, workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]  # no out, no partial

    prepare.prepare([str(good)], "byte", out, workers=1)
    first = json.loads((out / "index.json").read_text())
    with pytest.raises(data.DataError, match="already exists; pass --force"):
        prepare.prepare([str(good)], "byte", out, workers=1)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(data.DataError, match="refusing to replace .*notes: it is not a prepared dataset"):
        prepare.prepare([str(good)], "byte", other, workers=1, force=True)
    assert (other / "keep.txt").read_text() == "mine"
    # a partial folder of a dead run is cleaned up; --force replaces a prepared dataset
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".out.partial-{dead.stdout.strip()}"
    stale.mkdir()
    prepare.prepare([str(good)], "byte", out, workers=1, force=True, shard_tokens=100)
    assert not stale.exists()
    assert json.loads((out / "index.json").read_text())["shards"] != first["shards"]


def test_trainer_refuses_a_damaged_folder_or_another_tokenizer(tmp_path):
    src = tmp_path / "c.jsonl"
    _write_jsonl(src, _random_docs(30))
    out = tmp_path / "p"
    prepare.prepare([str(src)], "byte", out, workers=1)
    index_file = out / "index.json"
    index = json.loads(index_file.read_text())
    index["tokenizer"].update(sha256="0" * 64, spec="/elsewhere/tokenizer.json")
    index_file.write_text(json.dumps(index))
    with pytest.raises(
        data.DataError,
        match=r"data.tokenizer = 'byte' is not the tokenizer .*p was prepared with "
        r"\(/elsewhere/tokenizer.json, sha256 000000000000\); "
        r"set data.tokenizer = '/elsewhere/tokenizer.json'",
    ):
        data.checked_tokenizer("byte", str(out), 4096)
    with pytest.raises(data.DataError, match="smaller than the tokenizer's 257 ids"):
        data.checked_tokenizer("byte", str(out), 100)
    shard = out / "tokens-00000.npy"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(data.DataError, match="tokens-00000.npy cannot be mapped|holds .* prepare the data again"):
        token_folder.open_shards(out, token_folder.read_index(out))
    (out / "index.json").unlink()
    with pytest.raises(data.DataError, match="is a folder without index.json, not a prepared dataset"):
        data.checked_tokenizer("byte", str(out), 4096)


def _cli(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_prepare_data_json_help_and_one_line_errors(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("one doc\n\ntwo doc\n")
    res = _cli(
        "prepare-data",
        str(src),
        "--tokenizer",
        "byte",
        "--out",
        str(tmp_path / "o"),
        "--format",
        "json",
        "--workers",
        "1",
    )
    assert res.exit_code == 0, res.output
    index = json.loads(res.stdout)
    assert index["tokens"] == len("one doc") + len("two doc\n") + 2 and index["documents"] == 2
    assert index["dtype"] == "uint16" and index["tokenizer"]["name"] == "byte"

    help_text = _cli("prepare-data", "--help").output
    for words in (".jsonl", ".parquet", ".zst", "uint16", "index.json", "data.dataset", "Exit codes"):
        assert words in help_text

    for args, message in [
        ([str(tmp_path / "missing.jsonl")], "missing.jsonl not found"),
        ([str(tmp_path / "c.csv")], "c.csv: unsupported file type"),
        ([str(src), "--tokenizer", str(tmp_path / "tok.json")], "tok.json not found"),
        ([str(src)], "already exists; pass --force"),
    ]:
        (tmp_path / "c.csv").write_text("x")
        argv = ["prepare-data", *args] + ([] if "--tokenizer" in args else ["--tokenizer", "byte"])
        res = _cli(*argv, "--out", str(tmp_path / "o"))
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("titan-train: error: "), res.output
        assert message in lines[0]


def test_run_refuses_a_mismatched_prepared_folder_before_starting(tmp_path, monkeypatch):
    src = tmp_path / "c.txt"
    src.write_text("some text\n")
    prepare.prepare([str(src)], "byte", tmp_path / "p", workers=1)
    (tmp_path / "p" / "index.json").write_text(
        (tmp_path / "p" / "index.json").read_text().replace('"vocab_size": 257', '"vocab_size": 300')
    )
    monkeypatch.chdir(tmp_path)
    res = _cli(
        "run", "--config", str(REPO / "configs" / "llama_debug.toml"), "--set", f'data.dataset="{tmp_path / "p"}"'
    )
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "has 257 ids but" in res.output and "was prepared with 300" in res.output
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    "damage,message",
    [
        ("truncate", "tokens-00001.npy cannot be mapped"),
        ("remove", "tokens-00001.npy cannot be mapped"),
        ("short", "has 10 tokens, fewer than training.seq_len + 1 = 65"),
    ],
)
def test_run_checks_the_prepared_shards_before_any_rank_starts(tmp_path, monkeypatch, damage, message):
    """Shards the index does not match, or a corpus shorter than one sample, are refused by
    the preflight (one line, exit 2, no rank started), not by every rank after the launch."""
    src = tmp_path / "c.txt"
    src.write_text("0123456789" * 20 if damage != "short" else "012345678")
    prepare.prepare([str(src)], "byte", tmp_path / "p", workers=1, shard_tokens=100)
    shard = tmp_path / "p" / "tokens-00001.npy"
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-4])
    elif damage == "remove":
        shard.unlink()
    spawned = []
    monkeypatch.setattr("titan_train.runtime.launch.spawn", lambda *a, **k: spawned.append(a) or 0)
    monkeypatch.chdir(tmp_path)
    res = _cli(
        "run",
        "--config",
        str(REPO / "configs" / "llama_debug.toml"),
        "--nproc",
        "2",
        "--set",
        "training.seq_len=64",
        "--set",
        f'data.dataset="{tmp_path / "p"}"',
    )
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("titan-train: error: ") and message in res.output
    assert spawned == [] and not (tmp_path / "outputs").exists()


def test_prepare_data_runs_as_a_command(tmp_path):
    """The real entry point with worker processes (spawned) and progress lines on stderr."""
    docs = _random_docs(200)
    (tmp_path / "corpus").mkdir()
    _write_jsonl(tmp_path / "corpus" / "c.jsonl", docs)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "titan_train.cli",
            "prepare-data",
            str(tmp_path / "corpus"),
            "--tokenizer",
            "byte",
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "2",
        ],
        cwd=tmp_path,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {tmp_path / 'out'}: ") and "(2 workers)" in proc.stdout
    assert "tokenizing: 100% of" in proc.stderr
    want = data.load_tokens(str(tmp_path / "corpus" / "c.jsonl"), data.byte_tokenizer())
    got = np.load(tmp_path / "out" / "tokens-00000.npy")
    assert np.array_equal(got, want)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out"]


def test_a_prepared_folder_index_is_read_once_and_recorded_as_read(tmp_path, monkeypatch):
    """Before: read three times at start-up (tokenizer check, mapping, identity hash), so a
    folder rebuilt in between could be recorded with another index than the one trained on."""
    import hashlib
    from pathlib import Path

    out = tmp_path / "prepared"
    src = tmp_path / "a.txt"
    src.write_text("first document\n\nsecond document, a little longer\n" * 50)
    prepare.prepare([str(src)], "byte", out, workers=1)
    reads = []
    real_read_bytes, real_read_text = Path.read_bytes, Path.read_text
    monkeypatch.setattr(Path, "read_bytes", lambda p: reads.append(p.name) or real_read_bytes(p))
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: reads.append(p.name) or real_read_text(p, *a, **k))
    cfg = type("Data", (), {"dataset": str(out), "tokenizer": "byte", "text_field": "text"})
    stream = data.open_dataset(cfg, 512, log=lambda m: None)
    assert reads.count("index.json") == 1, reads
    assert stream.identity["index"] == hashlib.sha256(real_read_bytes(out / "index.json")).hexdigest()
