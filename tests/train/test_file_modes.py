"""Every file the tools write gets the mode the user's umask gives: safetensors' writer
creates 0600 files, which a colleague's job then cannot read."""

from __future__ import annotations

import os
import stat

import pytest

pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")

from titan_train.checkpoint.formats import writers  # noqa: E402
from titan_train.config.model_args import ModelArgs  # noqa: E402


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_hf_export_has_the_same_mode_as_its_config_json(tmp_path, umask_027):
    args = ModelArgs(d_model=16, n_layers=1, n_heads=2, vocab_size=32, max_seq_len=8)
    items = [("tok_embeddings.weight", torch.zeros(32, 16)), ("norm.weight", torch.ones(16))]
    files = writers.write_hf(items, tmp_path, args, dtype="float32")
    assert files and all(_mode(f) == 0o640 for f in files), [oct(_mode(f)) for f in files]
    assert _mode(tmp_path / "config.json") == 0o640


def test_the_umask_is_read_without_changing_it(umask_027):
    from titan_train.checkpoint.formats.safetensors_io import _umask

    assert _umask() == 0o027
    assert os.umask(0o027) == 0o027
