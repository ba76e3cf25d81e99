"""Shared helpers: run the real CLI in a subprocess, build CANN-like directory trees,
and (once per session) virtualenvs with a broken torch_npu and with no torch at all."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """A predictable environment: no Ascend/NCCL/MASTER_* from the host leaks in."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "titan_doctor", "diagnose", *args],
        cwd=REPO,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, dict]]:
    """Exit code and {id: row} of a --format json run (first row per id)."""
    p = run_cli(*args, "--format", "json", env=env)
    assert "Traceback" not in p.stderr, p.stderr
    rows: dict[str, dict] = {}
    for row in json.loads(p.stdout)["checks"]:
        rows.setdefault(row["id"], row)
    return p.returncode, rows


def make_cann(
    root: Path,
    version: str | None,
    *,
    layout: str = "ascend-toolkit",
    arch: str = "x86_64",
    info: str | None = None,
    set_env: bool = True,
    name: str | None = None,
) -> Path:
    """A CANN toolkit tree as the installer leaves it:
    <root>/ascend-toolkit/<version>/<arch>-linux/ascend_toolkit_install.info, 'latest'
    symlink, and <root>/ascend-toolkit/set_env.sh."""
    if layout == "ascend-toolkit":
        home = root / "ascend-toolkit" / (name or version or "broken")
        latest = root / "ascend-toolkit" / "latest"
        home.mkdir(parents=True, exist_ok=True)
        if not latest.exists():
            latest.symlink_to(home.name)
        script_dir = root / "ascend-toolkit"
    else:
        home = root / "cann"
        home.mkdir(parents=True, exist_ok=True)
        script_dir = home
    (home / "lib64").mkdir(exist_ok=True)
    text = (
        info
        if info is not None
        else (
            f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C19\narch={arch}\nos=linux\n"
            f"path={home}/{arch}-linux\n"
        )
    )
    if text != "<none>":
        d = home / f"{arch}-linux"
        d.mkdir(exist_ok=True)
        (d / "ascend_toolkit_install.info").write_text(text)
    if set_env:
        (script_dir / "set_env.sh").write_text(f"export ASCEND_HOME_PATH={home}\n")
    return home


def make_driver(root: Path, version: str) -> Path:
    d = root / "driver"
    d.mkdir(parents=True, exist_ok=True)
    (d / "version.info").write_text(f"Version={version}\nascendhal_version=7.35.23\n")
    return d / "version.info"


def _bare_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _site(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


@pytest.fixture(scope="session")
def npu_venv(tmp_path_factory) -> Path:
    """A venv that sees this session's torch (found at run time, via a .pth file) plus
    the real torch-npu==2.13.0 wheel from the registry, installed --no-deps. Without
    CANN, `import torch_npu` fails with the real 'libhccl.so' ImportError."""
    spec = importlib.util.find_spec("torch")
    assert spec and spec.submodule_search_locations, "the test interpreter needs torch"
    from importlib.metadata import version

    if not version("torch").startswith("2.13.0"):  # torch_npu 2.13.0 would fail on the version, not on CANN
        pytest.skip(f"the broken-venv test pairs torch-npu 2.13.0 with torch 2.13.0; this torch is {version('torch')}")
    torch_site = Path(list(spec.submodule_search_locations)[0]).parent
    py = _bare_venv(tmp_path_factory.mktemp("npu-venv") / "v")
    site = _site(py)
    (site / "titan_torch_site.pth").write_text(str(torch_site) + "\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(site),
            "torch-npu==2.13.0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0:
        pytest.skip(f"cannot fetch torch-npu==2.13.0 from the package registry: {p.stderr.strip()[-300:]}")
    return py


@pytest.fixture(scope="session")
def notorch_venv(tmp_path_factory) -> Path:
    return _bare_venv(tmp_path_factory.mktemp("notorch-venv") / "v")


def log_root(tmp_path: Path, text: str):
    """The root finding diagnose --log gives for a log holding `text`."""
    from titan_doctor.diagnose import logs

    p = tmp_path / "run.log"
    p.write_text(text)
    return logs.explain([p])[0]
