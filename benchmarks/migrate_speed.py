"""Speed of `titan-doctor migrate` over a tree, side by side with the floor: a plain libcst
parse + codegen of the same Python files, single process. Figures, not pass/fail.

    python benchmarks/migrate_speed.py TREE [-j N] [--target npu|portable]

Nothing is written: migrate runs in memory (like --check). Discovery (the walk, git's
ignore list or the .gitignore reader, file kinds) is timed on its own row. Wall and CPU
seconds are both printed: on a shared machine the CPU column is the steadier comparison.
Reference measured on the 2-core dev machine: TorchFix 0.7.0 over torchtitan (476 files)
took 112 s wall with -j 2; "TorchFix/this" scales that reference to this tree's Python file count.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from titan_doctor.migrate.engine import discovery  # noqa: E402
from titan_doctor.migrate.engine import runner as engine  # noqa: E402
from titan_doctor.migrate.rules import load_rules  # noqa: E402
from titan_doctor.migrate.rules.words import TARGETS  # noqa: E402

TORCHFIX_REFERENCE = (476, 112.0)  # files, seconds (-j 2), measured separately


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the -j workers): on a
    machine shared with other work, wall time swings with the load, CPU time much less."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def parse_floor(files: list[Path]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), _cpu()
    for p in files:
        data = p.read_bytes()
        try:
            _ = cst.parse_module(data).bytes  # parse + codegen: the floor migrate is measured against
        except cst.ParserSyntaxError:
            pass
    return time.perf_counter() - start, _cpu() - cpu


def migrate(files: list[Path], jobs: int, target: str) -> tuple[float, float, list]:
    rules = load_rules(target=target)
    start, cpu = time.perf_counter(), _cpu()
    results = engine.run([(p, str(p)) for p in files], rules, jobs)
    return time.perf_counter() - start, _cpu() - cpu, results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument("-j", "--jobs", type=int, default=2, help="also time migrate with N workers")
    ap.add_argument("--target", choices=TARGETS, default=TARGETS[0], help="migrate's --target")
    args = ap.parse_args()
    if not args.tree.exists():
        print(f"migrate_speed: {args.tree}: no such file or directory", file=sys.stderr)
        return 2

    tf_files, tf_wall = TORCHFIX_REFERENCE
    start, cpu = time.perf_counter(), _cpu()
    found = discovery.discover([args.tree], load_rules())
    walk, walk_cpu = time.perf_counter() - start, _cpu() - cpu
    files = [e.path for e in found.files]
    py = [p for p in files if p.suffix == ".py"]
    floor, floor_cpu = parse_floor(py)
    rows = [
        ("libcst parse+codegen (floor)", len(py), floor, floor_cpu),
        ("discovery (walk, ignores, kinds)", len(files), walk, walk_cpu),
    ]
    t1, c1, results = migrate(files, 1, args.target)
    rows.append(("titan-doctor migrate -j 1", len(files), t1, c1))
    if args.jobs > 1:
        tj, cj, _ = migrate(files, args.jobs, args.target)
        rows.append((f"titan-doctor migrate -j {args.jobs}", len(files), tj, cj))

    print(f"tree: {args.tree}  ({len(py)} Python files, {len(files)} files in all)  --target {args.target}")
    print(
        f"{'run':34} {'files':>6} {'wall s':>8} {'files/s':>8} {'vs floor':>9} {'cpu s':>7} "
        f"{'cpu vs floor':>12} {'TorchFix/this':>14}"
    )
    for name, n, wall, cpu in rows:
        print(
            f"{name:34} {n:6d} {wall:8.2f} {n / wall:8.1f} {wall / floor:8.2f}x {cpu:7.2f} "
            f"{cpu / floor_cpu:11.2f}x {tf_wall * len(py) / tf_files / wall:13.1f}x"
        )
    print(
        f"{'TorchFix 0.7.0 -j 2 (reference)':34} {tf_files:6d} {tf_wall:8.2f} "
        f"{tf_files / tf_wall:8.1f}   (measured separately on the dev machine)"
    )
    states = {s: sum(r.state == s for r in results) for s in engine.STATES}
    print("migrate outcome: " + ", ".join(f"{k} {v}" for k, v in states.items()))
    print("not read: " + (", ".join(f"{k} {len(v)}" for k, v in sorted(found.skipped.items())) or "nothing"))
    kinds = {}
    for e in found.files:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    print("kinds read: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
