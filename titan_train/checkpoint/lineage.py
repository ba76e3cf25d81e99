"""Which run wrote which `step-N`: a lineage id, made by a fresh run and inherited on resume,
recorded with the config in `step-N/titan-run.json` (written into step-N.tmp before the
rename, so every complete folder has it).

What it decides:
- retention deletes only checkpoints of the lineage being trained, never the one just
  written, never a folder without a record (legacy or unknown), never anything that is not
  a `step-N` folder (exports, `previous-*`, the lock);
- a fresh run (`resume = false`) refuses a folder that holds checkpoints, unless `--fresh`,
  which moves them (all `step-N` folders) into `previous-<timestamp>/`: never deleted;
- resume takes the newest complete checkpoint in the folder (by step) and continues its
  lineage; a fallback (unreadable newest) stays within that lineage.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

RECORD = "titan-run.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


class FolderInUse(Exception):
    """A fresh run in a folder that holds another run's checkpoints (a user error, one line)."""


@dataclass
class Entry:
    step: int
    path: Path
    lineage: str | None  # None: no record (written by an older trainer, or not by us)
    complete: bool  # has DCP's .metadata
    record: dict | None = field(default=None, compare=False, repr=False)  # its titan-run.json, read once

    @property
    def label(self) -> str:
        return self.lineage or "unrecorded"


def new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def record(lineage_id: str, step: int, config: dict) -> dict:
    return {
        "lineage": lineage_id,
        "step": step,
        "written": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "config": config,
    }


def write_record(folder: Path, rec: dict) -> None:
    """Into step-N.tmp, before its rename (rank 0)."""
    (Path(folder) / RECORD).write_text(json.dumps(rec, indent=1), encoding="utf-8")


def read_record(step_dir: Path) -> dict | None:
    try:
        rec = json.loads((Path(step_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def survey(folder: str | Path) -> list[Entry]:
    """Every `step-N` folder (complete or not), oldest first; nothing else is looked at."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for child in folder.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir():
            rec = read_record(child)
            out.append(
                Entry(
                    int(match.group(1)),
                    child,
                    rec.get("lineage") if rec else None,
                    (child / ".metadata").is_file(),
                    rec,
                )
            )
    return sorted(out, key=lambda e: e.step)


def describe(entries: list[Entry]) -> str:
    """'step-2..step-10 (3 folders; lineage 2026..-ab12cd)' for a one-line message."""
    steps = sorted(e.step for e in entries)
    span = f"step-{steps[0]}" + (f"..step-{steps[-1]}" if len(steps) > 1 else "")
    lineages = sorted({e.label for e in entries})
    return f"{span} ({len(entries)} folder{'s' * (len(entries) != 1)}; lineage {', '.join(lineages)})"


def check_fresh_start(folder: str | Path, fresh: bool, say=print) -> None:
    """A run that will not resume: refuse a folder holding checkpoints, or with `fresh`
    move them into `previous-<timestamp>/` (rank 0 / the launcher, holding the lock)."""
    entries = survey(folder)
    if not entries:
        return
    if not fresh:
        raise FolderInUse(
            f"checkpoint.folder {folder} already holds checkpoints {describe(entries)} and "
            "checkpoint.resume = false: rerun with `titan-train run --fresh` to move them to "
            f"{folder}/previous-<time>/ (nothing is deleted), or set checkpoint.folder to a new folder"
        )
    aside = Path(folder) / f"previous-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 0
    while aside.exists():
        n += 1
        aside = Path(folder) / f"previous-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    aside.mkdir()
    for e in entries:
        e.path.rename(aside / e.path.name)
    say(f"[titan-train] --fresh: moved {describe(entries)} to {aside}; starting a new lineage")


def resume_candidates(folder: str | Path) -> tuple[list[Entry], list[Entry]]:
    """(the chosen lineage's step-N folders newest first, every other step-N folder). The
    lineage is that of the newest complete checkpoint in the folder; its incomplete folders
    (a .metadata lost after the save) are candidates too, so the damage gets reported."""
    entries = survey(folder)
    if not entries:
        return [], []
    anchor = next((e for e in reversed(entries) if e.complete), entries[-1])
    mine = [e for e in reversed(entries) if e.lineage == anchor.lineage and (e.complete or e.step > anchor.step)]
    return mine, [e for e in entries if e not in mine]


def prune(folder: str | Path, keep_last_n: int, lineage_id: str, just_written: Path) -> list[Path]:
    """Delete all but the newest `keep_last_n` complete checkpoints of `lineage_id` (rank 0).
    Folders of other lineages, unrecorded ones and `just_written` are never touched."""
    if keep_last_n <= 0:
        return []
    mine = [e for e in survey(folder) if e.complete and e.lineage == lineage_id]
    doomed = [e.path for e in mine[:-keep_last_n] if e.path.resolve() != Path(just_written).resolve()]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
