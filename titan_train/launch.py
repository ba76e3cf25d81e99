"""Start the ranks of this node and report how they ended: the one spawner of both tools.

`titan-train run --nproc N` and `titan-doctor diagnose --comm` start their ranks here.
Rendezvous follows torchrun's semantics:
  - one node: MASTER_ADDR=127.0.0.1 and a free port (torchrun --standalone);
  - --master-addr/--master-port with --node-rank: static, rank = node_rank x nproc + local rank;
  - --rdzv-endpoint HOST:PORT: torch's c10d rendezvous handler (the one torchrun uses) agrees
    on the node ranks; node 0 then publishes MASTER_ADDR/MASTER_PORT for the ranks in its store.
Global rank 0 hosts the ranks' TCPStore, as under torchrun's static rendezvous.

Every rank writes stdout and stderr to <log_dir>/rank<N>.log (plain text for
`titan-doctor diagnose --log`); only rank 0's stdout is echoed here. When a rank fails, the
others are stopped (SIGTERM, then SIGKILL after `stop_grace_s`), and `summary()` names the
rank that failed first, its error's last line, every log and the diagnose command, before
any other output about the failure; the summary is also kept in
<log_dir>/launcher_node<K>.log for the doctor. SIGTERM / SIGINT sent to the launcher are forwarded to
every rank, which stop at an agreed step (signals.py) and exit 143 / 130.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from titan_train.finite_guard import EXIT_NON_FINITE
from titan_train.signals import EXIT_SIGINT, EXIT_SIGTERM
from titan_train.watchdog import EXIT_HANG, diagnose_command, read_dumps, stuck_ranks

STOPPED_CODES = (EXIT_SIGTERM, EXIT_SIGINT)   # a rank that stopped on a signal after saving
# What a rank prints when a PEER died under it: secondary, never the cause.
_PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|failed to recv|Socket Timeout|"
                        r"ECONNRESET|Connection refused|NCCL communicator was aborted|HCCL.*(abort|timeout)", re.I)

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")   # torch prefixes a rank's uncaught traceback lines


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

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


@dataclass
class RankOutcome:
    rank: int
    log: Path
    returncode: int | None = None     # None: still running when the launch ended (timeout)
    ended_s: float | None = None      # seconds after start when its exit was seen
    stopped: bool = False             # the launcher stopped it (after a failure, timeout or signal)

    @property
    def failed(self) -> bool:
        return self.returncode not in (0, None, *STOPPED_CODES) and not self.stopped


@dataclass
class LaunchResult:
    ranks: list[RankOutcome]
    master_addr: str
    master_port: int
    timed_out: bool = False
    forwarded: int = 0                # signal forwarded to the ranks (0 = none)
    first_failure: RankOutcome | None = None
    log_dir: Path = field(default_factory=Path)
    node_rank: int = 0

    @property
    def exit_code(self) -> int:
        """0 all done; 143/130 stopped on a signal; 124 hang; 3 NaN / inf stop (finite_guard); 1 any other failure."""
        if self.first_failure is not None:
            return self.first_failure.returncode if self.first_failure.returncode in (EXIT_HANG, EXIT_NON_FINITE) else 1
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
    handler: object = None            # the c10d rendezvous handler, shut down after the run

    def close(self) -> None:
        if self.handler is not None:
            self.handler.shutdown()


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT, e.g. node0:29400")
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
    if opts.rdzv_endpoint and opts.nnodes > 1:
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

        host, port = _split_endpoint(opts.rdzv_endpoint)
        handler = get_rendezvous_handler(RendezvousParameters(
            backend=opts.rdzv_backend, endpoint=opts.rdzv_endpoint, run_id=opts.rdzv_id,
            min_nodes=opts.nnodes, max_nodes=opts.nnodes))
        info = handler.next_rendezvous()
        key = "titan_train/master"
        if info.rank == 0:
            info.store.set(key, f"{_address_towards(host, port)}:{free_port()}")
        addr, _, master_port = info.store.get(key).decode().rpartition(":")
        return Rendezvous(info.rank, addr, int(master_port), handler)
    if opts.master_addr:
        return Rendezvous(opts.node_rank, opts.master_addr, opts.master_port or 29500)
    if opts.rdzv_endpoint:   # one node with an explicit endpoint: rank 0 listens there
        host, port = _split_endpoint(opts.rdzv_endpoint)
        return Rendezvous(0, host, port)
    return Rendezvous(0, "127.0.0.1", opts.master_port or free_port())


# ---- starting and watching the ranks ----

def _die_with_parent() -> None:
    """Runs in the child before exec: its own process group (so a stop reaches its
    subprocesses too) and SIGKILL when the launcher dies (no orphaned ranks)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def _echo(pipe, log, out) -> None:
    for line in iter(pipe.readline, b""):
        log.write(line)
        log.flush()
        out.write(line.decode(errors="replace"))
        out.flush()


class _Forwarder:
    """While ranks run, SIGTERM / SIGINT to the launcher are passed on to them."""

    def __init__(self):
        self.signum = 0
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self._previous[s] = signal.signal(s, self._note)
        return self

    def _note(self, signum, _frame):
        self.signum = self.signum or signum

    def __exit__(self, *exc):
        for s, h in self._previous.items():
            signal.signal(s, h)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def start_ranks(cmd: list[str], opts: LaunchOptions, env: Mapping[str, str], log_dir: str | Path, *,
                echo_rank0: bool = True, timeout_s: float | None = None, stop_grace_s: float = 5.0,
                signal_grace_s: float = 600.0, rdzv: Rendezvous | None = None) -> LaunchResult:
    """Run `cmd` once per local rank and wait. On the first failure the others are stopped;
    after `timeout_s` all are. A forwarded signal gives the ranks `signal_grace_s` to save."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    rdzv = rdzv or rendezvous(opts)
    base = dict(env)
    base.update(MASTER_ADDR=rdzv.master_addr, MASTER_PORT=str(rdzv.master_port), WORLD_SIZE=str(opts.world_size),
                LOCAL_WORLD_SIZE=str(opts.nproc), GROUP_RANK=str(rdzv.node_rank), PYTHONUNBUFFERED="1",
                TITAN_TRAIN_LAUNCHED="1")
    # One intra-op thread pool per core, not per rank per core (torchrun would force 1).
    base.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // opts.nproc)))
    procs, outcomes, files, threads = [], [], [], []
    start = time.monotonic()
    try:
        for local in range(opts.nproc):
            rank = rdzv.node_rank * opts.nproc + local
            log_path = log_dir / f"rank{rank}.log"
            log = open(log_path, "ab", buffering=0)
            log.truncate(0)
            files.append(log)
            echo = echo_rank0 and rank == 0
            proc = subprocess.Popen(cmd, env=dict(base, RANK=str(rank), LOCAL_RANK=str(local)),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if echo else log, stderr=log,
                                    preexec_fn=_die_with_parent)
            if echo:
                t = threading.Thread(target=_echo, args=(proc.stdout, log, sys.stdout), daemon=True)
                t.start()
                threads.append(t)
            procs.append(proc)
            outcomes.append(RankOutcome(rank, log_path))
        result = _wait(procs, outcomes, start, timeout_s, stop_grace_s, signal_grace_s)
    finally:
        for p in procs:
            if p.poll() is None:
                _signal_group(p, signal.SIGKILL)
                p.wait()
        for t in threads:
            t.join(timeout=5)
        for f in files:
            f.close()
        rdzv.close()
    result.master_addr, result.master_port, result.log_dir = rdzv.master_addr, rdzv.master_port, log_dir
    result.node_rank = rdzv.node_rank
    result.first_failure = first_failure(result.ranks)
    return result


def _wait(procs, outcomes, start, timeout_s, stop_grace_s, signal_grace_s) -> LaunchResult:
    result = LaunchResult(outcomes, "", 0)
    kill_at, failure_seen = None, False
    with _Forwarder() as fwd:
        while True:
            now = time.monotonic() - start
            for p, o in zip(procs, outcomes):
                if o.ended_s is None and p.poll() is not None:
                    o.returncode, o.ended_s = p.returncode, now
            running = [(p, o) for p, o in zip(procs, outcomes) if o.ended_s is None]
            if not running:
                return result
            if fwd.signum and not result.forwarded:
                result.forwarded = fwd.signum
                for p, _ in running:
                    _signal_group(p, fwd.signum)
                kill_at = min(kill_at if kill_at is not None else float("inf"), now + signal_grace_s)
            if not failure_seen and any(o.failed for o in outcomes):   # also while ranks save after a signal
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
    """The last line of the last Python traceback; else the last `titan-train:` line; else
    how the process ended."""
    lines = [_RANK_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    exception = [line.strip() for line in lines[starts[-1] + 1:] if line.strip() and not line[0].isspace()] \
        if starts else []
    if exception:
        return exception[0]
    own = [line.strip() for line in lines if line.startswith("titan-train:")]
    if own:
        return own[-1]
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name} (no Python error: out of memory? see dmesg)"
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
        return f"killed by {signal.Signals(-r.returncode).name}"
    if r.returncode == EXIT_HANG:
        return f"hang watchdog (exit {EXIT_HANG})"
    return f"exit {r.returncode}"


def summary(result: LaunchResult, run_dir: str | Path, prog: str = "titan-train") -> str:
    """The failure summary, printed before anything else about the failure."""
    first = result.first_failure
    lines = []
    if first is not None and first.returncode == EXIT_HANG:
        dumps = read_dumps(run_dir)
        stuck = stuck_ranks(dumps)
        lines.append(f"{prog}: hang: a step ran past the watchdog limit (exit {EXIT_HANG}); "
                     f"{len(dumps)} rank(s) dumped their stacks")
        if stuck:
            lines.append(f"  stuck: rank {', '.join(map(str, stuck))} (not waiting in a collective; the others wait for it)")
        lines.append(f"  error: {last_error_line(read_log(first.log), first.returncode)}")
        lines.append(f"  stack dumps: {Path(run_dir) / 'hang'}/rank<N>.txt")
    elif first is not None:
        lines.append(f"{prog}: rank {first.rank} failed first ({_how(first)}) after {first.ended_s:.1f} s")
        lines.append(f"  error: {last_error_line(read_log(first.log), first.returncode)}")
    elif result.timed_out:
        lines.append(f"{prog}: ranks still running after the time limit were killed")
    else:
        return ""
    lines.append(f"  rank logs ({len(result.ranks)} on this node):")
    for r in result.ranks:
        note = ("failed first" if r is first and r.returncode != EXIT_HANG
                else "stopped by the launcher" if r.stopped else _how(r))
        lines.append(f"    rank {r.rank:<3} {r.log}  ({note})")
    lines.append(f"  next: {diagnose_command(run_dir)}")
    return "\n".join(lines)


def log_tail(r: RankOutcome, n: int = 20) -> str:
    """The failed rank's own last lines (printed after the summary); "" for an empty log."""
    tail = read_log(r.log).rstrip().splitlines()[-n:]
    return "\n".join([f"---- last {len(tail)} lines of {r.log} ----", *tail]) if tail else ""


def launcher_log(log_dir: str | Path, node_rank: int) -> Path:
    """Where this node's launcher keeps its failure summary, next to the rank logs, so that
    `titan-doctor diagnose --log <run folder>` reads the same verdict the console showed."""
    return Path(log_dir) / f"launcher_node{node_rank}.log"


def run_and_report(cmd: list[str], opts: LaunchOptions, run_dir: str | Path, env: Mapping[str, str] | None = None,
                   **kw) -> int:
    """start_ranks with logs in <run_dir>/logs, then the failure summary (first) and the
    failed rank's own last lines on stderr. Returns the exit code for the CLI."""
    result = start_ranks(cmd, opts, os.environ if env is None else env, Path(run_dir) / "logs", **kw)
    text = summary(result, run_dir)
    sys.stdout.flush()
    saved = launcher_log(result.log_dir, result.node_rank)
    saved.unlink(missing_ok=True)   # a summary from an earlier run must not be read as this one's
    if text:
        print(text, file=sys.stderr)
        saved.write_text(text + "\n", encoding="utf-8")
        tail = log_tail(result.first_failure) if result.first_failure is not None else ""
        if tail:
            print(tail, file=sys.stderr)
    elif result.forwarded:
        print(f"titan-train: stopped on {signal.Signals(result.forwarded).name} (exit {result.exit_code}); "
              "the same command resumes from the last checkpoint", file=sys.stderr)
    return result.exit_code


def spawn(opts: LaunchOptions, worker_argv: list[str], run_dir: str | Path) -> int:
    """The trainer's launch: `python -m titan_train.cli <worker_argv>` on every local rank."""
    return run_and_report([sys.executable, "-m", "titan_train.cli", *worker_argv], opts, run_dir)
