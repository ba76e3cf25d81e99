"""Helpers that run the real trainer in real processes and read what it wrote."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _shared_data() -> Path:
    """The read-only test assets: $TITAN_SHARED_DATA, else `shared/data` beside the checkout
    (or beside its parent folder, for a git worktree under wt/). Tests skip when absent."""
    if os.environ.get("TITAN_SHARED_DATA"):
        return Path(os.environ["TITAN_SHARED_DATA"])
    for base in (REPO.parent, REPO.parent.parent):
        if (base / "shared" / "data").is_dir():
            return base / "shared" / "data"
    return REPO.parent / "shared" / "data"


SHARED_DATA = _shared_data()
TOKENIZER_2K = SHARED_DATA / "tokenizer-2k" / "tokenizer.json"
TINYSHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
needs_tokenizer_2k = pytest.mark.skipif(not TOKENIZER_2K.is_file(), reason="shared test assets absent")

# The debug model's shape with short sequences: real multi-rank runs in seconds on 2 cores.
FAST = [
    "training.seq_len=64",
    "training.batch_size=8",
    "metrics.log_every=1",
    "training.warmup_steps=2",
    "checkpoint.save_interval=0",
]


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RANK", None), env.pop("WORLD_SIZE", None), env.pop("LOCAL_RANK", None)
    env["OMP_NUM_THREADS"] = "1"  # ranks share 2 cores; keep runs comparable and quick
    return env


def trainer_cmd(nproc: int = 1, overrides=(), extra=(), torchrun: bool = False) -> list[str]:
    """`titan-train run` of the debug config (or a torchrun starting it)."""
    args = ["run", "--config", str(REPO / "configs" / "llama_debug.toml"), *extra]
    for o in overrides:
        args += ["--set", o]
    if torchrun:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            "-m",
            "titan_train.cli",
            *args,
        ]
    return [sys.executable, "-m", "titan_train.cli", *args, "--nproc", str(nproc)]


def run_trainer(
    workdir: Path,
    *,
    nproc: int = 1,
    overrides=(),
    torchrun: bool = False,
    extra=(),
    timeout: int = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the trainer to its end in `workdir`; `env`: extra variables (a fault to inject)."""
    return subprocess.run(
        trainer_cmd(nproc, overrides, extra, torchrun),
        cwd=workdir,
        env={**trainer_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_node(workdir: Path, *, nproc: int, overrides=(), extra=()) -> subprocess.Popen:
    """One node's `titan-train run` started in the background (a multi-node test starts one per
    node on this host), its output piped; `extra`: the node's --nnodes / --node-rank / rendezvous."""
    return subprocess.Popen(
        trainer_cmd(nproc, overrides, extra),
        cwd=workdir,
        env=trainer_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_in_process(
    workdir: Path, monkeypatch, *, nproc: int = 1, overrides=(), extra=()
) -> subprocess.CompletedProcess:
    """`titan-train run` called in this process (click's CliRunner) for a refusal that comes
    before any rank starts (preflight, the launcher's folder checks): the exit code, stdout and
    stderr run_trainer would give, without a trainer process start. Getting past the refusal
    (starting the ranks, or the loop of a 1-process run) fails the test instead of training.
    Each refusal keeps one real-process test, for the exit code end to end."""
    from click.testing import CliRunner

    from titan_train.checkpoint import run_lock
    from titan_train.cli import main

    def no_ranks(*args, **kwargs):
        raise AssertionError("run_in_process: the run was not refused; it would start training")

    monkeypatch.setattr("titan_train.runtime.launch.spawn", no_ranks)
    monkeypatch.setattr("titan_train.train.train", no_ranks)
    for var in (run_lock.HELD_ENV, "RANK", "WORLD_SIZE", "LOCAL_RANK"):  # restored as they were afterwards
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.chdir(workdir)
    args = trainer_cmd(nproc, overrides, extra)[3:]  # the same arguments, without `python -m titan_train.cli`
    result = CliRunner().invoke(main, args)
    if isinstance(result.exception, AssertionError):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def per_step(workdir: Path, field: str, name: str = "llama_debug") -> dict[int, float]:
    """step -> `field` from the run's metrics.jsonl (the last record per step wins)."""
    out = {}
    for line in (workdir / "outputs" / name / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "step" in rec and field in rec:  # a validation record has no training loss, and so on
            out[rec["step"]] = rec[field]
    return out


def losses(workdir: Path, name: str = "llama_debug") -> dict[int, float]:
    return per_step(workdir, "loss", name)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"trainer failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def _session_root(tmp_path_factory) -> Path:
    """A folder every process of this test session shares: with pytest-xdist each worker has
    its own basetemp (<session>/popen-gwN), so the shared one is its parent."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _held(lock: Path):
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class SharedRuns:
    """Trainer runs made once per test session, however many pytest-xdist workers ask: a run
    is a folder named by the hash of exactly what it was run with, made under a file lock by
    the first worker that needs it and read by the others. A run that failed is not kept
    (the next asker runs it again and gets the failure)."""

    DONE = "done.json"

    def __init__(self, root: Path):
        self._root = root
        root.mkdir(parents=True, exist_ok=True)

    def get(self, key: list, run) -> tuple[Path, str]:
        """(the run's folder, its stdout); `run(folder)` makes it (returns the process)."""
        text = json.dumps(key)
        folder = self._root / hashlib.sha256(text.encode()).hexdigest()[:16]
        with _held(folder.with_suffix(".lock")):
            if not (folder / self.DONE).is_file():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                proc = ok(run(folder))
                (folder / "stdout.txt").write_text(proc.stdout)
                (folder / self.DONE).write_text(text)
        return folder, (folder / "stdout.txt").read_text()


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> SharedRuns:
    return SharedRuns(_session_root(tmp_path_factory) / "shared-runs")


class ReferenceRuns:
    """Uninterrupted trainer runs, each run once per session and keyed by exactly what it was
    run with: the same nproc and overrides train the same losses (fp32 on gloo is deterministic;
    resumed runs are compared with these to 1e-6), so files that compared against runs of their
    own now share one. `reference_run(...)` is the finished workdir, to READ; a test that writes
    into the folder (resumes, damages a checkpoint) takes `reference_run.copy(dest, ...)`."""

    def __init__(self, shared: SharedRuns):
        self._shared = shared

    def __call__(self, *, nproc: int = 1, overrides=()) -> Path:
        def run(wd: Path):
            return run_trainer(wd, nproc=nproc, overrides=overrides)

        return self._shared.get(["reference", nproc, list(overrides)], run)[0]

    def copy(self, dest: Path, *, nproc: int = 1, overrides=()) -> Path:
        """The run's folder copied into `dest` (created if absent), as if it had run there."""
        src = self(nproc=nproc, overrides=overrides)

        def cache_files(folder, names):
            return [n for n in names if Path(folder) == src and n in (SharedRuns.DONE, "stdout.txt")]

        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True, ignore=cache_files)
        return dest


@pytest.fixture(scope="session")
def reference_run(shared_runs) -> ReferenceRuns:
    return ReferenceRuns(shared_runs)


PARITY_STEPS = 10


class Run:
    """A finished trainer run: its stdout and what metrics.jsonl says per step."""

    def __init__(self, workdir: Path, stdout: str):
        self.workdir, self.stdout = workdir, stdout
        self.losses, self.grad_norms = losses(workdir), per_step(workdir, "grad_norm")


def parity_run(shared_runs: SharedRuns, name: str, nproc: int, overrides=(), torchrun: bool = False) -> Run:
    """The debug model for PARITY_STEPS fp32 steps on a layout; shared runs are session fixtures."""
    args = FAST + [f"training.steps={PARITY_STEPS}", *overrides]

    def run(wd: Path):
        return run_trainer(wd, nproc=nproc, torchrun=torchrun, overrides=args)

    wd, stdout = shared_runs.get(["parity", name, nproc, args, torchrun], run)
    return Run(wd, stdout)


def assert_same_run(got: Run, want: Run, abs_tol: float) -> None:
    """Same loss and grad norm at every step, within abs_tol."""
    assert sorted(got.losses) == list(range(1, PARITY_STEPS + 1))
    for step in range(1, PARITY_STEPS + 1):
        assert got.losses[step] == pytest.approx(want.losses[step], abs=abs_tol), (step, got.losses, want.losses)
        assert got.grad_norms[step] == pytest.approx(want.grad_norms[step], abs=10 * abs_tol), step


@pytest.fixture(scope="session")
def one_rank(shared_runs) -> Run:
    return parity_run(shared_runs, "one", 1)


@pytest.fixture(scope="session")
def fsdp_two(shared_runs) -> Run:
    """2 ranks FSDP, started by a plain torchrun (the trainer finds itself under it)."""
    return parity_run(shared_runs, "fsdp2", 2, torchrun=True)


@pytest.fixture(scope="session")
def fsdp_tp_four(shared_runs) -> Run:
    return parity_run(shared_runs, "fsdp2tp2", 4, ["distributed.tp_size=2"])


@pytest.fixture
def world_of_one():
    """A one-rank gloo process group in this process, for in-process builds."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def fake_world():
    """A fake process group of `size` ranks (this process is rank 0): collectives do nothing,
    so a layout can be built and stepped in one process, as the memory planner does."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def start(size: int) -> None:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)

    try:
        yield start
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
