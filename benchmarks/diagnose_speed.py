"""Wall and CPU time of `titan-doctor diagnose` (default checks; target <= 2 s) and of
`diagnose --log` on the real-log corpus and on a large synthetic training log. Figures,
not pass/fail; --repo runs another checkout (e.g. main) for a side-by-side.

    python benchmarks/diagnose_speed.py [--repo PATH] [--runs 3] [--lines 200000]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CORPUS = HERE / "tests" / "diagnose" / "real_logs"


def run(repo: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of one diagnose run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "titan_doctor", "diagnose", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def big_log(path: Path, lines: int) -> None:
    """Training chatter with a few warnings, then one real error at the end."""
    with open(path, "w") as fh:
        for i in range(lines):
            r = i % 4
            fh.write(
                f"{{'loss': {i % 97 / 10:.4f}, 'grad_norm': 1.41, 'learning_rate': 2.0e-06, 'epoch': 0.01}}\n"
                if r == 0
                else f"  1%|          | {i}/175200 [00:29<1:22:01,  2.83s/it]\n"
                if r == 1
                else f"[rank{i % 8}]:[W609 06:57:47.8 compiler_depend.ts:877] Warning: The HCCL execution timeout "
                "was set to never timeout (function ProcessGroupHCCL)\n"
                if r == 2
                else f"INFO 06-09 06:57:48 [worker.py:581] Epoch {i} step {i} throughput 1234 tokens/s\n"
            )
        fh.write((CORPUS / "vllm_ascend_486_ei0006_rank1.log").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lines", type=int, default=200_000)
    a = ap.parse_args()
    repo = a.repo.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.log"
        big_log(big, a.lines)
        cases = [
            ("diagnose (default checks)", []),
            ("diagnose --no-import-torch", ["--no-import-torch"]),
            (f"--log corpus folder ({len(list(CORPUS.rglob('*.log')))} files)", ["--log", str(CORPUS)]),
            (f"--log {a.lines:,}-line log", ["--log", str(big)]),
        ]
        print(f"{repo}  ({a.runs} runs each, median)")
        print(f"{'what':<44} {'wall s':>8} {'cpu s':>8}")
        for name, args in cases:
            res = [run(repo, args) for _ in range(a.runs)]
            print(f"{name:<44} {statistics.median(r[0] for r in res):8.2f} {statistics.median(r[1] for r in res):8.2f}")


if __name__ == "__main__":
    main()
