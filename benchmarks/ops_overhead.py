"""Per-step cost of the run-operation pieces the loop will call every step, side by side:
span() (not profiling), Watchdog.watch(), GracefulStop.agreed() (one 4-byte all-reduce on a
1-rank gloo group), and Eta.fields(). Prints microseconds per call; never pass/fail.

    .venv/bin/python benchmarks/ops_overhead.py
"""
import os
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch.distributed as dist  # noqa: E402

from titan_train import launch, metrics, signals  # noqa: E402
from titan_train.config import WatchdogConfig  # noqa: E402
from titan_train.profiling import span  # noqa: E402
from titan_train.watchdog import Watchdog  # noqa: E402

N = 20_000


def per_call_us(fn, n=N) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main():
    launch.single_process_env()
    dist.init_process_group("gloo")

    def in_span():
        with span("forward"):
            pass

    with TemporaryDirectory() as tmp, Watchdog(WatchdogConfig(), tmp, 0) as wd, signals.GracefulStop() as stop:
        def in_watch():
            with wd.watch(1):
                pass

        eta = metrics.Eta(1000)
        rows = [("span('forward'), not profiling", per_call_us(in_span)),
                ("Watchdog.watch(step)", per_call_us(in_watch)),
                ("GracefulStop.agreed() (gloo, 1 rank)", per_call_us(stop.agreed, n=2000)),
                ("Eta.fields(step)", per_call_us(lambda: eta.fields(10)))]
    dist.destroy_process_group()
    width = max(len(name) for name, _ in rows)
    print(f"{'per step':<{width}}  us/call   (pid {os.getpid()}, {N} calls)")
    for name, us in rows:
        print(f"{name:<{width}}  {us:8.2f}")


if __name__ == "__main__":
    main()
