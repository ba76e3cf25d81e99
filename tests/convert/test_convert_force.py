"""`convert --force` replaces an earlier output of the same format and nothing else: a
folder holding a person's files, or a file that is not a checkpoint, is refused in one line
with everything left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ..checkpoints import doctor_convert as convert
from ..checkpoints import weights

pytest.importorskip("safetensors")


@pytest.fixture
def source(tmp_path) -> Path:
    torch.save(weights(), tmp_path / "w.pt")
    return tmp_path / "w.pt"


def test_force_replaces_an_earlier_output_of_the_same_format(source, tmp_path):
    assert convert(source, tmp_path / "out", "--to", "dcp").returncode == 0
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    p = convert(source, tmp_path / "out", "--to", "dcp", "--force")
    assert p.returncode == 0, p.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before


def test_force_refuses_a_folder_holding_other_files(source, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / ".metadata").write_text("not really")
    p = convert(source, out, "--to", "dcp", "--force")
    assert p.returncode == 1
    assert f"{out} holds files a dcp checkpoint does not (notes.txt); refusing to replace it" in p.stderr
    assert (out / "notes.txt").read_text() == "my notes" and (out / ".metadata").read_text() == "not really"


def test_force_refuses_another_formats_output(source, tmp_path):
    """An HF folder (config.json + safetensors) is not a DCP output: --to dcp --force keeps it."""
    from safetensors.torch import save_file

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    save_file({"lm_head.weight": torch.zeros(2, 2)}, str(hf / "model.safetensors"))
    p = convert(source, hf, "--to", "dcp", "--force")
    assert p.returncode == 1
    assert "holds files a dcp checkpoint does not (config.json, model.safetensors); refusing" in p.stderr
    assert sorted(x.name for x in hf.iterdir()) == ["config.json", "model.safetensors"]


def test_force_refuses_a_file_that_is_not_a_checkpoint(source, tmp_path):
    (tmp_path / "model.pt").write_text("a person's file")
    p = convert(source, tmp_path / "model.pt", "--to", "torch", "--force")
    assert p.returncode == 1 and "is not a torch.save checkpoint; refusing to replace it" in p.stderr
    assert (tmp_path / "model.pt").read_text() == "a person's file"


def test_force_replaces_a_torch_checkpoint_file(source, tmp_path):
    torch.save({"old": torch.zeros(1)}, tmp_path / "model.pt")
    p = convert(source, tmp_path / "model.pt", "--to", "torch", "--force")
    assert p.returncode == 0, p.stderr
    assert set(torch.load(tmp_path / "model.pt", weights_only=True)) == set(weights())
