"""The training loop, read top to bottom. Runs in every rank (started by launch.py or torchrun).

Everything that is not the loop lives in its own module and enters here as one call or
one context manager: the layout (parallel_dims), `build` (model, parallelism, optimizer),
`train_step` (or the pipeline's), the `Checkpointer`, the `MetricsLogger`, the graceful stop
on SIGTERM / SIGINT (signals), the hang watchdog, the profiler, the run's lock on its
checkpoint folder (run_lock), the NaN / inf stop (finite_guard) and the held-out loss
(validation).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from titan_train.build import build
from titan_train.checkpoint import run_lock
from titan_train.checkpoint.manager import Checkpointer, train_states
from titan_train.components import metrics
from titan_train.config.job import JobConfig, advisories, pipeline_microbatches, run_dir, to_dict, validate
from titan_train.config.model_args import count_params, flops_per_token
from titan_train.config.parallel_dims import ParallelDims
from titan_train.data import samples as data_samples
from titan_train.data import stream as data
from titan_train.distributed import same_job
from titan_train.runtime import device, faults, finite_guard, profiling, signals, watchdog
from titan_train.runtime.profiling import span
from titan_train.step import Progress, train_step
from titan_train.validation import Validator


def _rank_env() -> tuple[int, int, int]:
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


@record  # the rank entry point: an uncaught error goes to torchrun's error file (error_file.py)
def train(cfg: JobConfig, stop_after: int = 0, fresh: bool = False) -> None:
    """Train to cfg.training.steps (resuming if a checkpoint exists), or for at most
    `stop_after` steps in this run (saving there). `fresh`: move the folder's checkpoints
    aside and start a new lineage. Metrics go to cfg.metrics.output (rank 0)."""
    rank, world, local_rank = _rank_env()
    validate(cfg, world)
    dims = ParallelDims.of(cfg.distributed, world)
    dev = device.select(cfg.distributed.backend, device.probe())
    device.check_options(dev, cpu_offload=cfg.distributed.cpu_offload, mixed_precision=cfg.training.mixed_precision)
    say = print if rank == 0 else (lambda *a, **k: None)
    if dev.note:
        say(f"[titan-train] backend auto: {dev.note}")
    device.set_current(dev, local_rank)
    timeout = timedelta(seconds=cfg.distributed.timeout_s) if cfg.distributed.timeout_s else None  # None: torch's
    dist.init_process_group(dev.backend, timeout=timeout)
    try:
        with run_lock.hold(cfg, fresh=fresh, saves=cfg.checkpoint.save_interval > 0 or stop_after > 0, say=say):
            _train(cfg, dims, dev, rank, local_rank, say, stop_after)
    finally:
        dist.destroy_process_group()


def _quiet_known_warnings() -> None:
    """Warnings that do not apply to this loop: the root returns replicated logits (a view)
    that we never modify in place, and DTensor redistribution notes."""
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def _batches(
    tokens: data_samples.Samples, layout: data.BatchLayout, samples: int, dp_rank: int, seq_len: int, torch_dev
):
    """The micro-batches of one optimizer step for this data-parallel rank; every pipeline
    and tensor-parallel rank of the group reads the same ones."""
    out = []
    for micro in range(layout.accum):
        inputs, targets = tokens.batch(data.sample_indices(samples, layout, micro, dp_rank), seq_len)
        out.append((torch.from_numpy(inputs).to(torch_dev), torch.from_numpy(targets).to(torch_dev)))
    return out


def _train(
    cfg: JobConfig, dims: ParallelDims, dev: device.Device, rank: int, local_rank: int, say, stop_after: int
) -> None:
    _quiet_known_warnings()
    faults.maybe_inject(0, rank, site="start")  # tests only: a slow start-up (TITAN_TRAIN_FAULT=slow_start@R:0)
    t = cfg.training
    torch_dev = device.torch_device(dev, local_rank)
    tokens = data_samples.open_samples(cfg.data, cfg.model.vocab_size, t.seq_len, log=say)  # too short: refused
    same_job.check(cfg, dims, tokens.identity)  # every rank: same config, layout, data and tokenizer content
    layout = data.BatchLayout(t.batch_size, t.grad_accum_steps, dims.dp)

    parts = build(cfg, dims, torch_dev)
    dp_rank = parts.mesh["dp"].get_local_rank()
    progress = Progress()
    guard = finite_guard.FiniteGuard(torch_dev, every=cfg.metrics.log_every, last_step=t.steps, params=parts.parameters)
    checkpointer = Checkpointer(
        cfg.checkpoint,
        train_states(parts, progress),
        say=say,
        model_args=cfg.model,
        job=cfg,
        before_save=guard.before_save,
        data_identity=tokens.identity,
    )
    checkpointer.resume()  # the run's own newest checkpoint, else [checkpoint] initial_load_path

    peak, peak_src = metrics.peak_flops(dev.type, device.device_name(dev), t.mixed_precision, cfg.metrics.peak_tflops)
    d = cfg.distributed
    pp = f" | pp {d.pp_schedule} x {pipeline_microbatches(d)} micro-batches" if dims.pp > 1 else ""
    op_sac = " (op)" if t.activation_checkpoint == "selective" and t.selective_ac_option == "op" else ""
    say(
        f"[titan-train] {cfg.name}: {count_params(cfg.model)['total'] / 1e6:.1f}M params | {dev.type}+{dev.backend} | "
        f"world {dims.world_size} = {dims.describe()}{pp} | fsdp {parts.precision.fsdp} | {t.mixed_precision} | "
        f"ac {t.activation_checkpoint}{op_sac} | compile {t.compile} | global batch {t.batch_size} x {t.seq_len} tokens | "
        f"data {tokens.description}"
    )
    say(f"[titan-train] peak {peak / 1e12:.3f} TFLOP/s per device ({peak_src})")
    if progress.step >= t.steps:
        say(f"[titan-train] already at step {progress.step} >= training.steps = {t.steps}; nothing to train")
        checkpointer.export_if_missing(progress.step)  # [checkpoint] export_final set after the run ended
        return
    for line in advisories(cfg):  # settings that run but rarely mean what was intended
        say(f"[titan-train] warning: {line}")

    validator = Validator(cfg, parts, dp_rank, torch_dev, say)  # [validation]: held-out loss every N steps
    last_step = min(t.steps, progress.step + stop_after) if stop_after > 0 else t.steps
    guard.last_step, checkpointer.stop_step = last_step, (last_step if stop_after > 0 else None)  # saved regardless
    logger = metrics.MetricsLogger(
        metrics.open_sinks(cfg.metrics, rank, progress.step),
        every=cfg.metrics.log_every,
        dims=dims,
        dev=dev,
        tokens_per_step=t.batch_size * t.seq_len,
        flops_per_token=flops_per_token(cfg.model, t.seq_len),
        peak=peak,
        last_step=last_step,
        total_steps=t.steps,
        say=say,
    )
    logger.start(
        {
            "config": to_dict(cfg),
            "world_size": dims.world_size,
            "device": dev.type,
            "backend": dev.backend,
            "resumed_from": progress.step,
        }
    )
    with (
        signals.GracefulStop() as stop,
        watchdog.Watchdog(cfg.watchdog, run_dir(cfg), rank) as wd,
        profiling.Profiler(cfg.profiling, dev, rank) as prof,
        contextlib.closing(logger),
    ):
        prof.announce(say)
        while progress.step < last_step:
            with wd.watch(progress.step + 1):  # a step far slower than the median dumps every rank's stack
                stats = train_step(parts, _batches(tokens, layout, progress.samples, dp_rank, t.seq_len, torch_dev))
                progress.advance(t.batch_size)
                logger.log(progress.step, stats)
                guard.observe(progress.step, stats)  # NaN / inf: every rank stops at log steps and before saves
                signum = stop.agreed()  # SIGTERM / SIGINT on any rank: every rank stops after this step
            last = progress.step == last_step or bool(signum)
            pausing = checkpointer.due(progress.step, last=last) or prof.recording or validator.due(progress.step)
            with logger.paused(pausing):  # not training time
                validator.maybe_run(progress.step, logger.sinks)
                with span("checkpoint"):
                    checkpointer.maybe_save(progress.step, last=last)
                prof.step()
            if signum:
                checkpointer.wait()
                raise signals.Stopped(progress.step, signum, saved=checkpointer.enabled)
        checkpointer.finish(progress.step, complete=progress.step >= t.steps)  # + [checkpoint] export_final
