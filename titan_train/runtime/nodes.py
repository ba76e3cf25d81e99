"""The launchers of a multi-node job agree on its shape before any rank starts.

Two nodes started with a different --nproc (or --nnodes) compute different world sizes,
and their ranks wait in init_process_group for ranks that never come: a silent hang until
torch's 30-minute timeout. So each node's launcher first says what it was started with
(its node rank, --nnodes, --nproc) through a small store: node 0 reads every other node's
facts as they arrive, and at the first disagreement (or when the rendezvous timeout passes
with nodes missing) publishes one line that every node prints and exits with; when all
--nnodes nodes arrived and agree it publishes "ok". A node that arrived reports that it
read the verdict, so node 0 keeps the store up until then.

The store is node 0's TCPStore at --master-addr:--master-port (static rendezvous: the same
store the ranks then use, as under torchrun) or the c10d rendezvous store. Everything
here polls with non-blocking store calls: torch's blocking waits and connects log C++
warnings and stack frames on a timeout, which would bury the one line.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import asdict, dataclass

PREFIX = "titan_train/nodes/"
ARRIVED = PREFIX + "arrived"  # a counter: how many nodes other than 0 arrived
VERDICT = PREFIX + "verdict"  # "ok", or the line every node exits with
READ = PREFIX + "read"  # a counter: how many of them read the verdict
POLL_S = 0.05
READ_GRACE_S = 5.0  # how long node 0 keeps a failed store up for the others to read why


class Disagreement(Exception):
    """The nodes do not form one job (or not all arrived in time): one line, the same on every node."""


@dataclass(frozen=True)
class NodeFacts:
    node_rank: int
    nnodes: int
    nproc: int

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes) -> NodeFacts:
        return cls(**json.loads(raw))


def disagreement(first: NodeFacts, other: NodeFacts, seen: set[int]) -> str | None:
    """The line naming how `other` differs from node 0 (`first`), or None. `seen`: the node
    ranks already arrived."""
    if other.nnodes != first.nnodes:
        return (
            f"node {other.node_rank} started with --nnodes {other.nnodes}, node {first.node_rank} with --nnodes "
            f"{first.nnodes}: every node must be started with the same --nnodes"
        )
    if other.nproc != first.nproc:
        return (
            f"node {other.node_rank} started with --nproc {other.nproc}, node {first.node_rank} with --nproc "
            f"{first.nproc}: every node must start the same number of ranks"
        )
    if other.node_rank in seen:
        return f"two nodes started with --node-rank {other.node_rank}: give each node its own, 0 to {first.nnodes - 1}"
    return None


def timed_out(arrived: set[int], nnodes: int, timeout_s: float, where: str) -> str:
    missing = ", ".join(str(k) for k in range(nnodes) if k not in arrived)
    return (
        f"rendezvous timed out after {timeout_s:g} s: {len(arrived)} of {nnodes} nodes arrived at {where} "
        f"(missing: node {missing}); start every node with the same --nnodes, --master-addr and --master-port, "
        "or raise --rdzv-timeout"
    )


def agree(store, mine: NodeFacts, timeout_s: float, where: str) -> None:
    """Return when all nodes arrived and agree; raise Disagreement (the same line on every
    node) otherwise. Node 0 decides; `where`: the address, for the messages."""
    if mine.node_rank == 0:
        _decide(store, mine, timeout_s, where)
    else:
        _hear(store, mine, timeout_s, where)


def _decide(store, mine: NodeFacts, timeout_s: float, where: str) -> None:
    deadline, seen, read = time.monotonic() + timeout_s, {mine.node_rank}, 0
    while True:
        arrived = store.add(ARRIVED, 0)
        for i in range(read + 1, arrived + 1):
            other = NodeFacts.decode(store.get(f"{PREFIX}{i}"))
            problem = disagreement(mine, other, seen)
            if problem:
                _fail_everywhere(store, problem, arrived)
            seen.add(other.node_rank)
        read = arrived
        if len(seen) >= mine.nnodes:
            store.set(VERDICT, "ok")
            return
        if time.monotonic() > deadline:
            _fail_everywhere(store, timed_out(seen, mine.nnodes, timeout_s, where), arrived)
        time.sleep(POLL_S)


def _fail_everywhere(store, problem: str, arrived: int) -> None:
    """Publish the line, keep the store up until the nodes that arrived read it, raise it here."""
    try:
        store.set(VERDICT, problem)
        until = time.monotonic() + READ_GRACE_S
        while store.add(READ, 0) < arrived and time.monotonic() < until:
            time.sleep(POLL_S)
    except RuntimeError:  # torch's DistNetworkError: the store's host (another node) read the line and left
        pass
    raise Disagreement(problem)


def _hear(store, mine: NodeFacts, timeout_s: float, where: str) -> None:
    n = store.add(ARRIVED, 1)
    store.set(f"{PREFIX}{n}", mine.encode())
    deadline = time.monotonic() + timeout_s + 2 * READ_GRACE_S  # node 0's own deadline passes first
    while not store.check([VERDICT]):
        if time.monotonic() > deadline:
            raise Disagreement(
                f"node {mine.node_rank} waited {timeout_s:g} s at {where} without word from node 0; "
                "check that node 0 runs the same titan-train version, or raise --rdzv-timeout"
            )
        time.sleep(POLL_S)
    verdict = store.get(VERDICT).decode()
    store.add(READ, 1)
    if verdict != "ok":
        raise Disagreement(verdict)


def wait_for_listener(host: str, port: int, node_rank: int, timeout_s: float) -> None:
    """Until node 0's store accepts connections (a plain socket: torch's own connect retries
    print C++ warnings); Disagreement when it never does."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise Disagreement(
                    f"node {node_rank} found no node 0 at {host}:{port} within {timeout_s:g} s: "
                    "start node 0 (--node-rank 0) with the same --master-addr and --master-port, check that the "
                    "port is open between the hosts, or raise --rdzv-timeout"
                ) from None
            time.sleep(0.2)
