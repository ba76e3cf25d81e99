"""`titan-train run --max-restarts N`: torchrun's restarts for the built-in launcher.

When a rank fails, the launcher stops every rank of the node (launch.py) and prints the
failure summary; with restarts left, it then starts every rank again, and each resumes from
the newest complete checkpoint of the run, as a rerun of the same command would. Before a
restart the died attempt's rank logs and summary move to <run folder>/logs/attempt-K/ (the
next attempt writes fresh rank<N>.log files), and one line names the restart, the rank and
error the attempt died of, and where training resumes.

Never restarted, because running again gives the same answer or was not wanted: a clean
end (0), a refusal (2: bad config or setup, a full disk), a NaN / inf stop (3), and a stop
on SIGTERM / SIGINT (143 / 130: a user's Ctrl-C, a scheduler's preemption; also a signal
that reaches the launcher between attempts). Every other failure (a rank that died, raised,
or hung: 124) is restarted, up to N times; then the last attempt's exit code is the job's.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"  # torchrun's name: which attempt a rank belongs to


def keep_attempt_logs(log_dir: str | Path, attempt: int) -> Path:
    """Move the attempt's files in `log_dir` (rank logs, the launcher's summary) to attempt-K/;
    the summary's rank log paths are rewritten to where the logs now are (logs/rank<N>.log
    is the next attempt's)."""
    log_dir = Path(log_dir)
    kept = log_dir / f"attempt-{attempt}"
    kept.mkdir(parents=True, exist_ok=True)
    moved = [path for path in log_dir.iterdir() if path.is_file()]
    for path in moved:
        shutil.move(str(path), kept / path.name)
    for summary in kept.glob("launcher_node*.log"):
        text = summary.read_text(encoding="utf-8", errors="replace")
        for path in moved:
            text = text.replace(f"{path}  (", f"{kept / path.name}  (")  # "rank 1   <path>  (failed first)"
        summary.write_text(text, encoding="utf-8")
    return kept


def run(
    attempt: Callable[[int], tuple[object, str]],
    max_restarts: int,
    *,
    never: tuple[int, ...],
    log_dir: str | Path,
    resumes_from: Callable[[], str],
    stop_signal: Callable[[], int] = lambda: 0,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> int:
    """Run `attempt(k)` (k = 0, 1, ...: returns the launch result and its failure summary)
    until it ends in a code from `never`, a forwarded signal, or restarts run out."""
    for k in range(max_restarts + 1):
        result, summary = attempt(k)
        code = result.exit_code
        if code in never or result.forwarded or stop_signal():
            return code
        if k == max_restarts:
            if max_restarts:
                say(f"titan-train: giving up after {max_restarts} restart(s): attempt {k} failed too (exit {code})")
            return code
        kept = keep_attempt_logs(log_dir, k)
        died = "; ".join(line.strip() for line in summary.splitlines()[:2]) or f"exit {code}"
        say(
            f"titan-train: restart {k + 1} of {max_restarts}: attempt {k} died ({died}); every rank starts "
            f"again and resumes from {resumes_from()}; attempt {k}'s logs: {kept}"
        )
    raise AssertionError("unreachable")  # pragma: no cover
