"""Which checkpoint a resume loads, decided once by rank 0 before any tensor is read.

The newest complete `step-N` of the folder decides the lineage (lineage.py); its
checkpoints are tried newest first. One that DCP's index says is unreadable
(checkpoint_integrity.py) is renamed `step-N.unreadable` with one line and the previous one
of the lineage is next. Each candidate's recorded config is compared with this run's
(resume_compare.py): another model shape refuses the run; other changes become log lines.
The Checkpointer broadcasts the plan, and every rank loads the first candidate that loads.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from titan_train.checkpoint import integrity as checkpoint_integrity
from titan_train.checkpoint import lineage, resume_compare


class NothingReadable(Exception):
    """Every checkpoint of the lineage is damaged (one line; the run does not silently restart)."""


@dataclass
class Candidate:
    step: int
    path: Path
    lineage: str  # kept by the resumed run (new for an unrecorded folder)
    notes: list[str] = field(default_factory=list)  # printed when this candidate is loaded


def plan(folder: str | Path, job, say=print, data_identity: dict | None = None) -> list[Candidate]:
    """Rank 0: the checkpoints to try, best first ([] = start fresh). Raises ShapeChanged,
    or TokenizerChanged (data_identity: the content of this run's data and tokenizer)."""
    mine, others = lineage.resume_candidates(folder)
    usable = []
    for entry in mine:
        bad = checkpoint_integrity.problem(entry.path)
        if bad:
            set_aside(entry.path, bad, say)
            continue
        usable.append(
            Candidate(entry.step, entry.path, entry.lineage or lineage.new_id(), _changes(entry, job, data_identity))
        )
    if not usable:
        if mine:
            raise NothingReadable(
                f"no checkpoint of {folder} is readable (each was moved to step-N.unreadable, see "
                "above); the next run starts from step 0 there, or restore a copy first"
            )
        return []
    first = usable[0]
    newer = [e for e in others if e.step > first.step]
    where = (
        (
            f" ({len(others)} other step-N folder(s) of other runs left untouched"
            + (f", including newer {lineage.describe(newer)}" if newer else "")
            + ")"
        )
        if others
        else ""
    )
    origin = (
        f"lineage {first.lineage}"
        if mine[0].lineage
        else f"no lineage recorded (an older trainer's checkpoint), continuing as lineage {first.lineage}"
    )
    first.notes.insert(
        0,
        f"[titan-train] resumed from {first.path} (step {first.step}); {origin}, "
        f"the newest complete checkpoint in the folder{where}",
    )
    for fallback in usable[1:]:
        fallback.notes.insert(
            0,
            f"[titan-train] resuming from the previous checkpoint of the lineage instead: "
            f"{fallback.path} (step {fallback.step})",
        )
    return usable


def _changes(entry: lineage.Entry, job, data_identity: dict | None) -> list[str]:
    from titan_train.config.job import to_dict

    rec = entry.record
    if job is None or rec is None or "config" not in rec:
        return []
    changes = resume_compare.compare(rec["config"], to_dict(job), str(entry.path))
    content = resume_compare.compare_data(rec.get("data"), data_identity or {}, str(entry.path), job.data)
    if rec.get("data") and data_identity:
        changes.tokenizer = []  # the recorded content decides: a moved tokenizer.json is the same tokenizer
    return changes.lines() + content


def set_aside(path: Path, why: str, say=print) -> None:
    """Rename an unreadable `step-N` out of the way (kept for a look, never resumed from)."""
    aside = path.with_name(path.name + ".unreadable")
    shutil.rmtree(aside, ignore_errors=True)
    path.rename(aside)
    say(
        f"[titan-train] checkpoint {path} is unreadable: {why}; moved to {aside.name}, "
        "falling back to the previous complete one"
    )
