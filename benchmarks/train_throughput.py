"""Tokens/s and MFU of `titan-train` on 1 and 2 ranks, with activation checkpointing (full,
selective), with 2 pipeline stages and with torch.compile, side by side with a plain
single-process eager PyTorch training step of the same model and shape (the ceiling
for our loop's overhead). Prints figures; never passes or fails.

    python benchmarks/train_throughput.py [--steps 8] [--seq-len 2048] [--batch 2] [--rounds 2]

The runs are interleaved for --rounds rounds and each row keeps its best round, so a
burst of load from elsewhere on the machine does not decide the ratio. The compile row's
warm-up steps include compilation; its first-step time is printed separately.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def raw_eager(seq_len: int, batch: int, steps: int, warmup: int) -> float:
    """tokens/s of forward + backward + clip + AdamW on one process, no distributed."""
    import torch
    import torch.nn.functional as F

    from titan_train.config import job as config
    from titan_train.models.llama import Transformer

    args = config.load(REPO / "configs" / "llama_debug.toml").model
    model = Transformer(args)
    model.init_weights(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab_size, (batch, seq_len + 1), generator=gen)
    elapsed = 0.0
    for step in range(warmup + steps):
        start = time.perf_counter()
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= warmup:
            elapsed += time.perf_counter() - start
    return steps * batch * seq_len / elapsed


FIRST_STEP_S: dict[str, float] = {}


def trainer(nproc: int, seq_len: int, batch: int, steps: int, warmup: int, extra=(), name: str = "") -> float:
    """tokens/s over the steps after warm-up, from the run's own metrics.jsonl."""
    with tempfile.TemporaryDirectory() as wd:
        sets = [
            f"training.seq_len={seq_len}",
            f"training.batch_size={batch}",
            f"training.steps={warmup + steps}",
            "metrics.log_every=1",
            "checkpoint.save_interval=0",
            'training.mixed_precision="fp32"',
            *extra,
        ]
        cmd = [sys.executable, "-m", "titan_train.cli", "run", "--config", "llama_debug", "--nproc", str(nproc)]
        for s in sets:
            cmd += ["--set", s]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.run(cmd, cwd=wd, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"trainer failed:\n{proc.stdout}\n{proc.stderr}")
        recs = [json.loads(line) for line in (Path(wd) / "outputs/llama_debug/metrics.jsonl").read_text().splitlines()]
        steady = [r for r in recs if r.get("step", 0) > warmup]
        FIRST_STEP_S[name] = min(
            FIRST_STEP_S.get(name, float("inf")), next(r["elapsed_s"] for r in recs if "step" in r)
        )
        return len(steady) * batch * seq_len / sum(r["elapsed_s"] for r in steady)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=2, help="global batch (sequences)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved repetitions; the best of each is shown")
    a = ap.parse_args()

    import torch
    from tabulate import tabulate

    from titan_train.components.metrics import measure_matmul_flops
    from titan_train.config import job as config
    from titan_train.config.model_args import flops_per_token

    fpt = flops_per_token(config.load(REPO / "configs" / "llama_debug.toml").model, a.seq_len)
    peak32, peak16 = measure_matmul_flops("fp32", seconds=1.0), measure_matmul_flops("bf16", seconds=1.0)
    print(
        f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"measured matmul peak fp32 {peak32 / 1e9:,.0f} GFLOP/s, bf16 {peak16 / 1e9:,.0f} GFLOP/s"
    )
    print(
        f"model: llama_debug (dim 256, 6 layers, 16 heads, vocab 2048), seq_len {a.seq_len}, "
        f"global batch {a.batch}, fp32, {a.steps} timed steps after {a.warmup} warm-up"
    )

    def run(nproc: int, *extra: str):
        return lambda name: trainer(nproc, a.seq_len, a.batch, a.steps, a.warmup, extra, name)

    runs = [
        ("raw eager PyTorch step (1 process)", 1, lambda name: raw_eager(a.seq_len, a.batch, a.steps, a.warmup)),
        ("titan-train, 1 rank", 1, run(1)),
        ("titan-train, 2 ranks (FSDP)", 2, run(2)),
        ("titan-train, 1 rank, AC full", 1, run(1, 'training.activation_checkpoint="full"')),
        ("titan-train, 1 rank, AC selective", 1, run(1, 'training.activation_checkpoint="selective"')),
        (
            "titan-train, 2 ranks, PP=2 (1F1B, 2 micro-batches)",
            2,
            run(2, "distributed.pp_size=2", "distributed.pp_microbatches=2"),
        ),
        ("titan-train, 1 rank, torch.compile per block", 1, run(1, "training.compile=true")),
    ]
    best = [0.0] * len(runs)
    for r in range(a.rounds):
        for i, (name, _, fn) in enumerate(runs):
            tps = fn(name)
            print(f"  round {r + 1}: {name}: {tps:,.0f} tokens/s", flush=True)
            best[i] = max(best[i], tps)
    raw = best[0]
    rows = [(name, tps, n) for (name, n, _), tps in zip(runs, best)]
    table = [
        (name, f"{tps:,.0f}", f"{tps / n:,.0f}", f"{tps / raw:.2f}", f"{tps * fpt / peak32 * 100:.1f}%")
        for name, tps, n in rows
    ]
    print(
        tabulate(
            table,
            headers=["run", "tokens/s total", "tokens/s per rank", "vs raw", "MFU (fp32 peak)"],
            colalign=("left", "right", "right", "right", "right"),
        )
    )
    print(
        "first step (s, best round; includes compilation for the compile row): "
        + ", ".join(f"{name}: {secs:.1f}" for name, secs in FIRST_STEP_S.items())
    )


if __name__ == "__main__":
    main()
