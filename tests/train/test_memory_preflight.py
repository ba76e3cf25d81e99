"""`titan-train run` checks memory before starting any rank: clearly over is refused with one
line (exit 2), within the estimate's error is a warning, --ignore-memory goes ahead."""

from __future__ import annotations

import subprocess
import sys

import pytest

from titan_train import cli
from titan_train.config.job import load
from titan_train.config.paths import configs_dir
from titan_train.memory import remedies as mr
from titan_train.runtime import device
from titan_train.runtime.launch import LaunchOptions

from .conftest import REPO, trainer_env

GiB = 2**30
CPU = device.Device("cpu", "gloo", 1)


@pytest.mark.multirank
def test_7b_on_this_host_is_refused_in_one_line_before_any_rank(tmp_path):
    """Before this check the run allocated until the OOM killer ended it."""
    p = subprocess.run(
        [sys.executable, "-m", "titan_train.cli", "run", "--config", "llama_7b", "--set", 'distributed.backend="auto"'],
        cwd=tmp_path,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    line = lines[0]
    assert line.startswith("titan-train: error: llama_7b needs about ") and "GiB per rank" in line
    assert "host memory available" in line and "--ignore-memory" in line and "--set " in line
    assert not (tmp_path / "outputs").exists()  # nothing started, nothing written


def _fake_memory(monkeypatch, gib: float):
    monkeypatch.setattr(device, "memory_per_rank", lambda dev, ranks: (int(gib * GiB), "test card"))


def _peak(cfg, world=1) -> int:
    return mr.estimate_for(cfg, mr.Target(world, 1, "gloo", accelerator=False)).peak_bytes


def test_clearly_over_raises_and_ignore_memory_goes_ahead(monkeypatch, capsys):
    cfg = load(configs_dir() / "llama_debug.toml")
    _fake_memory(monkeypatch, _peak(cfg) * 0.5 / GiB)
    with pytest.raises(cli._UserError, match=r"llama_debug needs about .* GiB per rank .*test card"):
        cli._check_memory(cfg, LaunchOptions(nproc=1), CPU, ignore_memory=False)
    cli._check_memory(cfg, LaunchOptions(nproc=1), CPU, ignore_memory=True)
    assert "warning: memory may not fit" in capsys.readouterr().err


def test_within_the_error_band_is_a_warning(monkeypatch, capsys):
    cfg = load(configs_dir() / "llama_debug.toml")
    _fake_memory(monkeypatch, _peak(cfg) * 1.05 / GiB)
    cli._check_memory(cfg, LaunchOptions(nproc=1), CPU, ignore_memory=False)
    err = capsys.readouterr().err
    assert err.startswith("titan-train: warning: memory may not fit: llama_debug needs about")


def test_room_to_spare_is_silent(monkeypatch, capsys):
    cfg = load(configs_dir() / "llama_debug.toml")
    _fake_memory(monkeypatch, 64)
    cli._check_memory(cfg, LaunchOptions(nproc=1), CPU, ignore_memory=False)
    assert capsys.readouterr().err == ""


def test_host_memory_is_shared_by_the_local_ranks(monkeypatch):
    monkeypatch.setattr(device, "host_available_bytes", lambda: 12 * GiB)
    assert device.memory_per_rank(CPU, 4) == (3 * GiB, "host memory available 12.00 GiB shared by 4 local rank(s)")


def test_host_available_reads_meminfo():
    available = device.host_available_bytes()
    with open("/proc/meminfo") as fh:
        total = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemTotal:"))
    assert 0 < available <= total


def test_help_documents_the_flag():
    p = subprocess.run(
        [sys.executable, "-m", "titan_train.cli", "run", "--help"],
        cwd=REPO,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--ignore-memory" in p.stdout and "memory estimate" in p.stdout
