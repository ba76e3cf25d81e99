"""prepare-data's inputs: each file is read once however it is named, a file that changes
while it is read is refused, and an output folder may not overlap an input. Each refusal is
one line, before any output exists."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from titan_train.cli import main
from titan_train.data import corpus, prepare


def _corpus(folder, n_docs: int = 200):
    folder.mkdir()
    with open(folder / "a.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n_docs):
            fh.write(json.dumps({"text": f"document {i} " + "words " * (i % 17)}) + "\n")
    (folder / "b.txt").write_text("one doc\n\ntwo doc\n")
    return folder


def _one_line_error(res) -> str:
    """The one line of the error; progress lines (stderr, at every 10%) may come before it."""
    lines = [ln for ln in res.output.strip().splitlines() if not ln.startswith("tokenizing: ")]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("titan-train: error: "), res.output
    return lines[0]


def _prepare_cli(*args):
    return CliRunner().invoke(main, ["prepare-data", *args, "--tokenizer", "byte", "--workers", "1"])


def test_a_file_named_twice_is_read_once(tmp_path):
    """Before: the folder, the file in it, another spelling of it and a symlink to it made
    four copies of its documents."""
    src = _corpus(tmp_path / "corpus")
    (tmp_path / "link.jsonl").symlink_to(src / "a.jsonl")
    once = prepare.prepare([str(src)], "byte", tmp_path / "once", workers=1)
    named = [str(src), str(src / "a.jsonl"), str(src / ".." / "corpus" / "b.txt"), str(tmp_path / "link.jsonl")]
    assert corpus.find_sources(named) == [src / "a.jsonl", src / "b.txt"]
    twice = prepare.prepare(named, "byte", tmp_path / "twice", workers=1)
    assert [s["path"] for s in twice["sources"]] == [str((src / n).resolve()) for n in ("a.jsonl", "b.txt")]
    assert twice["tokens"] == once["tokens"] and twice["documents"] == once["documents"] == 202
    assert np.array_equal(
        np.load(tmp_path / "twice" / "tokens-00000.npy"), np.load(tmp_path / "once" / "tokens-00000.npy")
    )
    # the order is the first place each file was named
    assert corpus.find_sources([str(src / "b.txt"), str(src)]) == [src / "b.txt", src / "a.jsonl"]


def _changing_reader(monkeypatch, change):
    """read_chunks that calls change(path) once, after the file's first chunk, while it is open."""
    real = corpus.read_chunks

    def reader(files, *args, **kwargs):
        changed = False
        for chunk in real(files, *args, **kwargs):
            yield chunk
            if not changed:
                change(files[chunk.source])
                changed = True

    monkeypatch.setattr(corpus, "read_chunks", reader)


def _append(path):
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"text": "written meanwhile"}) + "\n")


def _rewrite_same_size(path):
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(st.st_size - 5)
        fh.write(b"Z")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("change", [_append, _rewrite_same_size])
def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path, monkeypatch, change):
    """Before: it was written with the size it had at the start and documents of no one
    version of it. Now: one line naming the file, and no output folder, no partial one."""
    src = _corpus(tmp_path / "corpus", n_docs=20_000)  # several 1 MiB chunks: the change lands mid-read
    _changing_reader(monkeypatch, change)
    line = _one_line_error(_prepare_cli(str(src), "--out", str(tmp_path / "out")))
    assert line.endswith(f"{src / 'a.jsonl'} changed while it was read; rerun when it is no longer being written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


@pytest.mark.parametrize("spelling", ["plain", "symlink"])
def test_an_output_folder_inside_an_input_is_refused_before_any_work(tmp_path, spelling):
    """Before: it was written, and the next --force run read its index.json as a JSONL input."""
    src = _corpus(tmp_path / "corpus")
    given = src
    if spelling == "symlink":
        given = tmp_path / "via-link"
        given.symlink_to(src)
    line = _one_line_error(_prepare_cli(str(given), "--out", str(src / "tok")))
    assert f"the output folder {src / 'tok'} is inside the input {given}" in line
    assert sorted(p.name for p in src.iterdir()) == ["a.jsonl", "b.txt"]


def test_an_input_inside_the_output_folder_is_refused(tmp_path):
    """--force replaces the output folder: an input inside it would be deleted with it."""
    src = _corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    assert _prepare_cli(str(src), "--out", str(out)).exit_code == 0
    extra = out / "extra.jsonl"
    extra.write_text('{"text": "mine"}\n')
    line = _one_line_error(_prepare_cli(str(src), str(extra), "--out", str(out), "--force"))
    assert f"the input {extra} is inside the output folder {out}, which --force replaces" in line
    assert extra.read_text() == '{"text": "mine"}\n'


def test_an_output_folder_beside_the_input_is_fine(tmp_path):
    """Paths are compared by parts: corpus-tok is not inside corpus."""
    src = _corpus(tmp_path / "corpus")
    assert prepare.prepare([str(src)], "byte", tmp_path / "corpus-tok", workers=1)["documents"] == 202
