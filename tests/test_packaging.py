"""rules/ and configs/ must be inside a plain (non-editable) install, not only in a checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tracked_copy(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to know the tracked files")
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    _tracked_copy(src)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("titan_npu-*.whl")
    return whl


def test_wheel_carries_every_rules_and_configs_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, target in (("rules", "titan_knowledge/rules"), ("configs", "titan_train/_data/configs")):
        for f in (REPO / folder).rglob("*.toml"):
            assert f"{target}/{f.relative_to(REPO / folder).as_posix()}" in names, f
    assert {"titan_doctor/cli.py", "titan_train/cli.py", "titan_knowledge/__init__.py"} <= names


def test_installed_copy_finds_its_data_without_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    code = (
        "import titan_knowledge as k, titan_train.config.paths as r, titan_train.components.metrics as m; "
        "print(k.rules_dir()); print(r.configs_dir()); print(m.lookup_device('Ascend910B3')['name'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == str(site / "titan_knowledge" / "rules")
    assert out[1] == str(site / "titan_train" / "_data" / "configs")
    assert out[2] == "Ascend 910B3"
    proc = subprocess.run(
        [sys.executable, "-m", "titan_train.cli", "run", "--config", "llama_13b", "--print-config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and '"d_model": 5120' in proc.stdout, proc.stderr


def test_wheel_carries_every_module_of_every_subpackage(wheel):
    """pyproject lists the packages by hand: a new subpackage missing there would vanish
    from an installed copy while every test in a checkout still passes."""
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {
        p.relative_to(REPO).as_posix()
        for pkg in ("titan_train", "titan_doctor", "titan_knowledge")
        for p in (REPO / pkg).rglob("*.py")
    }
    assert sorted(modules - names) == []
