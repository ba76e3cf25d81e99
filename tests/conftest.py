"""Suite-wide: the `multirank` tier's contract, and a count of the processes it starts.

A test that starts trainer ranks or other distributed worker processes carries the
`multirank` marker, so `make test-fast` (`-m "not multirank"`) runs none. Two opt-in
switches check that from the outside, in this pytest process:

- TITAN_TEST_NO_RANKS=1: starting one fails the test (run it with `-m "not multirank"`:
  an unmarked test that starts ranks then fails, naming what it started);
- TITAN_TEST_LAUNCH_LOG=FILE: one line per start is appended to FILE
  (`<test id>\\t<kind>\\t<command>`), to count them.

What counts as a start is `rank_launch` below: a trainer `run` (the launcher, which starts
the ranks, or with --nproc 1 the one training process), torchrun, the launcher called from
`python -c`, a rank the launcher starts in this process, the doctor's `--comm` / `--exact`
(their worker processes), a test worker script, torch.multiprocessing.spawn, or a spawned
multiprocessing.Pool (the `--exact` planner's per-stage workers).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Scripts that run as ranks/workers under torchrun or the launcher (tests' and the doctor's).
WORKER_SCRIPTS = ("ckpt_worker.py", "async_ckpt_worker.py", "ops_loop.py", "_comm_worker.py")
# The doctor's options that start worker processes.
DOCTOR_WORKER_OPTIONS = ("--comm", "--exact")


def rank_launch(args, env=None) -> str | None:
    """What `args` (a Popen argv, or a shell string) would start, if it starts ranks or
    distributed workers; None for any other process (git, a probe, `prepare-data`, ...)."""
    argv = args.split() if isinstance(args, (str, bytes)) else [os.fsdecode(a) for a in args]
    names = [Path(a).name for a in argv]
    if env is not None and env.get("TITAN_TRAIN_LAUNCHED") == "1" and "RANK" in env:  # start_ranks' mark
        return "rank"
    if "torch.distributed.run" in argv or "torchrun" in names:
        return "torchrun"
    if any(n in WORKER_SCRIPTS for n in names) or "titan_doctor.diagnose._exact_worker" in argv:
        return "worker"
    trainer = any(a in ("titan_train", "titan_train.cli") for a in argv) or "titan-train" in names
    if trainer and "run" in argv and not {"--print-config", "--help"} & set(argv):  # those exit at once
        return "trainer"
    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else ""  # python -c: what the code calls
    if any(s in code for s in ("launch.run_and_report", "launch.start_ranks", "launch.spawn", *WORKER_SCRIPTS)):
        return "launcher"
    if "titan_train.cli" in code and ("main(['run'" in code or 'main(["run"' in code):
        return "trainer"
    doctor = any(a in ("titan_doctor", "titan_doctor.cli") for a in argv) or "titan-doctor" in names
    if doctor and "diagnose" in argv and any(o in argv for o in DOCTOR_WORKER_OPTIONS):
        return "doctor-workers"
    return None


def spawned_workers(target) -> str | None:
    """What a multiprocessing spawn of `target` starts, if ranks or workers: mp.spawn's ranks,
    or a multiprocessing.Pool's worker (the `--exact` planner runs each pipeline stage in one).
    A concurrent.futures pool (prepare-data's tokenizers) is neither."""
    module = getattr(target, "__module__", "") or ""
    if module.startswith("torch.multiprocessing"):
        return "mp.spawn"
    if module == "multiprocessing.pool":
        return "mp.pool"
    return None


_current_test = "<collection>"


def _record(kind: str, what: str) -> None:
    log = os.environ.get("TITAN_TEST_LAUNCH_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{_current_test}\t{kind}\t{what[:300]}\n")
    if os.environ.get("TITAN_TEST_NO_RANKS") == "1":
        raise RuntimeError(
            f"TITAN_TEST_NO_RANKS=1: {_current_test} starts {kind} processes ({what[:200]}); mark it `multirank`"
        )


def _install_watch() -> None:
    real_init = subprocess.Popen.__init__

    def watched_init(self, args, *a, **kw):
        kind = rank_launch(args, kw.get("env"))
        if kind:
            _record(kind, args if isinstance(args, str) else " ".join(map(os.fsdecode, args)))
        real_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = watched_init

    import multiprocessing.context as mpc

    real_spawn = mpc.SpawnProcess._Popen

    def watched_spawn(process_obj):
        kind = spawned_workers(getattr(process_obj, "_target", None))
        if kind:
            _record(kind, repr(getattr(process_obj, "_args", ""))[:200])
        return real_spawn(process_obj)

    mpc.SpawnProcess._Popen = staticmethod(watched_spawn)


def pytest_configure(config):
    if os.environ.get("TITAN_TEST_LAUNCH_LOG") or os.environ.get("TITAN_TEST_NO_RANKS") == "1":
        _install_watch()


def pytest_runtest_protocol(item, nextitem):
    global _current_test
    _current_test = item.nodeid  # session fixtures' starts count for the first test that needs them
