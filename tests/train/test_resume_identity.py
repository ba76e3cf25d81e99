"""A checkpoint records what its data and tokenizer were by content, not by path: data
rebuilt from other text at the same path is announced on resume, and a tokenizer replaced
at the same path by one with other ids is refused unless the user says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import FAST, TINYSHAKESPEARE, TOKENIZER_2K, needs_tokenizer_2k, ok, run_trainer

pytestmark = pytest.mark.multirank

SAVE_2 = FAST + ["checkpoint.save_interval=2", "training.warmup_steps=0"]


def _corpus(path: Path, seed_text: str) -> Path:
    path.write_text("\n\n".join(f"{seed_text} document {i}: " + seed_text * 40 for i in range(60)))
    return path


def test_data_rebuilt_at_the_same_path_is_announced(tmp_path):
    data = _corpus(tmp_path / "corpus.txt", "the first corpus ")
    run = SAVE_2 + [f"data.dataset={json.dumps(str(data))}"]
    ok(run_trainer(tmp_path, overrides=run + ["training.steps=2"]))
    _corpus(data, "quite other words ")
    proc = ok(run_trainer(tmp_path, overrides=run + ["training.steps=4"]))
    assert "(step 2)" in proc.stdout
    assert (
        f"[titan-train] data changed since the checkpoint: data.dataset = {str(data)!r} holds other content "
        "than it did then"
    ) in proc.stdout


@needs_tokenizer_2k
def test_a_tokenizer_replaced_at_the_same_path_is_refused_unless_allowed(tmp_path):
    tok = tmp_path / "tokenizer.json"
    shutil.copy(TOKENIZER_2K, tok)
    data = tmp_path / "input.txt"
    shutil.copy(TINYSHAKESPEARE, data)
    run = SAVE_2 + [
        f"data.dataset={json.dumps(str(data))}",
        f"data.tokenizer={json.dumps(str(tok))}",
        "model.vocab_size=2048",
    ]
    ok(run_trainer(tmp_path, overrides=run + ["training.steps=2"]))

    spec = json.loads(tok.read_text())
    vocab = spec["model"]["vocab"]
    a, b = "es", "hat"  # two ids swapped: same size, other meaning
    vocab[a], vocab[b] = vocab[b], vocab[a]
    tok.write_text(json.dumps(spec))

    refused = run_trainer(tmp_path, overrides=run + ["training.steps=4"])
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert (
        f"data.tokenizer = {str(tok)!r} defines other tokens than the tokenizer it was trained with" in refused.stderr
    ), refused.stderr[-3000:]
    assert "set data.allow_tokenizer_change = true to continue anyway" in refused.stderr

    allowed = ok(run_trainer(tmp_path, overrides=run + ["training.steps=4", "data.allow_tokenizer_change=true"]))
    assert "(step 2)" in allowed.stdout and "continuing (data.allow_tokenizer_change = true)" in allowed.stdout
