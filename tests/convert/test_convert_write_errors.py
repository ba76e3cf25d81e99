"""`titan-doctor convert` into a destination it cannot write: a parent that is a file, a
disk that fills up halfway (a write raising the real ENOSPC, and where root may mount one,
a real 1 MiB tmpfs). Each is one line, exit 1, nothing partial left, and an earlier output
that --force was replacing stays as it was (issue 18)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from titan_doctor.convert.command import convert as convert_command
from titan_train.config.model_args import ModelArgs
from titan_train.runtime.write_errors import size_text

from ..checkpoints import doctor_convert as convert
from ..checkpoints import weights, write_trainer_dcp
from ..disk import small_tmpfs, torch_save_on_a_full_disk

NO_SPACE = re.compile(
    r"^titan-doctor convert: error: no space left on device writing (\S+): [\d.]+ (B|KiB|MiB|GiB|TiB) free on (\S+), "
    r"about [\d.]+ (B|KiB|MiB|GiB) needed$"
)


def _convert_in_process(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(convert_command, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_destination_under_a_file_is_one_line_before_any_work(tmp_path):
    torch.save(weights(), tmp_path / "w.pt")
    (tmp_path / "notes.txt").write_text("mine\n")
    p = convert(tmp_path / "w.pt", tmp_path / "notes.txt" / "out.pt", "--to", "torch")
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        f"titan-doctor convert: error: cannot write {tmp_path / 'notes.txt' / 'out.pt'}: "
        f"{tmp_path / 'notes.txt'} is a file, not a folder"
    ]
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_disk_that_fills_up_is_one_line_and_the_previous_output_stays(tmp_path, monkeypatch):
    """--force over an earlier output: the full disk leaves that output as it was."""
    from titan_train.checkpoint.formats import writers

    torch.save(weights(), tmp_path / "w.pt")
    assert _convert_in_process(tmp_path / "w.pt", tmp_path / "out.pt", "--to", "torch")[0] == 0
    before = (tmp_path / "out.pt").read_bytes()
    monkeypatch.setattr(writers, "write_torch", torch_save_on_a_full_disk(room=512))
    code, out, err = _convert_in_process(tmp_path / "w.pt", tmp_path / "out.pt", "--to", "torch", "--force")
    assert code == 1, err
    lines = err.splitlines()
    assert len(lines) == 1 and NO_SPACE.match(lines[0]), err
    assert NO_SPACE.match(lines[0]).group(1) == str(tmp_path / "out.pt")
    needed = sum(t.numel() * t.element_size() for t in weights().values())
    assert f"about {needed / 1024:.1f} KiB needed" in lines[0]
    assert "inline_container" not in err and "Traceback" not in err
    assert (tmp_path / "out.pt").read_bytes() == before
    assert _hidden(tmp_path) == []  # the partial .out.pt.partial-PID is gone


@pytest.mark.parametrize("target", ["torch", "dcp"])
def test_a_real_full_tmpfs_is_one_line_and_leaves_it_empty(tmp_path, target):
    """root only: a 1 MiB tmpfs and a 2 MiB model (torch's zip writer, or DCP's files)."""
    wide = ModelArgs(vocab_size=4096, d_model=64, n_layers=1, n_heads=4, multiple_of=16, max_seq_len=16)
    sd = weights(wide)
    torch.save(sd, tmp_path / "big.pt")  # embeddings and output: 2 MiB of fp32
    needed = size_text(sum(t.numel() * t.element_size() for t in sd.values()))
    with small_tmpfs(tmp_path / "small", "1m") as small:
        dst = small / ("out.pt" if target == "torch" else "out")
        p = convert(tmp_path / "big.pt", dst, "--to", target)
        assert p.returncode == 1
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and NO_SPACE.match(lines[0]), p.stderr
        assert NO_SPACE.match(lines[0]).group(3) == str(small)
        assert f"about {needed} needed" in lines[0]
        assert list(small.iterdir()) == []


def test_a_trainer_checkpoint_whole_conversion_into_a_full_disk(tmp_path, monkeypatch):
    """DCP -> torch, every entry: the needed size counts optimizer and progress too."""
    from titan_train.checkpoint.formats import writers

    step = write_trainer_dcp(tmp_path / "ckpt", weights(), step=3)
    monkeypatch.setattr(writers, "write_torch", torch_save_on_a_full_disk(room=256))
    code, _, err = _convert_in_process(step, tmp_path / "all.pt", "--to", "torch")
    assert code == 1 and NO_SPACE.match(err.strip()), err
    assert not (tmp_path / "all.pt").exists() and _hidden(tmp_path) == []
