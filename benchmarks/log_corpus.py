"""How many real crash logs of tests/diagnose/real_logs a checkout of titan-doctor
explains fully (cause, fix, rank, device), and how long `diagnose --log` takes on each.

    python benchmarks/log_corpus.py                 # this checkout
    python benchmarks/log_corpus.py --repo /tmp/main --by-text   # another checkout (older ids)

Prints one line per log and the totals; a figure, never pass/fail."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from tests.diagnose.corpus import CORPUS, cases, judge  # noqa: E402


def explain(repo: Path, target: Path) -> tuple[list[dict], float]:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "titan_doctor", "diagnose", "--log", str(target), "--format", "json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    dt = time.perf_counter() - t0
    try:
        return json.loads(p.stdout)["checks"], dt
    except (json.JSONDecodeError, KeyError):
        return [{"id": "crash", "title": (p.stderr or p.stdout)[-200:]}], dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE, help="checkout whose titan_doctor to run")
    ap.add_argument("--by-text", action="store_true", help="judge the root by its text, not its id")
    ap.add_argument("-q", "--quiet", action="store_true", help="totals only")
    args = ap.parse_args()
    ok = part = 0
    times = []
    all_cases = cases()
    for case in all_cases:
        rows, dt = explain(args.repo.resolve(), CORPUS / case["path"])
        times.append(dt)
        problems = judge(case, rows, exact_id=not args.by_text)
        partial = not problems and "partial" in case  # passes its checks, with a known gap
        ok += not problems and not partial
        part += partial
        if not args.quiet:
            mark = "MISS" if problems else "part" if partial else "ok  "
            print(
                f"{mark} {dt:5.2f}s {case['path']:<48} "
                + ("; ".join(problems) if problems else case.get("partial", ""))
            )
    print(
        f"\n{args.repo}: {ok}/{len(all_cases)} logs explained fully "
        f"(cause, fix, rank, device), {part} partly (known gaps, 'partial' in expected.toml); "
        f"diagnose --log median {sorted(times)[len(times) // 2]:.2f}s, "
        f"max {max(times):.2f}s per log (process start included)"
    )


if __name__ == "__main__":
    main()
