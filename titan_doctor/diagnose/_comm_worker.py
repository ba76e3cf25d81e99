"""One rank of the live collective test (started by comm.py, never by users).

Writes its progress to $TD_RESULT_DIR/rank<N>.json after every phase, so a rank that hangs or dies is
named together with the phase it was in.
"""

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # titan_train from a checkout

STATE = {"phase": "start"}


def save(**kw):
    STATE.update(kw)
    result = Path(os.environ["TD_RESULT_DIR"]) / f"rank{os.environ['RANK']}.json"
    tmp = result.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        json.dump(STATE, fh)
    os.replace(tmp, result)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    timeout = float(os.environ.get("TD_TIMEOUT", "60"))
    sizes = [int(s) for s in os.environ.get("TD_SIZES", "").split(",") if s]
    iters = int(os.environ.get("TD_ITERS", "5"))
    save(phase="import")
    from titan_train.runtime import device as tdev

    tdev.disable_backend_autoload()
    import torch
    import torch.distributed as dist

    dev = tdev.select(os.environ.get("TD_BACKEND", "auto"), tdev.probe())
    save(phase="init", device=dev.type, backend=dev.backend)
    tdev.set_current(dev, local_rank)
    dist.init_process_group(dev.backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    where = tdev.torch_device(dev, local_rank)

    save(phase="allreduce")
    n = 1 << 10
    t = torch.arange(n, dtype=torch.float32, device=where) * (rank + 1)
    dist.all_reduce(t)
    want = torch.arange(n, dtype=torch.float32, device=where) * (world * (world + 1) / 2)
    ok = bool(torch.equal(t, want))
    save(allreduce_ok=ok, allreduce_max_err=float((t - want).abs().max().item()))

    save(phase="bandwidth")
    rows = []
    for size in sizes:
        x = torch.ones(max(size // 4, 1), dtype=torch.float32, device=where)
        for _ in range(2):
            dist.all_reduce(x)
        tdev.synchronize(dev)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        tdev.synchronize(dev)
        dt = (time.perf_counter() - t0) / iters
        algbw = x.numel() * 4 / dt / 1e9
        rows.append(
            {
                "bytes": x.numel() * 4,
                "time_us": dt * 1e6,
                "algbw_gbs": algbw,
                "busbw_gbs": algbw * 2 * (world - 1) / world,
            }
        )
    save(bandwidth=rows)
    dist.barrier()
    dist.destroy_process_group()
    save(phase="done")


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # noqa: BLE001 - report every way a rank can die
        save(
            error=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
            traceback=traceback.format_exc()[-4000:],
        )
        raise
