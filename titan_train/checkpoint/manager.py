"""DCP checkpoints: model + optimizer + scheduler + progress in `step-N/` folders.

Keys are flat at the top level: `model.<fqn>` (for example
`model.layers.0.attention.wq.weight`), `optim.*` flattened by parameter FQN, `scheduler.*`,
`progress.*`, `loss_scaler.*`. FQNs are those of the unwrapped model on every layout and
pipeline stage, so DCP reshards a checkpoint onto any other mesh.

A checkpoint is written into `step-N.tmp/` and renamed to `step-N/` only after every rank
finished, so a folder named `step-N` is always complete; it also gets `titan-run.json` (its
lineage and config, lineage.py) before the rename. Resume takes the newest readable one
(checkpoint_integrity.py; an unreadable one is set aside as `step-N.unreadable` and the
previous one of its lineage is tried), compares its config (resume_compare.py) before
loading any tensor, and continues its lineage. Retention (`keep_last_n`) deletes only
older complete folders of the lineage being trained. With `[checkpoint] async`,
DCP's async save writes step-N.tmp in the background while training goes on; the rename
(and retention) happen when that write is finished, at the next save or at the end.

Other formats enter and leave through the same object: a run with nothing to resume starts
from `[checkpoint] initial_load_path` (HF, Meta, torch.save, DCP ...), and a run that
finishes writes `export_final`; both live in checkpoint_formats/ and reach every pipeline
stage.
"""

from __future__ import annotations

import math
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from titan_train.checkpoint import lineage, resume_compare, resume_plan
from titan_train.checkpoint.formats import CheckpointError  # noqa: F401  (one error type for every checkpoint problem)
from titan_train.config.job import to_dict
from titan_train.runtime import faults, write_errors
from titan_train.runtime.messages import first_line


class ModelState(Stateful):
    """The model's parameters as flat FQN keys, merged over this rank's pipeline stages."""

    def __init__(self, model_parts):
        self.parts = list(model_parts)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for part in self.parts for k, v in get_model_state_dict(part).items()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        for part in self.parts:
            own = get_model_state_dict(part).keys()
            set_model_state_dict(part, {k: sd[k] for k in own})


def train_states(parts, progress) -> dict[str, Stateful]:
    """The top-level checkpoint keys (the converter and the checkpoint doctor rely on them):
    model.<fqn>, optim.state.<fqn>.<name> / optim.param_groups.<fqn>.<name>, scheduler.*,
    progress.*, loss_scaler.*."""
    return {
        "model": ModelState(parts.model_parts),
        "optim": parts.optimizers,
        "scheduler": parts.schedulers,
        "progress": progress,
        "loss_scaler": parts.scaler,
    }


class Checkpointer:
    """Resume at start (or load initial_load_path), save on the configured steps, finish at
    the end (wait, and export_final): the loop's three calls. Every method is collective
    (all ranks call it).

    With `async_save`, `maybe_save` stages the state to host memory and returns while
    step-N.tmp is written in the background (on a gloo group of its own); the next save, or
    `wait()`, finishes that write, renames it to step-N and prunes. Until then the previous
    complete step-N is what a crash resumes from."""

    def __init__(
        self,
        cfg,
        states: dict[str, Stateful],
        *,
        say=print,
        model_args=None,
        job=None,
        stop_step: int | None = None,
        before_save=None,
        data_identity: dict | None = None,
    ):
        """`job`: the whole JobConfig (recorded with every save, compared on resume);
        `data_identity`: the content of the data and tokenizer (recorded, compared on resume);
        `stop_step`: a `--stop-after` step, saved whatever save_interval says;
        `before_save(step)`: called on every rank before a save (the NaN guard)."""
        self.cfg, self.states, self.say = cfg, states, say
        self.model_args = model_args  # [model]: what initial_load_path must fit, what export_final describes
        self.job, self.stop_step, self.before_save = job, stop_step, before_save
        self.data_identity = data_identity or {}
        self.group = async_group() if cfg.async_save and self.enabled else None
        self.pending: PendingSave | None = None
        self.last_saved: int | None = None
        self.lineage = lineage.new_id()

    @property
    def enabled(self) -> bool:
        return self.cfg.save_interval > 0

    def resume(self) -> int | None:
        """Load the newest readable checkpoint of the folder, if resuming; returns its step.
        Rank 0 picks it and checks its config (resume_plan.py); every rank then loads it,
        or the next candidate when DCP fails to read it."""
        if dist.get_rank() == 0:
            recover_partial(self.cfg.folder, self.say)
        chosen: list = [None]
        if dist.get_rank() == 0 and self.cfg.resume:
            try:
                chosen = [resume_plan.plan(self.cfg.folder, self.job, self.say, self.data_identity)]
            except (resume_compare.ShapeChanged, resume_compare.TokenizerChanged, resume_plan.NothingReadable) as e:
                chosen = [str(e)]
        dist.broadcast_object_list(chosen, src=0)
        if isinstance(chosen[0], str):
            raise CheckpointError(chosen[0])
        for candidate in chosen[0] or []:
            for note in candidate.notes:
                self.say(note)
            try:
                load(candidate.path, self.states)
            except CheckpointException as e:  # damage the index check could not see
                if dist.get_rank() == 0:
                    resume_plan.set_aside(candidate.path, f"failed to load ({first_line(e)})", self.say)
                dist.barrier()
                continue
            self.last_saved, self.lineage = candidate.step, candidate.lineage
            if self.job is not None:
                resume_compare.apply_optimizer_config(
                    self.states["optim"], self.states["scheduler"], self.job.optimizer
                )
            return candidate.step
        if chosen[0]:
            raise CheckpointError(
                f"no checkpoint in {self.cfg.folder} could be loaded (see above); start with "
                "`titan-train run --fresh` (moves them aside) or set checkpoint.folder"
            )
        self.load_initial()  # nothing of its own to resume: [checkpoint] initial_load_path, if set
        return None

    def maybe_save(self, step: int, *, last: bool = False) -> Path | None:
        """Save at every save_interval-th step and at the run's last step (when saving at all),
        and always at a `--stop-after` step; a step already saved is not saved twice. Returns
        the step-N path it will have."""
        if not self.due(step, last=last):
            return None
        if self.before_save is not None:
            self.before_save(step)
        self.last_saved = step
        self._finish_pending()
        mark = self._marker(step)
        if self.group is not None:
            self.pending = start_async_save(self.cfg.folder, step, self.states, self.group, mark)
            return self.pending.final
        return self._saved(save(self.cfg.folder, step, self.states, mark))

    def due(self, step: int, *, last: bool = False) -> bool:
        """Whether `maybe_save(step, last=last)` saves."""
        interval = self.enabled and (step % self.cfg.save_interval == 0 or last)
        return (interval or step == self.stop_step) and step != self.last_saved

    def _marker(self, step: int):
        """What rank 0 writes into step-N.tmp before the rename: lineage and config."""
        rec = lineage.record(self.lineage, step, to_dict(self.job) if self.job is not None else {})
        if self.data_identity:
            rec["data"] = self.data_identity
        return lambda tmp: lineage.write_record(tmp, rec)

    def wait(self) -> None:
        """Return when every rank has finished its last save (an async one is renamed here)."""
        self._finish_pending()
        dist.barrier()

    def finish(self, step: int, *, complete: bool) -> None:
        """The end of a run: wait for the last save; a run that reached training.steps also
        writes [checkpoint] export_final."""
        self.wait()
        if complete:
            self.export_final(step)

    # ---- [checkpoint] initial_load_path / export_final: other formats (checkpoint_formats/) ----

    def load_initial(self) -> None:
        """A run with nothing of its own to resume starts from initial_load_path, if set."""
        if not self.cfg.initial_load_path:
            return
        from titan_train.checkpoint.initial_load import load_initial

        optimizers = None if self.cfg.initial_load_model_only else self.states["optim"]
        self.say(
            "[titan-train] "
            + load_initial(
                self.states["model"].parts, self.cfg.initial_load_path, args=self.model_args, optimizers=optimizers
            )
        )

    def export_if_missing(self, step: int) -> None:
        """A rerun of a job that already reached training.steps trains nothing, but an
        export_final set after that run ended (or deleted since) is written now; an export of
        that format already in the folder is kept. Rank 0 looks, so every rank agrees."""
        if self.cfg.export_final == "none":
            return
        from titan_train.checkpoint.formats.export import existing_export

        found = [existing_export(self.cfg.folder, step, self.cfg.export_final) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(found, src=0)
        if found[0] is not None:
            self.say(
                f"[titan-train] {found[0]} already holds the final model ({self.cfg.export_final}); "
                "delete it to export again"
            )
            return
        self.export_final(step)

    def export_final(self, step: int) -> Path | None:
        """Collective: the whole model, gathered from every shard and pipeline stage, as one
        torch.save file or HF safetensors in <folder>/export-step-N."""
        from titan_train.checkpoint.formats.export import export_final

        path = export_final(
            self.states["model"].parts,
            self.cfg.folder,
            self.cfg.export_final,
            args=self.model_args,
            step=step,
            dtype=self.cfg.export_dtype,
        )
        if path is not None:
            self.say(f"[titan-train] exported the final model to {path}")
        return path

    def _finish_pending(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self._saved(finish_async_save(pending))

    def _saved(self, path: Path) -> Path:
        if dist.get_rank() == 0:
            pruned = lineage.prune(self.cfg.folder, self.cfg.keep_last_n, self.lineage, path)
            self.say(f"[titan-train] saved {path}" + (f" (removed {len(pruned)} older)" if pruned else ""))
        dist.barrier()
        return path


def complete_steps(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    return [(e.step, e.path) for e in lineage.survey(folder) if e.complete]


def latest(folder: str | Path) -> tuple[int, Path] | None:
    steps = complete_steps(folder)
    return steps[-1] if steps else None


def _begin(folder: str | Path, step: int) -> tuple[Path, Path]:
    """(step-N.tmp, step-N): an empty tmp folder every rank can write into."""
    folder = Path(folder)
    final, tmp = folder / f"step-{step}", folder / f"step-{step}.tmp"
    if dist.get_rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    return tmp, final


def _commit(tmp: Path, final: Path, mark=None) -> Path:
    """Every rank's write is done: only now does the folder get its resumable name (after
    `mark(tmp)` added the run's record, so a complete folder always has it)."""
    dist.barrier()
    if dist.get_rank() == 0:
        if mark is not None:
            mark(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    dist.barrier()
    return final


class _Writer(dcp.FileSystemWriter):
    """DCP's file writer, plus the bytes the save plans to write (DCP's coordinator, rank 0,
    sees every rank's plan: what a full disk's message says was needed) and the test hooks
    (faults.py): a rank killed right after it wrote its own files, before the save is
    complete (the "killed mid-save" case), or a disk that fills up during the write."""

    def __init__(self, path: Path, step: int):
        super().__init__(str(path))
        self.step, self.planned = step, None

    def prepare_global_plan(self, plans):
        self.planned = sum(_plan_bytes(plan) for plan in plans)
        return super().prepare_global_plan(plans)

    def write_data(self, plan, planner):
        written = super().write_data(plan, planner)
        rank = dist.get_rank()
        faults.maybe_inject(self.step, rank, site="save", where=str(Path(self.path) / f"__{rank}_0.distcp"))
        return written


def _plan_bytes(plan) -> int:
    """Bytes of the tensors a DCP save plan writes (its other entries are small)."""
    tensors = [item.tensor_data for item in plan.items if item.tensor_data is not None]
    return sum(math.prod(t.chunk.sizes) * t.properties.dtype.itemsize for t in tensors)


@contextmanager
def _removed_if_unwritable(tmp: Path, final: Path, writer: _Writer) -> Iterator[None]:
    """A save that fails for lack of space (or a folder it may not write) ends the run in one
    line, on every rank (DCP raises a rank's write error on all of them). Rank 0 removes the
    partial step-N.tmp: no resume would use it, and it holds the space the user now needs.
    Nothing else is touched: retention runs only after a complete save."""
    try:
        yield
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's is a BaseException
        error = write_errors.explain(e, final, _needed(final.parent, writer.planned))
        if error is None:
            raise
        write_errors.release(e)
        if dist.get_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise write_errors.WriteError(f"{error}; {_what_is_left(tmp)}") from None


def _needed(folder: Path, planned: int | None) -> int | None:
    """About what a save needs: the previous checkpoint's size (the same model and optimizer
    state), else the bytes DCP planned (known on rank 0)."""
    previous = latest(folder)
    return write_errors.tree_size(previous[1]) if previous else planned


def _what_is_left(tmp: Path) -> str:
    previous = latest(tmp.parent)
    if previous is None:
        return (
            f"the partial {tmp.name} was removed and there is no earlier checkpoint; fix: free space there "
            "(or set checkpoint.folder on a larger disk) and rerun"
        )
    return (
        f"the partial {tmp.name} was removed, {previous[1].name} is untouched; fix: free space there "
        f"(or set checkpoint.folder on a larger disk) and rerun the same command: it resumes from {previous[1].name}"
    )


def save(folder: str | Path, step: int, states: dict[str, Stateful], mark=None) -> Path:
    """Collective: every rank calls it. Returns the final `step-N` path."""
    tmp, final = _begin(folder, step)
    writer = _Writer(tmp, step)
    with _removed_if_unwritable(tmp, final, writer):
        dcp.save(states, checkpoint_id=str(tmp), storage_writer=writer)
        return _commit(tmp, final, mark)


# ---- [checkpoint] async_save: the write runs in the background while training goes on ----


@dataclass
class PendingSave:
    step: int
    tmp: Path
    final: Path
    future: Any  # concurrent.futures.Future from dcp.async_save
    writer: _Writer
    renamed: threading.Event = field(default_factory=threading.Event)  # rank 0: tmp -> final done
    error: list = field(default_factory=list)  # rank 0: what the rename raised, re-raised in finish

    def done(self) -> bool:
        return self.future.done()


def async_group():
    """Collective, once per run: a gloo group of its own for the background writer, whose
    plan exchange must never interleave with the training step's collectives (torchtitan
    does the same). gloo works for every device: async_save stages to host memory first."""
    return dist.new_group(backend="gloo")


def start_async_save(folder: str | Path, step: int, states: dict[str, Stateful], group, mark=None) -> PendingSave:
    """Collective. Stages the state to host memory (training may change it right after this
    returns) and writes step-N.tmp in a background thread. The run's record goes into tmp
    first, and rank 0 renames tmp to step-N the moment the write is complete: DCP's
    coordinator (rank 0) finishes only after every rank's data is written and it wrote the
    index, so its future being done means the checkpoint is whole. A crash after that
    resumes from step N, not from the save before it."""
    tmp, final = _begin(folder, step)
    writer = _Writer(tmp, step)
    with _removed_if_unwritable(tmp, final, writer):
        if dist.get_rank() == 0 and mark is not None:
            tmp.mkdir(parents=True, exist_ok=True)
            mark(tmp)
        future = dcp.async_save(states, checkpoint_id=str(tmp), storage_writer=writer, process_group=group)
    pending = PendingSave(step, tmp, final, future, writer)
    if dist.get_rank() == 0:
        future.add_done_callback(lambda f: _rename_when_written(f, pending))
    else:
        pending.renamed.set()
    return pending


def _rename_when_written(future, pending: PendingSave) -> None:
    """Runs in DCP's background thread when rank 0's write ends. A failed write stays
    step-N.tmp (finish_async_save raises its error)."""
    try:
        if future.exception() is None:
            faults.maybe_inject(pending.step, 0, site="written")
            shutil.rmtree(pending.final, ignore_errors=True)
            pending.tmp.rename(pending.final)
            faults.maybe_inject(pending.step, 0, site="renamed")
    except BaseException as e:  # noqa: B036  (re-raised on the main thread by finish_async_save)
        pending.error.append(e)
    finally:
        pending.renamed.set()


def finish_async_save(pending: PendingSave) -> Path:
    """Collective. Waits for every rank's write and rank 0's rename. Call before the next
    save, and before exit. A write that failed for lack of space ends in one line (as a
    synchronous save does), naming step N's folder."""
    with _removed_if_unwritable(pending.tmp, pending.final, pending.writer):
        pending.future.result()
        pending.renamed.wait()
        if pending.error:
            raise pending.error[0]
    dist.barrier()
    return pending.final


def load(path: str | Path, states: dict[str, Stateful]) -> None:
    keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    if any(k.startswith("train.") for k in keys):
        raise CheckpointError(
            f"{path} uses the old layout (train.model.*); the trainer now writes flat model.* keys: "
            "resume it with the titan-npu version that wrote it, or start in a new "
            f'checkpoint.folder with checkpoint.initial_load_path = "{path}" (its weights; '
            "initial_load_model_only = false also its optimizer state)"
        )
    if "model" in states:
        _check_same_model(path, keys, states["model"])
    dcp.load(states, checkpoint_id=str(path))


def _check_same_model(path, saved_meta: dict, model: ModelState) -> None:
    """Collective. The checkpoint's parameters against the whole model's (every rank's
    stages), names and global shapes: a checkpoint without a recorded config (an older
    trainer's) must not resume into another model silently (extra layers were dropped) or
    end in a long traceback (missing ones)."""
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, own)
    want = {k: v for d in everyone for k, v in d.items()}
    saved = {
        k[len("model.") :]: tuple(m.size)
        for k, m in saved_meta.items()
        if k.startswith("model.") and hasattr(m, "size")
    }
    extra, missing = sorted(set(saved) - set(want)), sorted(set(want) - set(saved))
    differ = sorted(k for k in set(want) & set(saved) if want[k] != saved[k])
    if extra or missing or differ:
        what = (
            f"{differ[0]} is {list(saved[differ[0]])} there and {list(want[differ[0]])} here"
            if differ
            else f"it has {len(extra)} parameter(s) this model lacks ({extra[0]}, ...)"
            if extra
            else f"it lacks {len(missing)} of this model's parameters ({missing[0]}, ...)"
        )
        raise CheckpointError(
            f"{path} holds another model shape: {what}; resume with the [model] section that wrote "
            "it, or start with `titan-train run --fresh` or another checkpoint.folder"
        )


def recover_partial(folder: str | Path, say=print) -> None:
    """Rank 0, before resuming: a `step-N.tmp` left by a crash is never resumed from as it
    is. One that is whole (DCP's index and the run's record are in it: an async save whose
    rename the crash interrupted) becomes step-N; any other is set aside as
    step-N.incomplete, with a line saying so, instead of being deleted unseen."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for tmp in sorted(folder.glob("step-*.tmp")):
        final = tmp.with_name(tmp.name[: -len(".tmp")])
        whole = (tmp / ".metadata").is_file() and (tmp / lineage.RECORD).is_file()
        if whole and not final.exists():
            tmp.rename(final)
            say(
                f"[titan-train] {tmp.name} was completely written (a save whose rename a crash interrupted): "
                f"kept as {final.name}"
            )
            continue
        aside = tmp.with_name(final.name + ".incomplete")
        shutil.rmtree(aside, ignore_errors=True)
        tmp.rename(aside)
        say(
            f"[titan-train] {tmp.name} is an incomplete save (a crash during the write): moved to {aside.name}, "
            "never resumed from; delete it to free the space"
        )


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
