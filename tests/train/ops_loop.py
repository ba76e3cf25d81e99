"""A tiny stand-in training loop, one rank per process, with the run-operation pieces the
real loop uses (profiler + spans, hang watchdog, graceful stop on signals), for launcher
tests that need quick runs. Started by the tests through titan_train.runtime.launch (real
processes on gloo); the trainer itself is tested in test_run_safety.py.

Settings come as JSON in $OPS_CFG: steps, run_dir, step_sleep, profile (dict for
ProfilingConfig), watchdog (dict for WatchdogConfig), grace_s.
Writes <run_dir>/result_rank<N>.json: losses per step, the step it stopped at.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from titan_train.config.job import ProfilingConfig, WatchdogConfig  # noqa: E402
from titan_train.models.llama import ModelArgs, Transformer  # noqa: E402
from titan_train.runtime import device, signals  # noqa: E402
from titan_train.runtime.profiling import Profiler, span  # noqa: E402
from titan_train.runtime.watchdog import Watchdog  # noqa: E402


def main() -> int:
    cfg = json.loads(os.environ["OPS_CFG"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    run_dir = Path(cfg["run_dir"])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    args = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, multiple_of=16, max_seq_len=16)
    model = Transformer(args)
    model.init_weights(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    dev = device.Device("cpu", "gloo", 1)
    losses, stopped_at = {}, None
    prof_cfg = ProfilingConfig(**cfg.get("profile", {"enabled": False}))
    wd_cfg = WatchdogConfig(**cfg.get("watchdog", {}))
    with (
        Profiler(prof_cfg, dev, rank) as prof,
        Watchdog(wd_cfg, run_dir, rank, grace_s=cfg.get("grace_s", 2.0)) as wd,
        signals.GracefulStop() as stop,
    ):
        for step in range(1, cfg["steps"] + 1):
            with wd.watch(step):
                g = torch.Generator().manual_seed(1000 * step + rank)
                tokens = torch.randint(0, args.vocab_size, (2, 17), generator=g)
                with span("forward"):
                    logits = model(tokens[:, :-1])
                    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
                with span("backward"):
                    loss.backward()
                    for p in model.parameters():
                        dist.all_reduce(p.grad)
                        p.grad /= world
                with span("optimizer"):
                    opt.step()
                    opt.zero_grad()
                total = loss.detach().clone()
                dist.all_reduce(total)
                losses[step] = total.item() / world
                if rank == 0:
                    print(f"step {step} loss {losses[step]:.6f}", flush=True)
                time.sleep(cfg.get("step_sleep", 0.0))
            if step % 2 == 0:
                with span("checkpoint"):  # stands in for Checkpointer.maybe_save
                    (run_dir / f"ckpt_rank{rank}.txt").write_text(str(step))
            prof.step()
            signum = stop.agreed()
            if signum:
                stopped_at = step
                with span("checkpoint"):
                    (run_dir / f"saved_step{step}_rank{rank}").write_text("ok")
                _write(run_dir, rank, losses, stopped_at)
                raise signals.Stopped(step, signum)
    _write(run_dir, rank, losses, stopped_at)
    dist.destroy_process_group()
    return 0


def _write(run_dir: Path, rank: int, losses, stopped_at) -> None:
    (run_dir / f"result_rank{rank}.json").write_text(json.dumps({"losses": losses, "stopped_at": stopped_at}))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except signals.Stopped as e:
        print(f"titan-train: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
