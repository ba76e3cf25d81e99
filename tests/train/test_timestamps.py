"""Wall-clock time where events are read back: every metrics.jsonl record's "time" (UTC,
ISO-8601) and the UTC stamp on the trainer's own lines in rank logs (tracebacks and library
output stay as printed, for diagnose --log); TensorBoard under torchtitan's tag names."""

from __future__ import annotations

import io
import json
import os
import re
import threading
from datetime import datetime, timedelta, timezone

from titan_train.components import metrics
from titan_train.runtime import launch

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _parse(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")


def test_every_metrics_record_carries_the_utc_time(tmp_path):
    sink = metrics.MetricsFile(tmp_path / "metrics.jsonl")
    sink.write({"event": "start"})
    sink.write({"step": 1, "loss": 2.0})
    sink.close()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    now = datetime.now(timezone.utc)
    for rec in records:
        assert ISO.match(rec["time"]), rec
        assert abs(_parse(rec["time"]) - now) < timedelta(seconds=60)
    assert records[1] == {"step": 1, "loss": 2.0, "time": records[1]["time"]}


def test_rank_log_stamps_the_trainers_lines_only_and_echoes_them_as_printed():
    read, write = os.pipe()
    lines = [
        b"[titan-train] llama_debug: 5.0M params\n",
        b"step 1/4 (25%) | loss 8.1\n",
        b"Traceback (most recent call last):\n",
        b'  File "x.py", line 1\n',
        b"RuntimeError: boom\n",
        b"titan-train: error: something\n",
    ]
    os.write(write, b"".join(lines))
    os.close(write)
    log, console = io.BytesIO(), io.StringIO()
    with os.fdopen(read, "rb") as pipe:
        t = threading.Thread(target=launch._copy, args=(pipe, log, threading.Lock(), console))
        t.start()
        t.join(10)
    got = log.getvalue().decode().splitlines()
    assert console.getvalue() == b"".join(lines).decode()  # the console shows the lines as printed
    for i in (0, 1, 5):
        stamp, _, rest = got[i].partition(" ")
        assert ISO.match(stamp) and rest == lines[i].decode().rstrip("\n"), got[i]
    assert got[2:5] == ["Traceback (most recent call last):", '  File "x.py", line 1', "RuntimeError: boom"]
    # the launcher's own reading of the log (its failure summary) sees through the stamp
    assert launch.last_error_line("\n".join(got[:2] + got[5:]), 2) == "titan-train: error: something"
    assert launch.last_error_line("\n".join(got), 1) == "RuntimeError: boom"


def test_tensorboard_tags_are_torchtitans():
    record = {
        "step": 3,
        "loss": 2.5,
        "grad_norm": 1.0,
        "lr": 1e-3,
        "tokens_per_s": 800.0,
        "tokens_per_s_per_rank": 400.0,
        "mfu": 0.25,
        "peak_mem_gib": 3.0,
        "peak_mem_kind": "tensors",
        "elapsed_s": 1.5,
        "time": "2026-12-02T04:26:35.123Z",
    }
    assert metrics.tb_scalars(record) == {
        "loss_metrics/global_avg_loss": 2.5,
        "grad_norm": 1.0,
        "lr": 1e-3,
        "tokens_per_s": 800.0,
        "throughput(tps)": 400.0,
        "mfu(%)": 25.0,
        "memory/max_active(GiB)": 3.0,
        "elapsed_s": 1.5,
    }
    assert metrics.tb_scalars({"step": 1, "peak_mem_gib": 0.5, "peak_mem_kind": "rss"}) == {"peak_mem_gib": 0.5}
    assert metrics.tb_scalars({"step": 5, "validation_loss": 2.0}) == {"validation_metrics/loss": 2.0}
