"""A run owns its checkpoint folder: `<folder>/run.lock` names the host, pid and start time
of the process that holds it, for as long as the run lasts.

Who takes it: the process that starts the ranks. `titan-train run --nproc N` (node 0's
launcher, which also owns the run folder's rank logs) takes it before any rank exists and
tells its ranks through TITAN_RUN_LOCK_PID; under a torchrun you started yourself (or one
process), global rank 0 takes it after the process group is up, before any rank builds or
loads anything, and every rank learns the outcome. Other nodes never touch it.

The lock file is written whole to a private name, then hard-linked to `run.lock`: the link
fails if one exists, so two runs can never both believe they hold it, and a reader never
sees half a lock. A lock whose process is gone (same host, pid not alive, or alive but a
different process that reused the pid) is taken over, and the log says so. A lock written
on another host cannot be checked from here: the run is refused, naming it and the fix.
Released on every exit Python sees (normal end, error, SIGTERM / SIGINT stop); after a
SIGKILL the next run finds the pid dead and takes it over.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from titan_train.runtime.processes import pid_alive, proc_start

LOCK_NAME = "run.lock"
HELD_ENV = "TITAN_RUN_LOCK_PID"  # set by a launcher holding the lock for the ranks it starts


class FolderLocked(Exception):
    """Another live run owns the folder (a user error, one line)."""


def _owner_line(info: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    return f"host {info.get('host', '?')}, pid {info.get('pid', '?')}, since {since}"


def read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: treated like a lock from an unknown owner


def _stale(info: dict) -> bool:
    """True when the owner is certainly gone: same host, and its pid is dead or reused."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    pid = info["pid"]
    if not pid_alive(pid):
        return True
    started = info.get("proc_start")
    return started is not None and proc_start(pid) not in (None, started)


class RunLock:
    """The lock this process holds on `folder` (acquire() / release(), or a `with` block)."""

    def __init__(self, folder: str | Path, say=print):
        self.folder, self.say = Path(folder), say
        self.path = self.folder / LOCK_NAME
        self.held = False
        self.created_folder = False

    def acquire(self) -> RunLock:
        self.created_folder = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.time(),
            "proc_start": proc_start(os.getpid()),
        }
        mine = self.folder / f".{LOCK_NAME}.{me['pid']}"
        mine.write_text(json.dumps(me), encoding="utf-8")
        try:
            for _ in range(3):  # a stale lock is moved away, then we try again
                try:
                    os.link(mine, self.path)
                    self.held = True
                    return self
                except FileExistsError:
                    self._take_over_if_stale()
            raise FolderLocked(
                f"checkpoint folder {self.folder} is being taken over by another run at the same time; "
                "start one run per folder"
            )
        finally:
            mine.unlink(missing_ok=True)

    def _take_over_if_stale(self) -> None:
        info = read(self.path)
        if info is None:
            return  # released between our link and this read: try again
        if not info or info.get("host") != socket.gethostname():
            what = _owner_line(info) if info else "an unreadable lock"
            raise FolderLocked(
                f"checkpoint folder {self.folder} is owned by another run ({what}) that cannot be "
                f"checked from {socket.gethostname()}; if that job is gone, delete {self.path}, "
                "or set checkpoint.folder to another folder"
            )
        if not _stale(info):
            raise FolderLocked(
                f"checkpoint folder {self.folder} is in use by another run ({_owner_line(info)}); "
                "wait for it, stop it, or set checkpoint.folder to another folder"
            )
        aside = self.folder / f".{LOCK_NAME}.stale-{os.getpid()}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        if read(aside) != info:  # another run took it over between our read and rename: give it back
            os.rename(aside, self.path)
            raise FolderLocked(
                f"checkpoint folder {self.folder} was just taken by another run; start one run per folder"
            )
        aside.unlink(missing_ok=True)
        gone = "its pid now belongs to another process" if pid_alive(info["pid"]) else "that process is gone"
        self.say(
            f"[titan-train] took over {self.path}: its run ({_owner_line(info)}) ended without releasing it ({gone})"
        )

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        info = read(self.path)
        if info and info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
            self.path.unlink(missing_ok=True)
        if self.created_folder:
            try:
                self.folder.rmdir()  # a run that saved nothing leaves no empty folder behind
            except OSError:
                pass

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def held_by_launcher(folder: str | Path) -> bool:
    """True in a rank whose launcher holds the lock on `folder` (it checked HELD_ENV's pid)."""
    pid = os.environ.get(HELD_ENV)
    if not pid:
        return False
    info = read(Path(folder) / LOCK_NAME)
    return bool(info) and str(info.get("pid")) == pid


def prepare_folder(cfg, *, fresh: bool, saves: bool, say=print) -> None:
    """What the lock holder does before any rank trains: a run that will not resume and may
    save (`saves`) refuses a folder with checkpoints, or moves them aside with `fresh`; a
    run that resumes is refused when the checkpoint has another model shape."""
    from titan_train.checkpoint import lineage, resume_compare

    if fresh or (saves and not cfg.checkpoint.resume):
        lineage.check_fresh_start(cfg.checkpoint.folder, fresh, say)
    elif cfg.checkpoint.resume:
        resume_compare.check_shape(cfg)


@contextlib.contextmanager
def hold(cfg, *, fresh: bool, saves: bool, say=print):
    """Collective, around the whole run in every rank: global rank 0 takes the lock (unless
    its launcher holds it) and prepares the folder; every rank raises the same one-line
    error when that failed, so no rank builds or loads anything for a refused run."""
    import torch.distributed as dist

    from titan_train.checkpoint.lineage import FolderInUse
    from titan_train.checkpoint.resume_compare import ShapeChanged

    refusals = {cls.__name__: cls for cls in (FolderLocked, FolderInUse, ShapeChanged)}
    folder = cfg.checkpoint.folder
    lock, outcome = None, [None]
    if dist.get_rank() == 0 and not held_by_launcher(folder):
        try:
            lock = RunLock(folder, say).acquire()
            prepare_folder(cfg, fresh=fresh, saves=saves, say=say)
        except tuple(refusals.values()) as e:
            if lock is not None:
                lock.release()
            outcome = [(type(e).__name__, str(e))]
        except BaseException:  # SIGTERM (Terminated) or Ctrl-C while preparing: the lock is not left behind
            if lock is not None:
                lock.release()
            raise
    dist.broadcast_object_list(outcome, src=0)
    if outcome[0] is not None:
        kind, message = outcome[0]
        raise refusals[kind](message)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
