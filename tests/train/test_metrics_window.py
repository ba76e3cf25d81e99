"""Honest metrics: tokens/s and MFU come from a window whose clock and token count move
together, pauses (saves, profiler flush) are in neither, an MFU >= 100% is never printed,
and the memory figure says what it measures."""

from __future__ import annotations

import json

import pytest
import torch

from titan_train.components import metrics
from titan_train.config.parallel_dims import ParallelDims
from titan_train.runtime import device
from titan_train.step import StepStats

from .conftest import FAST, ok, run_trainer

CPU = device.Device("cpu", "gloo", 1, "")


class FakeAccelerator:
    """A clock and a queue of kernel time: a step enqueues work and returns at once, as a
    CUDA/NPU step does; `synchronize` waits (the clock runs) until the queue is empty."""

    def __init__(self):
        self.now, self.queued = 0.0, 0.0

    def step(self, host_s: float, device_s: float) -> None:
        self.now += host_s
        self.queued += device_s

    def synchronize(self, dev=None) -> None:
        self.now += self.queued
        self.queued = 0.0


def _logger(monkeypatch, acc: FakeAccelerator, every: int, peak: float = 0.0):
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: acc.now)
    monkeypatch.setattr(device, "synchronize", acc.synchronize)
    lines = []
    logger = metrics.MetricsLogger(
        [],
        every=every,
        dims=ParallelDims.for_world(1),
        dev=CPU,
        tokens_per_step=1000,
        flops_per_token=1.0,
        peak=peak,
        last_step=100,
        total_steps=100,
        say=lambda line, **k: lines.append(line),
    )
    logger.start({})
    return logger, lines


def _stats():
    return StepStats(loss=torch.tensor(2.0), grad_norm=torch.tensor(1.0), lr=1e-3, loss_scale=None)


def test_a_save_is_in_neither_the_clock_nor_the_tokens_and_queued_work_is_not_hidden_in_it(world_of_one, monkeypatch):
    acc = FakeAccelerator()
    logger, _ = _logger(monkeypatch, acc, every=10)
    for step in range(1, 11):  # save_interval 1, log_every 10: the case that printed x6.5
        acc.step(host_s=0.1, device_s=0.9)  # 1 s of training per step, mostly queued kernels
        record = logger.log(step, _stats())
        with logger.paused():  # the save: waits for the device, then writes for 5 s
            acc.synchronize()
            acc.now += 5.0
    assert record["step"] == 10
    assert record["elapsed_s"] == pytest.approx(10.0)  # ten steps of 1 s; none of the 50 s of saving
    assert record["tokens_per_s"] == pytest.approx(10 * 1000 / 10.0)
    # the next window starts empty: no tokens carried over from before the last log
    for step in range(11, 21):
        acc.step(0.1, 0.9)
        record = logger.log(step, _stats())
    assert record["elapsed_s"] == pytest.approx(10.0) and record["tokens_per_s"] == pytest.approx(1000.0)


def test_window_unit_semantics():
    now = [0.0]
    w = metrics.ThroughputWindow(clock=lambda: now[0])
    now[0] = 2.0
    w.step(100)
    with w.pause():
        now[0] = 50.0
    now[0] = 51.0
    w.step(100)
    assert (w.tokens, w.seconds) == (200, 3.0) and w.rate() == (pytest.approx(200 / 3.0), 3.0)
    w.open()
    assert (w.tokens, w.seconds) == (0, 0.0) and w.rate() == (0.0, 0.0)


def test_an_mfu_of_100_percent_or_more_is_never_printed(world_of_one, monkeypatch):
    acc = FakeAccelerator()
    logger, lines = _logger(monkeypatch, acc, every=1, peak=400.0)  # 1000 tok/s x 1 FLOP / 400 = 250%
    acc.step(1.0, 0.0)
    record = logger.log(1, _stats())
    assert record["mfu"] is None and record["mfu_over_peak"] == pytest.approx(2.5)
    assert "250" not in lines[0] and "mfu invalid (>= 100% of peak" in lines[0]
    for value in (1.0, 2.48, 1e9):
        line = metrics.format_line(
            {
                "step": 1,
                "loss": 1.0,
                "grad_norm": 1.0,
                "lr": 1e-3,
                "tokens_per_s": 1.0,
                "tokens_per_s_per_rank": 1.0,
                "mfu": value,
                "peak_mem_gib": 1.0,
            }
        )
        assert "mfu invalid" in line and f"{value * 100:.1f}%" not in line
    assert metrics.mfu_fields(0.42) == {"mfu": 0.42}


def test_cpu_peak_memory_is_labelled_rss_and_restarts_at_the_reset():
    assert device.peak_memory_kind(CPU) == "rss"
    big = torch.ones(256, 1 << 20)  # 1 GiB, touched
    big.add_(1)
    del big
    device.reset_peak_memory(CPU)
    after = device.peak_memory_bytes(CPU)
    assert after < 1 << 30, after / 2**30  # the lifetime max RSS (the old figure) is above 1 GiB
    line = metrics.format_line(
        {
            "step": 1,
            "loss": 1.0,
            "grad_norm": 1.0,
            "lr": 1e-3,
            "tokens_per_s": 1.0,
            "tokens_per_s_per_rank": 1.0,
            "mfu": 0.1,
            "peak_mem_gib": 0.5,
            "peak_mem_kind": "rss",
        }
    )
    assert line.endswith("| rss 0.50 GiB") and "| mem " not in line


@pytest.mark.multirank
def test_real_run_slow_saves_are_excluded_and_mfu_over_peak_is_flagged(tmp_path):
    """2 ranks, save every step, rank 0's saves take 6 s each (injected), log every 4 steps."""
    # the sleep is long against the steps (the 4 take 3 s on a quiet machine, 9 at load 5) so that the
    # check tells a window with the saves in it from one without, whatever the load
    steps, sleep = 4, 6.0
    proc = ok(
        run_trainer(
            tmp_path,
            nproc=2,
            overrides=FAST
            + [
                f"training.steps={steps}",
                f"metrics.log_every={steps}",
                "checkpoint.save_interval=1",
                "checkpoint.keep_last_n=1",
                "metrics.peak_tflops=1e-9",
            ],
            env={"TITAN_TRAIN_FAULT": f"slow_save@0:0:{sleep}"},
        )
    )
    records = [json.loads(line) for line in (tmp_path / "outputs" / "llama_debug" / "metrics.jsonl").open()]
    (last,) = [r for r in records if "step" in r]
    assert last["step"] == steps
    assert last["elapsed_s"] < steps * sleep / 2, last  # the 24 s of saving are not in the window
    assert last["tokens_per_s"] * last["elapsed_s"] == pytest.approx(steps * 8 * 64)  # clock and tokens together
    assert last["mfu"] is None and last["mfu_over_peak"] > 1 and last["peak_mem_kind"] == "rss"
    line = next(line for line in proc.stdout.splitlines() if line.startswith(f"step {steps}/"))
    assert "mfu invalid" in line and "| rss " in line
