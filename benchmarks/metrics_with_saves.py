"""Tokens/s as the trainer reports it, with a checkpoint saved every step (save_interval 1,
log_every 10) and without saves, side by side: a save is not training time, so the two
figures should agree (target: within 15%). The wall-clock rate, saves included, is printed
next to them for what saving every step really costs. Prints figures; never passes or fails.

    python benchmarks/metrics_with_saves.py [--nproc 2] [--steps 40] [--seq-len 64] [--rounds 3]

Runs alternate for --rounds rounds and each keeps its best round, so a burst of load from
elsewhere on a shared machine does not decide the ratio. The first logged window (warm-up)
is left out of the reported rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(nproc: int, steps: int, seq_len: int, log_every: int, save_interval: int) -> tuple[float, float, float]:
    """(reported tokens/s after the first window, wall-clock tokens/s of the whole loop, max MFU or -1)."""
    with tempfile.TemporaryDirectory() as wd:
        sets = [
            f"training.seq_len={seq_len}",
            "training.batch_size=8",
            f"training.steps={steps}",
            f"metrics.log_every={log_every}",
            f"checkpoint.save_interval={save_interval}",
            "checkpoint.keep_last_n=2",
            "training.warmup_steps=2",
        ]
        cmd = [sys.executable, "-m", "titan_train.cli", "run", "--config", "llama_debug", "--nproc", str(nproc)]
        for s in sets:
            cmd += ["--set", s]
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=wd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode:
            raise SystemExit(f"trainer failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        recs = [json.loads(line) for line in (Path(wd) / "outputs/llama_debug/metrics.jsonl").read_text().splitlines()]
        logged = [r for r in recs if "step" in r]
        steady = logged[1:]
        tokens = sum(r["tokens_per_s"] * r["elapsed_s"] for r in steady)
        reported = tokens / sum(r["elapsed_s"] for r in steady)
        mfus = [r["mfu"] if r.get("mfu") is not None else r.get("mfu_over_peak", -1) for r in logged]
        return reported, steps * 8 * seq_len / wall, max(m for m in mfus if m is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from tabulate import tabulate

    rows = {"no saves (save_interval 0)": 0, "save every step (save_interval 1)": 1}
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in rows}
    for r in range(a.rounds):
        for name, interval in rows.items():
            got[name].append(run(a.nproc, a.steps, a.seq_len, a.log_every, interval))
            rep, wall, _ = got[name][-1]
            print(f"  round {r + 1}: {name}: reported {rep:,.0f} tokens/s, wall clock {wall:,.0f} tokens/s", flush=True)
    best = {name: max(runs) for name, runs in got.items()}
    median = {name: statistics.median(r[0] for r in runs) for name, runs in got.items()}
    base, base_median = best["no saves (save_interval 0)"][0], median["no saves (save_interval 0)"]
    print(
        f"llama_debug, {a.nproc} gloo ranks, seq_len {a.seq_len}, global batch 8, {a.steps} steps, "
        f"log_every {a.log_every}; {a.rounds} rounds"
    )
    print(
        tabulate(
            [
                (
                    name,
                    f"{rep:,.0f}",
                    f"{rep / base:.2f}",
                    f"{median[name]:,.0f}",
                    f"{median[name] / base_median:.2f}",
                    f"{wall:,.0f}",
                    f"{mfu * 100:.1f}%",
                )
                for name, (rep, wall, mfu) in best.items()
            ],
            headers=[
                "run",
                "reported tok/s (best)",
                "vs no saves",
                "reported tok/s (median)",
                "vs no saves",
                "wall-clock tok/s, saves included (best)",
                "max MFU",
            ],
            colalign=("left", "right", "right", "right", "right", "right", "right"),
        )
    )


if __name__ == "__main__":
    main()
