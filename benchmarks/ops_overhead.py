"""What the run-safety pieces cost per training step, measured on 2 real gloo ranks.

Two tables, printed side by side; never pass/fail:
  1. per call: span() (not profiling), Watchdog.watch(step) (its thread running),
     GracefulStop.agreed() (the 4-byte all-reduce every step, on its gloo group), a disabled
     Profiler.step(), Eta.fields(step), FiniteGuard.observe() on a step that is not a log
     step (device-side only) and FiniteGuard.check() (its all-reduce, at log steps and saves);
  2. per step: the trainer's own train_step on the debug model (FSDP over 2 ranks), bare
     and wrapped the way train.py wraps it (watch + guard + agreed + checkpoint span + prof.step),
     alternating in blocks so load from elsewhere on the machine hits both alike; each row
     keeps the median step.

    .venv/bin/python benchmarks/ops_overhead.py [--steps 40] [--seq-len 256] [--calls 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def per_call_us(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def worker(opts: argparse.Namespace) -> None:
    """One rank: build the trainer's parts, then time the pieces and the step."""
    import torch
    import torch.distributed as dist

    from titan_train.build import build
    from titan_train.components import metrics
    from titan_train.config import job as config
    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.runtime import device, finite_guard, profiling, signals
    from titan_train.runtime.profiling import span
    from titan_train.runtime.watchdog import Watchdog
    from titan_train.step import train_step

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    cfg = config.load(
        REPO / "configs" / "llama_debug.toml",
        [f"training.seq_len={opts.seq_len}", "training.batch_size=8", "training.steps=1000"],
    )
    dims = ParallelDims.for_world(2, tp=1, pp=1)
    parts = build(cfg, dims, torch.device("cpu"))
    gen = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, cfg.model.vocab_size, (4, opts.seq_len + 1), generator=gen)
    batches = [(tokens[:, :-1], tokens[:, 1:])]
    dev = device.Device("cpu", "gloo", 1)
    prof_cfg = config.ProfilingConfig(enabled=False)
    out = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        signals.GracefulStop() as stop,
        Watchdog(config.WatchdogConfig(), tmp, rank) as wd,
        profiling.Profiler(prof_cfg, dev, rank) as prof,
    ):
        eta = metrics.Eta(1000)
        guard = finite_guard.FiniteGuard(torch.device("cpu"), every=10**9, last_step=10**9)
        stats = train_step(parts, batches)

        def in_span():
            with span("forward"):
                pass

        def in_watch():
            with wd.watch(1):
                pass

        n = opts.calls
        out["calls"] = {
            "span('forward'), not profiling": per_call_us(in_span, n),
            "Watchdog.watch(step), thread on": per_call_us(in_watch, n),
            "GracefulStop.agreed(), 2 ranks": per_call_us(stop.agreed, max(1, n // 10)),
            "Profiler.step(), disabled": per_call_us(prof.step, n),
            "Eta.fields(step)": per_call_us(lambda: eta.fields(10), n),
            "FiniteGuard.observe(), not a log step": per_call_us(lambda: guard.observe(1, stats), n),
            "FiniteGuard.check(), 2 ranks": per_call_us(guard.check, max(1, n // 10)),
        }

        def bare(step: int) -> None:
            train_step(parts, batches)

        def guarded(step: int) -> None:  # what train.py adds around the step
            with wd.watch(step):
                guard.observe(step, train_step(parts, batches))
                stop.agreed()
            with span("checkpoint"):
                pass
            prof.step()

        times = {"bare": [], "guarded": []}
        for step in range(2):  # warm-up (first steps allocate)
            bare(step)
        block = 2
        for start in range(0, opts.steps, block):
            for name, fn in (
                (("bare", bare), ("guarded", guarded))
                if start // block % 2 == 0
                else (("guarded", guarded), ("bare", bare))
            ):
                for step in range(start, start + block):
                    dist.barrier()
                    t0 = time.perf_counter()
                    fn(step + 1)
                    times[name].append(time.perf_counter() - t0)
        out["step_ms"] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        out["spread_ms"] = {
            k: (statistics.quantiles(v, n=4)[2] - statistics.quantiles(v, n=4)[0]) * 1e3 for k, v in times.items()
        }  # interquartile range: the noise to compare against
        out["steps"] = len(times["bare"])
    if rank == 0:
        Path(os.environ["OPS_OVERHEAD_OUT"]).write_text(json.dumps(out))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per variant")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--calls", type=int, default=20000, help="calls per micro measurement")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.worker:
        return worker(opts)

    from titan_train.runtime import launch

    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", OPS_OVERHEAD_OUT=str(result_path))
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "--steps",
            str(opts.steps),
            "--seq-len",
            str(opts.seq_len),
            "--calls",
            str(opts.calls),
        ]
        run = launch.start_ranks(cmd, launch.LaunchOptions(nproc=2), env, Path(tmp) / "logs", echo_rank0=False)
        if run.exit_code:
            raise SystemExit(
                launch.summary(run, tmp)
                + "\n"
                + launch.read_log(run.first_failure.log if run.first_failure else run.ranks[0].log)
            )
        res = json.loads(result_path.read_text())
    width = max(len(k) for k in [*res["calls"], "with watch + guard + agreed + span + prof"])
    print(f"{'per call (2 gloo ranks, rank 0)':<{width}}   us/call")
    for name, us in res["calls"].items():
        print(f"{name:<{width}}  {us:8.2f}")
    bare, guarded = res["step_ms"]["bare"], res["step_ms"]["guarded"]
    print()
    print(f"train_step, debug model, FSDP 2 ranks, seq {opts.seq_len}, median of {res['steps']} steps each:")
    spread = res["spread_ms"]
    print(f"{'bare train_step':<{width}}  {bare:8.2f} ms   (interquartile range {spread['bare']:.1f} ms)")
    print(
        f"{'with watch + guard + agreed + span + prof':<{width}}  {guarded:8.2f} ms   (interquartile range "
        f"{spread['guarded']:.1f} ms; {(guarded - bare) / bare * 100:+.2f}%, {(guarded - bare) * 1e3:+.0f} us)"
    )
    pieces = sum(v for k, v in res["calls"].items() if not k.startswith(("Eta", "FiniteGuard.check")))  # per step
    print(
        f"{'sum of the per-call costs':<{width}}  {pieces / 1e3:8.3f} ms   ({pieces / 1e3 / bare * 100:.3f}% of a step)"
    )


if __name__ == "__main__":
    main()
