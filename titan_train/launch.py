"""Start the ranks: in this process for a single rank, through torch.distributed.run
(torchrun) otherwise, so multi-node rendezvous options work the torchrun way. Each rank
re-runs `titan-train run` with the same arguments and finds itself under torchrun."""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass


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
    max_restarts: int = 0

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def under_torchrun() -> bool:
    """True inside a rank started by torchrun (ours or the user's)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process_env() -> None:
    """A world of one, without torchrun (faster start, plain tracebacks under --debug)."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))


def torchrun_argv(opts: LaunchOptions, worker_argv: list[str]) -> list[str]:
    argv = ["--nproc-per-node", str(opts.nproc), "--nnodes", str(opts.nnodes),
            "--max-restarts", str(opts.max_restarts)]
    if opts.nnodes == 1 and not (opts.rdzv_endpoint or opts.master_addr):
        argv.append("--standalone")
    elif opts.rdzv_endpoint:
        argv += ["--rdzv-backend", opts.rdzv_backend, "--rdzv-endpoint", opts.rdzv_endpoint,
                 "--rdzv-id", opts.rdzv_id]
    else:
        argv += ["--node-rank", str(opts.node_rank), "--master-addr", opts.master_addr,
                 "--master-port", str(opts.master_port or 29500)]
    return argv + ["-m", "titan_train.cli", *worker_argv]


def spawn(opts: LaunchOptions, worker_argv: list[str]) -> int:
    """Run torchrun in this process; return 0, or 1 naming the first rank that failed."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    # One intra-op thread pool per core, not per rank per core (torchrun would force 1).
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // opts.nproc)))
    args = get_args_parser().parse_args(torchrun_argv(opts, worker_argv))
    try:
        run(args)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        print(f"titan-train: rank {rank} failed with exit code {failure.exitcode}"
              f" ({len(e.failures)} rank(s) failed); its error is printed above", file=sys.stderr)
        return 1
    return 0
