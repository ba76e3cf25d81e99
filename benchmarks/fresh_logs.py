"""First-sight figure of titan-doctor on fresh real crash logs (tests/diagnose/fresh_logs/batch_*),
logs the doctor was never tuned on. For each log it runs `diagnose --log <file> --format json` and
judges the root (first) finding by its text (tests.diagnose.corpus.judge, exact_id=False).

    python benchmarks/fresh_logs.py                      # every batch
    python benchmarks/fresh_logs.py --batch tests/diagnose/fresh_logs/batch_a

Prints one line per log (ok/MISS, family, path, the problems, the root id when missed) and per batch
"fully right N/M" and "confidently wrong K": the root names a specific cause that is not the true
one, i.e. it matches a `wrong_if` phrase of expected.toml, or it has a non-generic id (a generic id
only says that something failed or that nothing is known) and misses both the true cause
(`cause_has`) and the true fix (`fix_has`). The looser count, every MISS with a non-generic root id
(also those naming the right cause or fix), is printed beside it. A figure, never pass/fail."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from tests.diagnose.corpus import judge, tomllib, wrong_causes_named  # noqa: E402

FRESH = HERE / "tests" / "diagnose" / "fresh_logs"
# Root ids that name no cause: no known error, an unlisted exception, or a wrapper that only reports
# that a call failed (torchrun's failure summary, titan-train's, DCP's failed ranks, torch_npu's
# ERRxx100/200/300/999 "call acl/hccl/ge api failed", "application exception").
GENERIC = {
    "crash",
    "log.none",
    "log.exception",
    "log.dist.first_failure",
    "log.titan_train.rank_failed",
    "log.ckpt.dcp_failed_ranks",
}
GENERIC_RE = re.compile(r"log\.torch_npu\.ERR\d\d(100|200|300|999)$")


def rows_for(log: Path) -> list[dict]:
    p = subprocess.run(
        [sys.executable, "-m", "titan_doctor", "diagnose", "--log", str(log), "--format", "json"],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    try:
        return json.loads(p.stdout)["checks"]
    except (json.JSONDecodeError, KeyError):
        return [{"id": "crash", "title": (p.stderr or p.stdout)[-200:]}]


def is_generic(root_id: str) -> bool:
    return root_id in GENERIC or bool(GENERIC_RE.match(root_id))


def score(batch: Path) -> tuple[int, int, int, int]:
    with open(batch / "expected.toml", "rb") as fh:
        cases = tomllib.load(fh)["log"]
    ok = wrong = loose = 0
    for case in cases:
        rows = rows_for(batch / case["path"])
        problems = judge(case, rows, exact_id=False)
        root = rows[0] if rows else {"id": "log.none"}
        specific = not is_generic(root.get("id", ""))
        hit = wrong_causes_named(case, root)
        missed_both = any(p.startswith("root cause does not say") for p in problems) and any(
            p.startswith("fix lacks") for p in problems
        )
        is_wrong = bool(hit) or (missed_both and specific)
        ok += not problems
        wrong += is_wrong
        loose += bool(hit) or (bool(problems) and specific)
        mark = "ok  " if not problems else "MISS"
        note = "; ".join(problems + [f"names {w!r}" for w in hit])
        if problems:
            note += f"  [root {root.get('id')}{', confidently wrong' if is_wrong else ''}]"
        print(f"{mark} {case['family']:<20} {batch.name}/{case['path']:<52} {note}")
    print(
        f"{batch.name}: fully right {ok}/{len(cases)}, confidently wrong {wrong} "
        f"(any MISS with a specific root: {loose})\n"
    )
    return ok, len(cases), wrong, loose


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=Path, action="append", help="batch folder (default: every batch_* folder)")
    args = ap.parse_args()
    batches = args.batch or sorted(p for p in FRESH.glob("batch_*") if (p / "expected.toml").exists())
    totals = [score(b.resolve()) for b in batches]
    if len(totals) > 1:
        ok, n, wrong, loose = (sum(t[i] for t in totals) for i in range(4))
        print(f"all: fully right {ok}/{n}, confidently wrong {wrong} (any MISS with a specific root: {loose})")


if __name__ == "__main__":
    main()
