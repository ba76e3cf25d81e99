"""Wall and CPU time of `titan-doctor diagnose` (default checks; target <= 2 s) and of
`diagnose --log` on one real log (target < 1 s with start-up), the real-log corpus and two
large synthetic logs: training chatter (lines that repeat but for their numbers) and a log of
all-distinct lines (the pre-filter's worst case); for those the MB/s streamed (target >= 25)
and the peak RSS of the process (flat: it must not grow with the log). Figures, not
pass/fail; --repo runs another checkout (e.g. main) for a side-by-side.

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


# runs the CLI and prints the process's own peak RSS (KiB on Linux) on the last stderr line
_WRAP = (
    "import resource, sys\n"
    "from titan_doctor.cli import main\n"
    "sys.argv = ['titan-doctor', 'diagnose', *sys.argv[1:]]\n"
    "try:\n    main()\n"
    "except SystemExit:\n    pass\n"
    "print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)


def run(repo: Path, args: list[str]) -> tuple[float, float, float]:
    """(wall s, child CPU s, peak RSS MiB) of one diagnose run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", _WRAP, *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss = next((int(ln.split()[1]) / 1024 for ln in reversed(p.stderr.splitlines()) if ln.startswith("maxrss")), 0.0)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), rss


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


def distinct_log(path: Path, lines: int) -> None:
    """Lines that never repeat in shape (hex addresses and words differ): every line is new to
    the pre-filter's cache of line shapes."""
    with open(path, "w") as fh:
        for i in range(lines):
            fh.write(f"worker {i:x} handled request {hex(i * 2654435761 % (1 << 32))} for client ab{i % 7919:x}cd\n")
        fh.write((CORPUS / "vllm_ascend_486_ei0006_rank1.log").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lines", type=int, default=200_000)
    a = ap.parse_args()
    repo = a.repo.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        big, distinct = Path(tmp) / "big.log", Path(tmp) / "distinct.log"
        big_log(big, a.lines)
        distinct_log(distinct, a.lines)
        one = CORPUS / "vllm_ascend_486_ei0006_rank1.log"
        cases = [
            ("diagnose (default checks)", [], None, "wall <= 2 s"),
            ("diagnose --no-import-torch", ["--no-import-torch"], None, ""),
            ("--log one real log", ["--log", str(one)], None, "wall < 1 s"),
            (f"--log corpus folder ({len(list(CORPUS.rglob('*.log')))} files)", ["--log", str(CORPUS)], None, ""),
            (f"--log {a.lines:,}-line training log", ["--log", str(big)], big, ">= 25 MB/s, RSS flat"),
            (f"--log {a.lines:,} distinct lines", ["--log", str(distinct)], distinct, ">= 25 MB/s, RSS flat"),
        ]
        print(f"{repo}  ({a.runs} runs each, median)")
        print("MB/s: the log's size over the process's CPU time; 'net': less the one-real-log run's (start-up)")
        print(f"{'what':<44} {'wall s':>7} {'cpu s':>7} {'MB/s':>6} {'net':>6} {'RSS MiB':>8}  target")
        startup = 0.0
        for name, args, log, target in cases:
            res = [run(repo, args) for _ in range(a.runs)]
            wall, cpu = statistics.median(r[0] for r in res), statistics.median(r[1] for r in res)
            if args[:1] == ["--log"] and log is None and startup == 0.0:
                startup = cpu
            mb = log.stat().st_size / 1e6 if log else 0.0
            rate = f"{mb / cpu:6.1f} {mb / max(cpu - startup, 1e-3):6.1f}" if log else f"{'':6} {'':6}"
            print(f"{name:<44} {wall:7.2f} {cpu:7.2f} {rate} {max(r[2] for r in res):8.1f}  {target}")


if __name__ == "__main__":
    main()
