"""Metrics for operating a run: TensorBoard events with the fields of metrics.jsonl, the
`plot` command's PNG, and the progress / ETA on the rank-0 line."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from titan_train.components import metrics

from .conftest import FAST, REPO, trainer_env


@pytest.fixture(scope="module")
def real_run(reference_run) -> Path:
    """The run folder of a real 1-rank, 4-step trainer run (the session's shared one: read only)."""
    return reference_run(overrides=FAST + ["training.steps=4"]) / "outputs" / "llama_debug"


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.multirank
def test_tensorboard_events_carry_every_metrics_field(real_run, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = _records(real_run)
    sink = metrics.TensorBoardSink(tmp_path / "tb")
    for rec in records:
        sink.write(rec)
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    steps = [r for r in records if "step" in r]
    numeric = {k for r in steps for k, v in r.items() if k != "step" and isinstance(v, (int, float))}
    assert {"loss", "grad_norm", "lr", "tokens_per_s", "peak_mem_gib"} <= numeric
    # a step whose clock says >= 100% of peak keeps its figure as mfu_over_peak, never as mfu
    assert numeric & {"mfu", "mfu_over_peak"}
    # every numeric field, under torchtitan's tag where it has one (a CPU's RSS keeps its name)
    assert set(acc.Tags()["scalars"]) == {metrics.TB_TAGS.get(k, k) for k in numeric}
    for key, tag in (("loss", "loss_metrics/global_avg_loss"), ("lr", "lr"), ("tokens_per_s", "tokens_per_s")):
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert got == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in steps]
    for key, tag, scale in (("mfu", "mfu(%)", 100.0), ("mfu_over_peak", "mfu_over_peak", 1.0)):
        want = [(r["step"], pytest.approx(scale * r[key], rel=1e-6)) for r in steps if r.get(key) is not None]
        got = [(e.step, e.value) for e in acc.Scalars(tag)] if want else []
        assert got == want
    assert acc.Tags()["tensors"] == ["start/text_summary"]  # the start record (config) as text
    text = acc.Tensors("start/text_summary")[0].tensor_proto.string_val[0].decode()
    assert json.loads(text.strip("`\n"))["config"]["model"]["d_model"] == 256


def test_tb_scalars_put_a_figure_over_peak_apart_from_mfu():
    rec = {"step": 3, "loss": 2.0, "mfu": 0.25, "peak_mem_gib": 1.5, "peak_mem_kind": "tensors"}
    assert metrics.tb_scalars(rec) == {
        "loss_metrics/global_avg_loss": 2.0,
        "mfu(%)": 25.0,
        "memory/max_active(GiB)": 1.5,
    }
    over = {"step": 3, **metrics.mfu_fields(2.5), "peak_mem_gib": 1.5, "peak_mem_kind": "rss"}
    assert metrics.tb_scalars(over) == {"mfu_over_peak": 2.5, "peak_mem_gib": 1.5}


def test_resumed_tensorboard_run_purges_steps_after_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = metrics.TensorBoardSink(tmp_path)
    for step in (1, 2, 3, 4):  # crashed after logging step 4, last checkpoint at 2
        first.write({"step": step, "loss": 10.0 - step})
    first.close()
    second = metrics.TensorBoardSink(tmp_path, resumed_from=2)
    for step in (3, 4, 5):
        second.write({"step": step, "loss": 100.0 + step})
    second.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("loss_metrics/global_avg_loss")]  # torchtitan's tag for the loss
    assert got == [(1, 9.0), (2, 8.0), (3, 103.0), (4, 104.0), (5, 105.0)]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@pytest.mark.multirank
def test_plot_draws_one_line_per_run(real_run, tmp_path):
    pytest.importorskip("matplotlib")
    other = tmp_path / "other_run"
    other.mkdir()
    lines = [json.loads(x) for x in (real_run / "metrics.jsonl").read_text().splitlines()]
    (other / "metrics.jsonl").write_text(
        "\n".join(json.dumps({**r, "loss": r["loss"] + 1} if "loss" in r else r) for r in lines) + "\n"
    )
    out = tmp_path / "cmp.png"
    proc = subprocess.run(
        [sys.executable, "-m", "titan_train.cli", "plot", str(real_run), str(other), "-o", str(out)],
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {out} (2 run(s))"
    assert _png_size(out) == (1200, 800)
    assert 20_000 < out.stat().st_size < 2_000_000
    from PIL import Image

    colors = {c for _, c in Image.open(out).convert("RGB").getcolors(maxcolors=1 << 20)}
    assert (0x1F, 0x77, 0xB4) in colors and (0xFF, 0x7F, 0x0E) in colors  # matplotlib's first two line colours


def test_plot_errors_are_one_line(tmp_path):
    env = trainer_env()
    proc = subprocess.run(
        [sys.executable, "-m", "titan_train.cli", "plot", str(tmp_path / "nope")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == f"titan-train: error: {tmp_path / 'nope'}: no metrics.jsonl (give a run folder, "
        "e.g. outputs/llama_debug, or the file itself)"
    )
    (tmp_path / "metrics.jsonl").write_text('{"event": "start"}\n')
    code = (
        "import sys; sys.modules['matplotlib'] = None; from titan_train.cli import main; "
        f"main(['plot', {str(tmp_path)!r}])"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "titan-train: error: titan-train plot needs matplotlib: pip install 'titan-npu[plot]'"


@pytest.mark.multirank
def test_tensorboard_missing_is_a_one_line_setup_error(tmp_path):
    code = (
        "import sys; sys.modules['tensorboard'] = None; from titan_train.cli import main; "
        f"main(['run', '--config', {str(REPO / 'configs' / 'llama_debug.toml')!r}, '--nproc', '2', "
        "'--set', 'metrics.tensorboard=true'])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=trainer_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(
        "titan-train: error: metrics.tensorboard = true needs tensorboard: pip install 'titan-npu[tb]'"
    )


def test_progress_and_eta_on_the_rank0_line():
    now = [100.0]
    eta = metrics.Eta(40, clock=lambda: now[0])
    record = {
        "step": 10,
        "loss": 2.0,
        "grad_norm": 1.0,
        "lr": 1e-3,
        "tokens_per_s": 1000.0,
        "tokens_per_s_per_rank": 500.0,
        "mfu": 0.1,
        "peak_mem_gib": 1.0,
    }
    assert metrics.format_line(record, eta).startswith("step 10/40 (25%) | loss 2.0000")
    assert metrics.format_line(record, eta).endswith("| eta ?")
    now[0] = 110.0  # 10 more steps in 10 s -> 1 s/step, 20 steps left
    line = metrics.format_line({**record, "step": 20}, eta)
    assert line.startswith("step 20/40 (50%)") and line.endswith("| eta 20s")
    assert [metrics.format_duration(s) for s in (5, 65, 3725, 180000)] == ["5s", "1m05s", "1h02m", "2d02h"]
    assert metrics.format_line(record).startswith("step    10 | loss")  # without an Eta: unchanged
