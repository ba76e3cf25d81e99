"""Start the ranks of this node and report how they ended: the one spawner of both tools.

`titan-train run --nproc N` and `titan-doctor diagnose --comm` start their ranks here.
Rendezvous follows torchrun's semantics:
  - one node: MASTER_ADDR=127.0.0.1 and a free port (torchrun --standalone);
  - --master-addr/--master-port with --node-rank: static, rank = node_rank x nproc + local rank;
    with several nodes, node 0's launcher hosts the TCPStore at --master-port and the ranks
    connect to it (torchrun's agent store); otherwise global rank 0 hosts it;
  - --rdzv-endpoint HOST:PORT: torch's c10d rendezvous handler (the one torchrun uses) agrees
    on the node ranks; node 0 then publishes MASTER_ADDR/MASTER_PORT for the ranks in its store.
With several nodes the launchers first agree on --nnodes and --nproc (nodes.py), within
--rdzv-timeout: nodes that disagree, or one that never comes, end in one line on every node
instead of ranks that wait for each other forever.

Every rank writes stdout and stderr to <log_dir>/rank<N>.log (plain text for
`titan-doctor diagnose --log`), the trainer's own lines (`[titan-train] ...`, `titan-train:
...`, `step ...`) prefixed with the UTC wall-clock time they reached the launcher, so events
can be ordered across ranks (tracebacks and library output stay as printed); only rank 0's
stdout is echoed here, as printed. When a rank fails, the
others are stopped (SIGTERM, then SIGKILL after `stop_grace_s`), and `summary()` names the
rank that failed first, its error's last line, every log and the diagnose command, before
any other output about the failure; the summary is also kept in
<log_dir>/launcher_node<K>.log for the doctor. SIGTERM / SIGINT sent to the launcher are forwarded to
every rank, which stop at an agreed step (signals.py) and exit 143 / 130.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from titan_train.runtime import nodes, restarts, write_errors
from titan_train.runtime.finite_guard import EXIT_NON_FINITE
from titan_train.runtime.messages import first_line
from titan_train.runtime.signals import EXIT_SIGINT, EXIT_SIGTERM, HANDLED, Handlers, exit_code
from titan_train.runtime.watchdog import EXIT_HANG, diagnose_command, read_dumps, stuck_ranks

STOPPED_CODES = (EXIT_SIGTERM, EXIT_SIGINT)  # a rank that stopped on a signal after saving
EXIT_REFUSED = 2  # a rank refused the job (bad config or setup): the CLI's own code for that
PASSED_ON = (EXIT_REFUSED, EXIT_HANG, EXIT_NON_FINITE)  # what the first failure's code says, the job says
NEVER_RESTARTED = (0, EXIT_REFUSED, EXIT_NON_FINITE, *STOPPED_CODES)  # --max-restarts leaves these (restarts.py)
# What a rank prints when a PEER died under it: secondary, never the cause.
_PEER_LOST = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|failed to recv|Socket Timeout|"
    r"ECONNRESET|Connection refused|NCCL communicator was aborted|HCCL.*(abort|timeout)",
    re.I,
)

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")  # torch prefixes a rank's uncaught traceback lines
OWN_LINES = (b"[titan-train]", b"titan-train:", b"step ")  # what the trainer itself prints: stamped in rank logs
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def stamp() -> str:
    """The UTC wall clock as a rank log prefixes the trainer's lines: 2026-12-02T04:26:35.123Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class LaunchError(Exception):
    """A launch that cannot start as asked (a port in use, a malformed endpoint): one line."""


# What a rank killed by a signal most likely met, and what to do: the error line of the summary.
SIGNAL_HINTS = {
    "SIGKILL": "often the kernel's OOM killer (check `dmesg -T | grep -i -e oom -e 'killed process'`); fix: lower "
    "training.batch_size or seq_len, set training.activation_checkpoint, or start fewer ranks per host "
    "(estimate: titan-doctor diagnose --config ...)",
    "SIGSEGV": "a crash in native code (torch, torch_npu, a driver); fix: check the version pins with `titan-doctor "
    "diagnose`, and rerun with PYTHONFAULTHANDLER=1 for the stack",
    "SIGBUS": "often /dev/shm is too small (a container: docker run --shm-size=16g) or a memory-mapped file was "
    "truncated while in use",
    "SIGABRT": "a native library aborted (a torch or HCCL/NCCL assertion, glibc); the rank log's last lines say which",
    "SIGILL": "an instruction this CPU lacks: a wheel built for another CPU; reinstall torch for this machine",
    "SIGTERM": "sent from outside the launcher (a scheduler's time limit or preemption, `kill`); rerun the same "
    "command to resume",
    "SIGHUP": "the terminal closed; run the job under nohup, tmux or a scheduler",
}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signal_error(returncode: int) -> str:
    """'killed by SIGKILL, often the kernel's OOM killer (...); fix: ...' for a negative return code."""
    name = signal_name(-returncode)
    hint = SIGNAL_HINTS.get(name)
    return f"killed by {name} (no Python error): {hint}" if hint else f"killed by {name} (no Python error)"


_ADDR_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.I)
_PORT = re.compile(r"port:?\s*(\d+)", re.I)


def port_in_use_error(port: int | str) -> str:
    return (
        f"port {port} (MASTER_PORT) is already in use on this host: another job or a leftover rank holds it "
        f"(see `ss -ltnp | grep :{port}`); fix: pass another --master-port, or leave it out to take a free one"
    )


def check_port_free(port: int) -> None:
    """Refuse, in one line, a rendezvous port that another process already listens on
    (rank 0's TCPStore would otherwise fail with a traceback in its log)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is fine to reuse
        try:
            s.bind(("", port))
        except PermissionError:
            raise LaunchError(f"port {port} (MASTER_PORT) needs root to listen on; use a port above 1023") from None
        except OSError:
            raise LaunchError(port_in_use_error(port)) from None


@dataclass
class LaunchOptions:
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    rdzv_backend: str = "c10d"
    rdzv_id: str = "titan-train"
    master_addr: str = ""
    master_port: int = 0
    rdzv_timeout_s: float = 600.0  # how long the node launchers wait for each other (torchrun's join_timeout)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


@dataclass
class RankOutcome:
    rank: int
    log: Path
    returncode: int | None = None  # None: still running when the launch ended (timeout)
    ended_s: float | None = None  # seconds after start when its exit was seen
    stopped: bool = False  # the launcher stopped it (after a failure, timeout or signal)

    @property
    def failed(self) -> bool:
        return self.returncode not in (0, None, *STOPPED_CODES) and not self.stopped


@dataclass
class LaunchResult:
    ranks: list[RankOutcome]
    master_addr: str
    master_port: int
    timed_out: bool = False
    forwarded: int = 0  # signal forwarded to the ranks (0 = none)
    first_failure: RankOutcome | None = None
    log_dir: Path = field(default_factory=Path)
    node_rank: int = 0

    @property
    def exit_code(self) -> int:
        """0 all done; 143/130 stopped on a signal; 124 hang; 3 NaN / inf stop (finite_guard); 2 a rank
        refused the job (ranks that disagree); 1 any other failure."""
        if self.first_failure is not None:
            return self.first_failure.returncode if self.first_failure.returncode in PASSED_ON else 1
        codes = {r.returncode for r in self.ranks}
        if self.timed_out or None in codes:
            return 1
        stopped = codes & set(STOPPED_CODES)
        return stopped.pop() if stopped else 0


def under_torchrun() -> bool:
    """True inside a rank started by torchrun or by this launcher."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def announces() -> bool:
    """Whether this process prints the run's start-up notes once: the launcher (or a single
    process), or rank 0 under a torchrun the user started."""
    if not under_torchrun():
        return True
    return os.environ.get("RANK") == "0" and "TITAN_TRAIN_LAUNCHED" not in os.environ


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process_env() -> None:
    """A world of one, without a launcher (faster start, plain tracebacks under --debug)."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))


# ---- rendezvous: who is node k, and where rank 0 listens ----


@dataclass
class Rendezvous:
    node_rank: int
    master_addr: str
    master_port: int
    handler: object = None  # the c10d rendezvous handler, shut down after the run
    store: object = None  # static multi-node: the TCPStore the launchers agreed through (node 0 hosts it)

    @property
    def agent_store(self) -> bool:
        """The ranks connect to the launcher's store instead of rank 0 hosting one."""
        return self.store is not None

    def close(self) -> None:
        if self.handler is not None:
            self.handler.shutdown()
        self.store = None


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise LaunchError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT, e.g. node0:29400")
    return host, int(port)


def _address_towards(host: str, port: int) -> str:
    """This machine's address on the route to `host` (what the other nodes can reach)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return s.getsockname()[0]
    except OSError:
        return socket.getfqdn()


def rendezvous(opts: LaunchOptions) -> Rendezvous:
    """Who this node is and where rank 0 listens; with several nodes, only once every node's
    launcher arrived and all agree on --nnodes and --nproc (nodes.py), within
    opts.rdzv_timeout_s: a mismatch or a missing node is one line, not a hang."""
    if opts.nnodes > 1 and opts.node_rank >= opts.nnodes:
        raise LaunchError(
            f"--node-rank {opts.node_rank} with --nnodes {opts.nnodes}: node ranks are 0 to {opts.nnodes - 1}"
        )
    try:
        if opts.rdzv_endpoint and opts.nnodes > 1:
            return _c10d_rendezvous(opts)
        if opts.master_addr and opts.nnodes > 1:
            return _static_rendezvous(opts)
    except nodes.Disagreement as e:
        raise LaunchError(str(e)) from None
    if opts.master_addr:
        rdzv = Rendezvous(opts.node_rank, opts.master_addr, opts.master_port or 29500)
    elif opts.rdzv_endpoint:  # one node with an explicit endpoint: rank 0 listens there
        host, port = _split_endpoint(opts.rdzv_endpoint)
        rdzv = Rendezvous(0, host, port)
    else:
        rdzv = Rendezvous(0, "127.0.0.1", opts.master_port or free_port())
    if rdzv.node_rank == 0:  # this node's rank 0 will listen on the port
        check_port_free(rdzv.master_port)
    return rdzv


def _c10d_rendezvous(opts: LaunchOptions) -> Rendezvous:
    """torch's c10d rendezvous agrees on the node ranks (it waits for --nnodes nodes, so a node
    started with another --nnodes times it out); node 0 then publishes MASTER_ADDR/PORT in its
    store, and the launchers check --nproc through it."""
    from torch.distributed.elastic.rendezvous import RendezvousError, RendezvousParameters, RendezvousTimeoutError
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    host, port = _split_endpoint(opts.rdzv_endpoint)
    handler = get_rendezvous_handler(
        RendezvousParameters(
            backend=opts.rdzv_backend,
            endpoint=opts.rdzv_endpoint,
            run_id=opts.rdzv_id,
            min_nodes=opts.nnodes,
            max_nodes=opts.nnodes,
            join_timeout=opts.rdzv_timeout_s,
        )
    )
    same = "start every node with the same --nnodes and --rdzv-endpoint, or raise --rdzv-timeout"
    try:
        info = handler.next_rendezvous()
    except RendezvousTimeoutError:
        _shut(handler)
        raise LaunchError(
            f"rendezvous at {opts.rdzv_endpoint} timed out after {opts.rdzv_timeout_s:g} s: fewer than --nnodes "
            f"{opts.nnodes} nodes joined (a node not started, or nodes started with different --nnodes); {same}"
        ) from None
    except (RendezvousError, RuntimeError) as e:  # torch's DistNetworkError: the store's host went away
        _shut(handler)
        raise _store_went_away(opts, e, same) from None
    try:
        nodes.agree(
            info.store, nodes.NodeFacts(info.rank, opts.nnodes, opts.nproc), opts.rdzv_timeout_s, opts.rdzv_endpoint
        )
        key = "titan_train/master"
        if info.rank == 0:
            info.store.set(key, f"{_address_towards(host, port)}:{free_port()}")
        addr, _, master_port = info.store.get(key).decode().rpartition(":")
    except nodes.Disagreement:
        _shut(handler)
        raise
    except RuntimeError as e:  # the store's host ended (its own verdict, or a crash) while this node used it
        _shut(handler)
        raise _store_went_away(opts, e, same) from None
    return Rendezvous(info.rank, addr, int(master_port), handler)


def _store_went_away(opts: LaunchOptions, e: Exception, same: str) -> LaunchError:
    return LaunchError(
        f"rendezvous at {opts.rdzv_endpoint} broke off: the node hosting its store (the first one started) "
        f"went away, which says why in its own line ({first_line(e, 120)}); {same}"
    )


def _shut(handler) -> None:
    """Leave a failed c10d rendezvous; its store may be gone already (its host exited)."""
    with contextlib.suppress(Exception):
        handler.shutdown()


def _static_rendezvous(opts: LaunchOptions) -> Rendezvous:
    """--master-addr with several nodes: node 0's launcher hosts the TCPStore at
    --master-port, as torchrun's static rendezvous does; the launchers agree through it, and
    the ranks then use it too (TORCHELASTIC_USE_AGENT_STORE: they connect as clients)."""
    from datetime import timedelta

    import torch.distributed as dist

    port = opts.master_port or 29500
    where = f"{opts.master_addr}:{port}"
    if opts.node_rank == 0:
        check_port_free(port)
    else:
        nodes.wait_for_listener(opts.master_addr, port, opts.node_rank, opts.rdzv_timeout_s)
    try:
        store = dist.TCPStore(
            opts.master_addr,
            port,
            is_master=opts.node_rank == 0,
            wait_for_workers=False,
            timeout=timedelta(seconds=max(opts.rdzv_timeout_s, 60)),
        )
    except RuntimeError as e:  # torch's DistNetworkError: the port was taken since the check, or node 0 went away
        if opts.node_rank == 0 or _ADDR_IN_USE.search(str(e)):
            raise LaunchError(port_in_use_error(port)) from None
        raise LaunchError(f"node {opts.node_rank} could not connect to node 0 at {where}: {str(e)[:200]}") from None
    nodes.agree(store, nodes.NodeFacts(opts.node_rank, opts.nnodes, opts.nproc), opts.rdzv_timeout_s, where)
    return Rendezvous(opts.node_rank, opts.master_addr, port, store=store)


# ---- starting and watching the ranks ----


def _die_with_parent() -> None:
    """Runs in the child before exec: its own process group (so a stop reaches its
    subprocesses too) and SIGKILL when the launcher dies (no orphaned ranks)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _copy(pipe, log, lock: threading.Lock, out=None) -> None:
    """One of a rank's streams into its log, the trainer's own lines stamped (OWN_LINES);
    `out`: also echoed here as printed."""
    try:
        for line in iter(pipe.readline, b""):
            with lock:
                log.write(stamp().encode() + b" " + line if line.startswith(OWN_LINES) else line)
            if out is not None:
                out.write(line.decode(errors="replace"))
                out.flush()
    except (OSError, ValueError):  # the log was closed: a subprocess of the rank outlived it
        pass


class Interrupted(Exception):
    """SIGINT / SIGTERM reached the launcher before any rank started: nothing ran."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal_name(signum)} before any rank started; nothing ran")

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


class StopSignals:
    """SIGTERM / SIGINT to the launcher, noted instead of raised. `titan-train run` enters it
    before start-up, so a Ctrl-C is never raised in the middle of an `import torch` or a fork
    (where it left a half-imported torch, or was ignored by Python and lost): the CLI checks
    it before starting the ranks, and while ranks run it is forwarded to them."""

    def __init__(self):
        self.signum = 0
        self._handlers = Handlers(HANDLED, self._note)

    def __enter__(self):
        self._handlers.__enter__()
        return self

    def _note(self, signum, _frame):
        self.signum = self.signum or signum

    def check(self) -> None:
        """Raise Interrupted when a signal came in so far."""
        if self.signum:
            raise Interrupted(self.signum)

    def __exit__(self, *exc):
        self._handlers.__exit__(*exc)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def start_ranks(
    cmd: list[str],
    opts: LaunchOptions,
    env: Mapping[str, str],
    log_dir: str | Path,
    *,
    echo_rank0: bool = True,
    timeout_s: float | None = None,
    stop_grace_s: float = 5.0,
    signal_grace_s: float = 600.0,
    rdzv: Rendezvous | None = None,
    stop_signals: StopSignals | None = None,
) -> LaunchResult:
    """Run `cmd` once per local rank and wait. On the first failure the others are stopped;
    after `timeout_s` all are. A forwarded signal gives the ranks `signal_grace_s` to save.
    `stop_signals`: the caller's, already entered (a signal noted before now is forwarded too)."""
    rdzv = rdzv or rendezvous(opts)  # first: a port in use is refused before any log or rank exists
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    base = dict(env)
    base.update(
        MASTER_ADDR=rdzv.master_addr,
        MASTER_PORT=str(rdzv.master_port),
        WORLD_SIZE=str(opts.world_size),
        LOCAL_WORLD_SIZE=str(opts.nproc),
        GROUP_RANK=str(rdzv.node_rank),
        PYTHONUNBUFFERED="1",
        TITAN_TRAIN_LAUNCHED="1",
    )
    if rdzv.agent_store:  # node 0's launcher hosts the store; RESTART_COUNT: torch < 2.6 prefixes keys with it
        base.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    # One intra-op thread pool per core, not per rank per core (torchrun would force 1).
    base.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // opts.nproc)))
    procs, outcomes, files, threads = [], [], [], []
    start = time.monotonic()
    with contextlib.nullcontext(stop_signals) if stop_signals else StopSignals() as fwd:  # before the first fork
        try:
            for local in range(opts.nproc):
                rank = rdzv.node_rank * opts.nproc + local
                log_path = log_dir / f"rank{rank}.log"
                log = open(log_path, "ab", buffering=0)
                log.truncate(0)
                files.append(log)
                echo = echo_rank0 and rank == 0
                proc = subprocess.Popen(
                    cmd,
                    env=dict(base, RANK=str(rank), LOCAL_RANK=str(local)),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    preexec_fn=_die_with_parent,
                )
                lock = threading.Lock()
                for pipe, out in ((proc.stdout, sys.stdout if echo else None), (proc.stderr, None)):
                    t = threading.Thread(target=_copy, args=(pipe, log, lock, out), daemon=True)
                    t.start()
                    threads.append(t)
                procs.append(proc)
                outcomes.append(RankOutcome(rank, log_path))
            result = _wait(procs, outcomes, start, timeout_s, stop_grace_s, signal_grace_s, fwd)
        finally:
            for p in procs:
                if p.poll() is None:
                    _signal_group(p, signal.SIGKILL)
                    p.wait()
            done_by = time.monotonic() + 5  # a rank's subprocess may hold its pipes open: wait 5 s in all
            for t in threads:
                t.join(timeout=max(0.0, done_by - time.monotonic()))
            for f in files:
                f.close()
            rdzv.close()
    result.master_addr, result.master_port, result.log_dir = rdzv.master_addr, rdzv.master_port, log_dir
    result.node_rank = rdzv.node_rank
    result.first_failure = first_failure(result.ranks)
    return result


def _ended_by(forwarded: int, returncode: int, log: Path) -> bool:
    """A rank ended by the signal the launcher passed on, before its own handler was in place:
    killed by it, or (SIGINT) a KeyboardInterrupt while Python was still starting or importing
    (a traceback ending in `KeyboardInterrupt`, or click's `Aborted!`)."""
    if not forwarded or returncode in (0, exit_code(forwarded)):
        return False
    if returncode == -forwarded:
        return True
    tail = read_log(log, limit=2000).strip().splitlines()
    # "Aborted!": click's own exit (code 1) for a KeyboardInterrupt raised while it parses the command line
    return forwarded == signal.SIGINT and bool(tail) and tail[-1].strip() in ("KeyboardInterrupt", "Aborted!")


def _wait(procs, outcomes, start, timeout_s, stop_grace_s, signal_grace_s, fwd: StopSignals) -> LaunchResult:
    result = LaunchResult(outcomes, "", 0)
    kill_at, failure_seen = None, False
    while True:
        now = time.monotonic() - start
        for p, o in zip(procs, outcomes):
            if o.ended_s is None and p.poll() is not None:
                o.returncode, o.ended_s = p.returncode, now
                if _ended_by(result.forwarded, p.returncode, o.log):
                    o.returncode = exit_code(result.forwarded)
        running = [(p, o) for p, o in zip(procs, outcomes) if o.ended_s is None]
        if not running:
            return result
        if fwd.signum and not result.forwarded:
            result.forwarded = fwd.signum
            for p, _ in running:
                _signal_group(p, fwd.signum)
            kill_at = min(kill_at if kill_at is not None else float("inf"), now + signal_grace_s)
        if not failure_seen and any(o.failed for o in outcomes):  # also while ranks save after a signal
            failure_seen = True
            for p, o in running:
                o.stopped = True
                _signal_group(p, signal.SIGTERM)
            kill_at = min(kill_at if kill_at is not None else float("inf"), now + stop_grace_s)
        if kill_at is None and timeout_s is not None and now > timeout_s:
            result.timed_out = True
            for p, o in running:
                o.stopped = True
                _signal_group(p, signal.SIGKILL)
            kill_at = now
        if kill_at is not None and now >= kill_at:
            for p, o in running:
                o.stopped = True
                _signal_group(p, signal.SIGKILL)
                p.wait()
                o.returncode = None if result.timed_out else p.returncode
                o.ended_s = now
        time.sleep(0.05)


# ---- reading what happened ----


def peer_lost(text: str) -> bool:
    """The log shows this rank failed because a peer went away (a secondary failure)."""
    return bool(_PEER_LOST.search(text))


def read_log(path: Path, limit: int = 200_000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def last_error_line(text: str, returncode: int | None) -> str:
    """A full disk, said plainly (write_errors.in_log); else the last line of the last Python
    traceback; else the last `titan-train:` line; else how the process ended."""
    lines = [_RANK_PREFIX.sub("", _STAMP.sub("", line, count=1), count=1) for line in text.splitlines()]
    disk = write_errors.in_log(lines)  # before torch's inline_container.cc text, which hides it
    if disk:
        return disk
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    exception = (
        [line.strip() for line in lines[starts[-1] + 1 :] if line.strip() and not line[0].isspace()] if starts else []
    )
    if exception:
        if _ADDR_IN_USE.search(exception[0]):  # rank 0's TCPStore could not listen
            port = _PORT.search(exception[0])
            return port_in_use_error(port.group(1) if port else "MASTER_PORT")
        return exception[0]
    own = [line.strip() for line in lines if line.startswith("titan-train:")]
    if own:
        return own[-1]
    if returncode is not None and returncode < 0:
        return signal_error(returncode)
    tail = [line.strip() for line in lines if line.strip()]
    return tail[-1] if tail else f"exit code {returncode} with an empty log"


def first_failure(ranks: list[RankOutcome]) -> RankOutcome | None:
    """The earliest failed rank; among ranks seen failing at the same moment, one that did
    not merely lose a peer."""
    failed = [r for r in ranks if r.failed]
    if not failed:
        return None
    return min(failed, key=lambda r: (r.ended_s, peer_lost(read_log(r.log)), r.rank))


def _how(r: RankOutcome) -> str:
    if r.returncode is None:
        return "still running: killed"
    if r.returncode < 0:
        return f"killed by {signal_name(-r.returncode)}"
    if r.returncode == EXIT_HANG:
        return f"hang watchdog (exit {EXIT_HANG})"
    return f"exit {r.returncode}"


def summary(result: LaunchResult, run_dir: str | Path, prog: str = "titan-train") -> str:
    """The failure summary, printed before anything else about the failure."""
    first = result.first_failure
    lines = []
    if first is not None and first.returncode == EXIT_HANG:
        dumps = read_dumps(run_dir)
        stuck, why = stuck_ranks(dumps, [r.rank for r in result.ranks])
        lines.append(
            f"{prog}: hang: a step ran past the watchdog limit (exit {EXIT_HANG}); "
            f"{len(dumps)} rank(s) dumped their stacks"
        )
        if stuck:
            lines.append(f"  stuck: rank {', '.join(map(str, stuck))} ({why})")
        lines.append(f"  error: {last_error_line(read_log(first.log), first.returncode)}")
        lines.append(f"  stack dumps: {Path(run_dir) / 'hang'}/rank<N>.txt")
    elif first is not None:
        error = last_error_line(read_log(first.log), first.returncode)
        cause = "out of disk space, " if error.startswith(write_errors.NO_SPACE) else ""
        lines.append(f"{prog}: rank {first.rank} failed first ({cause}{_how(first)}) after {first.ended_s:.1f} s")
        lines.append(f"  error: {error}")
    elif result.timed_out:
        lines.append(f"{prog}: ranks still running after the time limit were killed")
    else:
        return ""
    lines.append(f"  rank logs ({len(result.ranks)} on this node):")
    for r in result.ranks:
        note = (
            "failed first"
            if r is first and r.returncode != EXIT_HANG
            else "stopped by the launcher"
            if r.stopped
            else _how(r)
        )
        lines.append(f"    rank {r.rank:<3} {r.log}  ({note})")
    lines.append(f"  next: {diagnose_command(run_dir)}")
    return "\n".join(lines)


def _with_estimate_command(text: str, cmd: list[str], opts: LaunchOptions) -> str:
    """The SIGKILL hint's memory-estimate command, completed with this job's config and world
    size, so it can be pasted as it is."""
    placeholder = "titan-doctor diagnose --config ..."
    if placeholder not in text or "--config" not in cmd[:-1]:
        return text
    args = cmd[cmd.index("--config") :]
    sets = [f"--set {shlex.quote(args[i + 1])}" for i, a in enumerate(args[:-1]) if a == "--set"]
    exact = " ".join(
        [
            f"titan-doctor diagnose --config {shlex.quote(args[1])}",
            f"--world-size {opts.world_size}",
            "--device CARD",
            *sets,
        ]
    )  # CARD: the accelerator's name (910B2, A100-80G...), not known here
    return text.replace(placeholder, exact)


def stop_note(result: LaunchResult) -> str:
    """What a forwarded signal left behind, from rank 0's own `stopped by ... after step N`
    line (signals.Stopped); no such line: the ranks were still starting and nothing ran."""
    text = read_log(result.ranks[0].log) if result.ranks else ""
    stops = re.findall(
        r"titan-train: stopped by \w+ after step (\d+) \((checkpoint saved|no checkpoint configured)", text
    )
    if not stops:
        return "during start-up, before any step: nothing was trained or saved; rerun the same command to start"
    step, how = stops[-1]
    if how == "checkpoint saved":
        return f"after step {step}, checkpoint saved; the same command resumes there"
    return f"after step {step}; no checkpoint configured (checkpoint.save_interval = 0), so a rerun starts over"


def log_tail(r: RankOutcome, n: int = 20) -> str:
    """The failed rank's own last lines (printed after the summary); "" for an empty log."""
    tail = read_log(r.log).rstrip().splitlines()[-n:]
    return "\n".join([f"---- last {len(tail)} lines of {r.log} ----", *tail]) if tail else ""


def launcher_log(log_dir: str | Path, node_rank: int) -> Path:
    """Where this node's launcher keeps its failure summary, next to the rank logs, so that
    `titan-doctor diagnose --log <run folder>` reads the same verdict the console showed."""
    return Path(log_dir) / f"launcher_node{node_rank}.log"


def run_and_report(
    cmd: list[str], opts: LaunchOptions, run_dir: str | Path, env: Mapping[str, str] | None = None, **kw
) -> int:
    """start_ranks with logs in <run_dir>/logs, then the failure summary (first) and the
    failed rank's own last lines on stderr. Returns the exit code for the CLI."""
    return launch_and_report(cmd, opts, run_dir, env, **kw)[0].exit_code


def launch_and_report(
    cmd: list[str], opts: LaunchOptions, run_dir: str | Path, env: Mapping[str, str] | None = None, **kw
) -> tuple[LaunchResult, str]:
    """run_and_report's work: (how the ranks ended, the failure summary printed; "" if none)."""
    result = start_ranks(cmd, opts, os.environ if env is None else env, Path(run_dir) / "logs", **kw)
    text = _with_estimate_command(summary(result, run_dir), cmd, opts)
    sys.stdout.flush()
    saved = launcher_log(result.log_dir, result.node_rank)
    saved.unlink(missing_ok=True)  # a summary from an earlier run must not be read as this one's
    first = result.first_failure
    if text and first is not None and first.returncode == EXIT_NON_FINITE:
        # every rank agreed on the NaN / inf stop and wrote the same line: that line is the news
        print(last_error_line(read_log(first.log), first.returncode), file=sys.stderr)
        saved.write_text(text + "\n", encoding="utf-8")
    elif text:
        print(text, file=sys.stderr)
        saved.write_text(text + "\n", encoding="utf-8")
        tail = log_tail(first) if first is not None else ""
        if tail:
            print(tail, file=sys.stderr)
    elif result.forwarded:
        print(
            f"titan-train: stopped on {signal_name(result.forwarded)} (exit {result.exit_code}) {stop_note(result)}",
            file=sys.stderr,
        )
    return result, text


def spawn(
    opts: LaunchOptions,
    worker_argv: list[str],
    run_dir: str | Path,
    stop_signals: StopSignals | None = None,
    max_restarts: int = 0,
    resumes_from=lambda: "its newest complete checkpoint",
) -> int:
    """The trainer's launch: `python -m titan_train.cli <worker_argv>` on every local rank;
    after a failure, every rank again, up to `max_restarts` times (restarts.py)."""
    cmd = [sys.executable, "-m", "titan_train.cli", *worker_argv]
    if not max_restarts:
        return run_and_report(cmd, opts, run_dir, stop_signals=stop_signals)

    def attempt(k: int):
        env = dict(os.environ, **{restarts.RESTART_COUNT_ENV: str(k)})
        return launch_and_report(cmd, opts, run_dir, env, stop_signals=stop_signals)

    return restarts.run(
        attempt,
        max_restarts,
        never=NEVER_RESTARTED,
        log_dir=Path(run_dir) / "logs",
        resumes_from=resumes_from,
        stop_signal=lambda: stop_signals.signum if stop_signals else 0,
    )
