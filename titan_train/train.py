"""The training loop, read top to bottom. Runs in every rank (started by launch.py or torchrun)."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from titan_train import checkpoint, data, device, metrics
from titan_train.checkpoint_formats.export import export_final
from titan_train.checkpoint_formats.initial_load import load_initial
from titan_train.config import JobConfig, to_dict, validate
from titan_train.model import ModelArgs, Transformer, count_params, flops_per_token
from titan_train.parallel import ParallelDims, build_mesh, parallelize, uses_fsdp

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def model_args(cfg: JobConfig) -> ModelArgs:
    """The [model] section is ModelArgs plus `name`: copy the shared fields."""
    return ModelArgs(**{f.name: getattr(cfg.model, f.name) for f in dataclasses.fields(ModelArgs)})


def lr_lambda(cfg: JobConfig):
    """Linear warmup to 1, then cosine / linear decay to min_lr_ratio at the last step."""
    t = cfg.training
    warmup, total, floor = t.warmup_steps, t.steps, t.min_lr_ratio

    def factor(step: int) -> float:  # `step` = optimizer steps already taken
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if t.lr_schedule == "constant" or total <= warmup:
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        decay = 0.5 * (1 + math.cos(math.pi * progress)) if t.lr_schedule == "cosine" else 1 - progress
        return floor + (1 - floor) * decay

    return factor


@dataclass
class LossScaler:
    """Dynamic loss scaling for fp16. The overflow check uses the global gradient norm,
    which is already reduced over every shard, so all ranks skip or step together."""

    scale: float = 2.0 ** 16
    good_steps: int = 0
    growth_interval: int = 1000

    def update(self, finite: bool) -> None:
        if not finite:
            self.scale, self.good_steps = max(self.scale / 2, 1.0), 0
            return
        self.good_steps += 1
        if self.good_steps % self.growth_interval == 0:
            self.scale *= 2


def unscale_and_clip(params, max_norm: float, scale: float) -> float:
    """Global grad norm (all shards, all meshes); grads are scaled by 1/scale and clipped
    in one pass. Returns the true (unscaled) norm, inf/nan on overflow."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    true_norm = norm.item() / scale
    if not math.isfinite(true_norm):
        return true_norm
    coef = 1.0 / scale
    if max_norm > 0 and true_norm > max_norm:
        coef *= max_norm / (true_norm + 1e-6)
    if coef != 1.0:
        for g in grads:
            g.mul_(coef)
    return true_norm


def _rank_env() -> tuple[int, int, int]:
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def train(cfg: JobConfig, stop_after: int = 0) -> None:
    """Train to cfg.training.steps (resuming if a checkpoint exists), or for at most
    `stop_after` steps in this run. Metrics go to cfg.metrics.output (rank 0)."""
    rank, world, local_rank = _rank_env()
    validate(cfg, world)
    dev = device.select(cfg.distributed.backend, device.probe())
    device.check_options(dev, cpu_offload=cfg.distributed.cpu_offload, mixed_precision=cfg.training.mixed_precision)
    say = print if rank == 0 else (lambda *a, **k: None)
    if dev.note:
        say(f"[titan-train] backend auto: {dev.note}")
    device.set_current(dev, local_rank)
    dist.init_process_group(dev.backend)
    try:
        _train(cfg, dev, rank, world, local_rank, say, stop_after)
    finally:
        dist.destroy_process_group()


def _quiet_known_warnings() -> None:
    """Two warnings that do not apply to this loop: the root returns replicated logits (a view)
    that we never modify in place, and the grad-norm reduction over a 2-D mesh takes two
    all-reduces, once per step."""
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def _train(cfg, dev, rank, world, local_rank, say, stop_after: int) -> None:
    _quiet_known_warnings()
    t, mp_name = cfg.training, cfg.training.mixed_precision
    dims = ParallelDims.for_world(world, cfg.distributed.tp_size)
    mesh = build_mesh(dev.type, dims)
    dp_rank = mesh["dp"].get_local_rank()
    torch_dev = device.torch_device(dev, local_rank)

    tok = data.checked_tokenizer(cfg.data.tokenizer, cfg.data.dataset, cfg.model.vocab_size)
    tokens = data.load_tokens(cfg.data.dataset, tok, cfg.data.text_field)
    layout = data.BatchLayout(t.batch_size, t.grad_accum_steps, dims.dp)

    args = model_args(cfg)
    with torch.device("meta"):
        model = Transformer(args)
    param_dtype = DTYPES[mp_name]
    fsdp = uses_fsdp(cfg.distributed.fsdp, dims, cfg.distributed.cpu_offload)
    parallelize(model, mesh, fsdp=fsdp, param_dtype=param_dtype,
                cpu_offload=cfg.distributed.cpu_offload, sum_reductions_only=dev.backend == "gloo")
    model.to_empty(device="cpu" if cfg.distributed.cpu_offload else torch_dev)
    model.init_weights(t.seed)
    autocast = (torch.autocast(dev.type, dtype=param_dtype)
                if not fsdp and mp_name != "fp32" else contextlib.nullcontext())

    o = cfg.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps,
                                  weight_decay=o.weight_decay, foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    progress = {"step": 0, "samples": 0, "loss_scale": LossScaler.scale}  # all of it is checkpointed
    state = checkpoint.TrainState(model, optimizer, scheduler, progress)
    ckpt = cfg.checkpoint
    if rank == 0:
        checkpoint.remove_partial(ckpt.folder)
    dist.barrier()
    found = checkpoint.latest(ckpt.folder) if ckpt.resume else None
    if found:
        checkpoint.load(found[1], state)
        say(f"[titan-train] resumed from {found[1]} (step {progress['step']})")
    elif ckpt.initial_load_path:
        say("[titan-train] " + load_initial(model, ckpt.initial_load_path, args=args, optimizer=optimizer,
                                            model_only=ckpt.initial_load_model_only))

    n_params = count_params(args)["total"]
    fpt = flops_per_token(args, t.seq_len)
    peak, peak_src = metrics.peak_flops(dev.type, device.device_name(dev), mp_name, cfg.metrics.peak_tflops)
    say(f"[titan-train] {cfg.name}: {n_params / 1e6:.1f}M params | {dev.type}+{dev.backend} | world {world} "
        f"= dp {dims.dp} x tp {dims.tp} | fsdp {fsdp} | {mp_name} | "
        f"global batch {t.batch_size} x {t.seq_len} tokens | data {tok.name}, {len(tokens):,} tokens")
    say(f"[titan-train] peak {peak / 1e12:.3f} TFLOP/s per device ({peak_src})")
    if cfg.metrics.tensorboard:
        say("[titan-train] metrics.tensorboard is not implemented yet; metrics go to " + cfg.metrics.output)
    if progress["step"] >= t.steps:
        say(f"[titan-train] already at step {progress['step']} >= training.steps = {t.steps}; nothing to do")
        return

    last_step = min(t.steps, progress["step"] + stop_after) if stop_after > 0 else t.steps
    log_file = metrics.MetricsFile(cfg.metrics.output) if rank == 0 else None
    if log_file:
        log_file.write({"event": "start", "config": to_dict(cfg), "world_size": world,
                        "device": dev.type, "backend": dev.backend, "resumed_from": progress["step"]})
    scaler = LossScaler(scale=progress["loss_scale"]) if mp_name == "fp16" else None
    device.reset_peak_memory(dev)
    window_start, window_tokens = time.perf_counter(), 0
    try:
        while progress["step"] < last_step:
            loss_sum = torch.zeros((), device=torch_dev)
            for micro in range(t.grad_accum_steps):
                idx = data.sample_indices(progress["samples"], layout, micro, dp_rank)
                inputs, targets = data.make_batch(tokens, idx, t.seq_len)
                inputs = torch.from_numpy(inputs).to(torch_dev)
                targets = torch.from_numpy(targets).to(torch_dev)
                with autocast:
                    logits = model(inputs)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()) / t.grad_accum_steps
                (loss * scaler.scale if scaler else loss).backward()
                loss_sum += loss.detach()
            grad_norm = unscale_and_clip(model.parameters(), t.max_norm, scaler.scale if scaler else 1.0)
            finite = math.isfinite(grad_norm)
            if scaler:
                scaler.update(finite)
                progress["loss_scale"] = scaler.scale
            if finite or not scaler:
                optimizer.step()
            lr = scheduler.get_last_lr()[0]  # the rate this step used
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            progress["step"] += 1
            progress["samples"] += t.batch_size
            step = progress["step"]
            window_tokens += t.batch_size * t.seq_len

            if step % cfg.metrics.log_every == 0 or step == last_step:
                dist.all_reduce(loss_sum)  # tp ranks hold equal copies: the mean over world = mean over dp
                device.synchronize(dev)
                elapsed = time.perf_counter() - window_start
                tps = window_tokens / elapsed
                record = {"step": step, "loss": loss_sum.item() / world, "grad_norm": grad_norm,
                          "lr": lr, "tokens_per_s": tps,
                          "tokens_per_s_per_rank": tps / world, "mfu": metrics.mfu(tps / world, fpt, peak),
                          "peak_mem_gib": device.peak_memory_bytes(dev) / 2 ** 30, "elapsed_s": elapsed}
                if scaler:
                    record["loss_scale"] = scaler.scale
                say(metrics.format_line(record), flush=True)
                if log_file:
                    log_file.write(record)
                window_start, window_tokens = time.perf_counter(), 0

            if ckpt.save_interval and (step % ckpt.save_interval == 0 or step == last_step):
                saved = checkpoint.save(ckpt.folder, step, state)
                if rank == 0:
                    pruned = checkpoint.prune(ckpt.folder, ckpt.keep_last_n)
                    say(f"[titan-train] saved {saved}" + (f" (removed {len(pruned)} older)" if pruned else ""))
                dist.barrier()
                window_start = time.perf_counter()  # saving time is not training throughput
    finally:
        if log_file:
            log_file.close()
    if progress["step"] >= t.steps:  # the run is complete: hand the model over in the format asked for
        exported = export_final(model, ckpt.folder, ckpt.export_final, args=args, step=progress["step"],
                                dtype=ckpt.export_dtype)
        if exported:
            say(f"[titan-train] exported the final model to {exported}")
