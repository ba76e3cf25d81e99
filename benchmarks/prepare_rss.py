"""Peak RSS of `titan-train prepare-data` on one long document next to the same text cut into
many documents: it should not grow with a document's length. Prints figures; never passes or
fails.

    python benchmarks/prepare_rss.py [--mb 50] [--workers 2] [--tokenizer PATH|byte] [--no-jsonl]

Generates, in a temporary folder (removed afterwards), --mb of text made of tinyshakespeare's
lines when the shared test data is present (else the trainer's built-in generated sentences)
in three files: `many.txt`, documents of 5-60 lines separated by blank lines; `one.txt`, the
same lines as one document (no blank line); and `one.jsonl`, that document as one JSON record
(skip it with --no-jsonl: a JSON record is parsed whole, so its memory grows with the record,
at a few times its size).

Each file is prepared by `python -m titan_train.cli prepare-data` in its own subprocess. For
each it prints the peak RSS of the largest process (the command or one of its tokenizing
workers: getrusage RUSAGE_CHILDREN ru_maxrss, read by a wrapper that runs only that command),
the peak RSS of the whole process tree (the sum of each process's VmHWM, read from /proc while
it runs: an upper bound of what was resident at once), wall seconds and MB/s, and then the
ratios single document / many documents (the goal: within 1.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.procstat import hwm_kib  # noqa: E402

SHARED = next(
    (b / "shared" / "data" for b in (REPO.parent, REPO.parent.parent) if (b / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data",
)

# Runs one command and prints its largest process's peak RSS (KiB on Linux) as the last line.
WRAPPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)\n"
)


def source_lines() -> list[str]:
    shakespeare = SHARED / "tinyshakespeare" / "input.txt"
    if shakespeare.is_file():
        return [ln for ln in shakespeare.read_text(encoding="utf-8").splitlines() if ln.strip()]
    from titan_train.data.stream import builtin_documents

    return [s.strip() + "." for d in builtin_documents(2000) for s in d.split(".") if s.strip()]


def generate(folder: Path, megabytes: float, with_jsonl: bool, seed: int = 0) -> dict[str, Path]:
    """The same lines, in the same order, as many documents, as one, and as one JSON record."""
    lines, rng = source_lines(), random.Random(seed)
    target, size, docs = int(megabytes * 1e6), 0, []
    while size < target:
        n = rng.randint(5, 60)
        start = rng.randrange(len(lines) - n)
        docs.append("\n".join(lines[start : start + n]))
        size += len(docs[-1].encode("utf-8")) + 2
    files = {"many documents (.txt)": folder / "many.txt", "one document (.txt)": folder / "one.txt"}
    files["many documents (.txt)"].write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    one = "\n".join(docs)
    files["one document (.txt)"].write_text(one + "\n", encoding="utf-8")
    if with_jsonl:
        files["one record (.jsonl)"] = folder / "one.jsonl"
        files["one record (.jsonl)"].write_text(json.dumps({"text": one}) + "\n", encoding="utf-8")
    return files


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _tree(root: int) -> list[int]:
    """root and every process below it."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def prepare(src: Path, out: Path, tokenizer: str, workers: int) -> dict:
    cmd = [sys.executable, "-m", "titan_train.cli", "prepare-data", str(src), "--tokenizer", tokenizer]
    cmd += ["--out", str(out), "--workers", str(workers)]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *cmd], env=env(), stdout=subprocess.PIPE, text=True)
    peaks: dict[int, int] = {}
    done = threading.Event()

    def watch():
        while not done.is_set():
            for pid in _tree(proc.pid)[1:]:  # not the wrapper
                peaks[pid] = max(peaks.get(pid, 0), hwm_kib(pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, _ = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    maxrss_kib, rc = (int(x) for x in stdout.split()[-2:])
    if rc:
        raise SystemExit(f"prepare-data failed on {src} (exit {rc})")
    index = json.loads((out / "index.json").read_text())
    return {
        "wall": wall,
        "largest_mib": maxrss_kib / 1024,
        "tree_mib": sum(peaks.values()) / 1024,
        "processes": len(peaks),
        "index": index,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50, help="size of each generated file")
    ap.add_argument("--workers", type=int, default=2, help="prepare-data --workers")
    ap.add_argument(
        "--tokenizer",
        default=str(SHARED / "tokenizer-2k" / "tokenizer.json"),
        help="tokenizer.json (default: the shared 2k BPE) or byte",
    )
    ap.add_argument("--no-jsonl", action="store_true", help="skip the one-record JSONL file")
    a = ap.parse_args()
    if a.tokenizer != "byte" and not Path(a.tokenizer).is_file():
        a.tokenizer = "byte"

    from tabulate import tabulate

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {cores} cores, load average {os.getloadavg()[0]:.1f}; tokenizer {a.tokenizer}", flush=True)
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="titan-prepare-rss-") as tmp:
        tmp = Path(tmp)
        files = generate(tmp, a.mb, not a.no_jsonl)
        for i, (label, src) in enumerate(files.items()):
            nbytes = src.stat().st_size
            r = prepare(src, tmp / f"out-{i}", a.tokenizer, a.workers)
            results[label] = r
            print(f"{label}: peak RSS {r['largest_mib']:,.0f} MiB (largest process) in {r['wall']:.1f} s", flush=True)
            rows.append(
                [
                    label,
                    f"{nbytes / 1e6:,.1f}",
                    f"{r['index']['documents']:,}",
                    f"{r['index']['tokens']:,}",
                    f"{r['wall']:.1f}",
                    f"{nbytes / 1e6 / r['wall']:.2f}",
                    f"{r['largest_mib']:,.0f}",
                    f"{r['tree_mib']:,.0f} ({r['processes']})",
                    f"{r['largest_mib'] * 2**20 / nbytes:.1f}x",
                ]
            )
    print()
    print(
        tabulate(
            rows,
            headers=[
                "input",
                "MB",
                "documents",
                "tokens",
                "wall s",
                "MB/s",
                "peak RSS MiB, largest process",
                "sum of peaks MiB (processes)",
                "largest / input",
            ],
            colalign=("left",) + ("right",) * 8,
        )
    )
    many = results["many documents (.txt)"]
    for label, r in results.items():
        if r is not many:
            print(
                f"{label} / many documents: peak RSS x{r['largest_mib'] / many['largest_mib']:.2f} (largest process), "
                f"x{r['tree_mib'] / many['tree_mib']:.2f} (sum of peaks); goal: within 1.5x for the .txt"
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
