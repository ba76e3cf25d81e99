"""A run owns its checkpoint folder and its checkpoints say what they are: the folder lock,
lineage-only retention, --fresh, config comparison on resume, fallback from an unreadable
checkpoint, the NaN / inf stop and --stop-after's checkpoint. Real trainer processes (gloo)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import FAST, losses, ok, per_step, run_in_process, run_trainer, trainer_cmd, trainer_env


def ckpt_dir(wd: Path) -> Path:
    return wd / "outputs" / "llama_debug" / "checkpoints"


def steps_in(wd: Path) -> list[str]:
    folder = ckpt_dir(wd)
    names = [p.name for p in folder.iterdir() if re.fullmatch(r"step-\d+", p.name)] if folder.is_dir() else []
    return sorted(names, key=lambda n: int(n.split("-")[1]))


def fingerprint(folder: Path) -> dict[str, str]:
    """name -> sha256 of every file under `folder` (to prove it was not touched)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def lineage_of(step_dir: Path) -> str | None:
    record = step_dir / "titan-run.json"
    return json.loads(record.read_text())["lineage"] if record.is_file() else None


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


def one_line_refusal(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith("titan-train: error: "), lines
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


# ---- the folder lock ----


@pytest.mark.multirank
def test_second_run_on_a_folder_is_refused_and_the_first_finishes_unharmed(tmp_path):
    common = FAST + ["training.steps=24", "checkpoint.save_interval=8", "checkpoint.keep_last_n=0"]
    first = subprocess.Popen(
        trainer_cmd(2, common),
        cwd=tmp_path,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "outputs" / "llama_debug" / "metrics.jsonl"
    lock = ckpt_dir(tmp_path) / "run.lock"
    deadline = time.monotonic() + 240
    while not (metrics.is_file() and '"step": 1,' in metrics.read_text()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    owner = json.loads(lock.read_text())
    assert owner["pid"] == first.pid and owner["host"] == socket.gethostname()  # the launcher holds it

    second = run_trainer(tmp_path, nproc=2, overrides=common)
    line = one_line_refusal(second)
    assert "in use by another run" in line and f"pid {first.pid}" in line and socket.gethostname() in line

    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, (out[-2000:], err[-2000:])
    assert steps_in(tmp_path) == ["step-8", "step-16", "step-24"]
    assert not lock.exists()
    records = [json.loads(r) for r in metrics.read_text().splitlines()]
    assert sum(r.get("event") == "start" for r in records) == 1  # the second run never wrote here
    assert [r["step"] for r in records if "step" in r] == list(range(1, 25))
    assert "step 24/24" in (tmp_path / "outputs" / "llama_debug" / "logs" / "rank0.log").read_text()


@pytest.mark.multirank
def test_a_dead_runs_lock_is_taken_over_and_another_hosts_lock_refuses(tmp_path):
    folder = ckpt_dir(tmp_path)
    folder.mkdir(parents=True)
    lock = folder / "run.lock"
    shown = "outputs/llama_debug/checkpoints/run.lock"  # as the config names it (relative to the run's cwd)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": gone.pid, "started": time.time() - 60}))
    run = FAST + ["training.steps=2", "checkpoint.save_interval=2"]
    proc = ok(run_trainer(tmp_path, nproc=1, overrides=run))
    assert f"took over {shown}" in proc.stdout and f"pid {gone.pid}" in proc.stdout
    assert steps_in(tmp_path) == ["step-2"] and not lock.exists()

    foreign = json.dumps({"host": "node-17.example", "pid": 4242, "started": time.time()})
    lock.write_text(foreign)
    for nproc in (1, 2):  # rank 0 takes it (1 process) / the launcher takes it (2 ranks)
        line = one_line_refusal(run_trainer(tmp_path, nproc=nproc, overrides=run))
        assert "node-17.example" in line and "pid 4242" in line and f"delete {shown}" in line
        assert lock.read_text() == foreign


def test_lock_in_process_refuses_a_live_owner_and_takes_over_a_reused_pid(tmp_path):
    from titan_train.checkpoint import run_lock

    said = []
    with run_lock.RunLock(tmp_path, say=said.append):
        with pytest.raises(run_lock.FolderLocked, match=f"pid {os.getpid()}"):
            run_lock.RunLock(tmp_path).acquire()
    assert not (tmp_path / "run.lock").exists()
    # our own pid, but a start time that is not ours: the pid was reused, the owner is gone
    (tmp_path / "run.lock").write_text(
        json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": 0, "proc_start": "1"})
    )
    with run_lock.RunLock(tmp_path, say=said.append):
        assert json.loads((tmp_path / "run.lock").read_text())["proc_start"] != "1"
    assert any("took over" in s and "its pid now belongs to another process" in s for s in said), said


def test_a_signal_while_the_folder_is_prepared_releases_the_lock_and_the_folder(tmp_path, monkeypatch):
    """SIGTERM (the trainer's Terminated) or Ctrl-C between taking the run lock and the first
    step: the lock is released and the folder the run made removed, as after a refusal; only
    rank 0 gets there, so this needs no process group."""
    from types import SimpleNamespace

    from titan_train.checkpoint import run_lock

    class Terminated(BaseException):
        pass

    def interrupted(*a, **k):
        assert (folder / "run.lock").exists()
        raise Terminated

    folder = tmp_path / "checkpoints"
    monkeypatch.setattr(run_lock, "prepare_folder", interrupted)
    monkeypatch.setattr("torch.distributed.get_rank", lambda: 0)
    cfg = SimpleNamespace(checkpoint=SimpleNamespace(folder=str(folder)))
    with pytest.raises(Terminated):
        with run_lock.hold(cfg, fresh=False, saves=True, say=print):
            pass
    assert not folder.exists()


# ---- lineage: retention and fresh runs ----


@pytest.mark.multirank
def test_fresh_run_in_a_folder_with_another_runs_higher_steps_is_refused_then_moves_them_aside(tmp_path, reference_run):
    reference_run.copy(tmp_path, nproc=2, overrides=FAST + ["training.steps=6", "checkpoint.save_interval=3"])
    old = fingerprint(ckpt_dir(tmp_path))
    old_lineage = lineage_of(ckpt_dir(tmp_path) / "step-6")
    new = FAST + [
        "training.steps=4",
        "checkpoint.save_interval=1",
        "checkpoint.keep_last_n=1",
        "checkpoint.resume=false",
    ]

    line = one_line_refusal(run_trainer(tmp_path, nproc=2, overrides=new))
    assert "step-3..step-6" in line and "--fresh" in line and "checkpoint.resume = false" in line
    assert fingerprint(ckpt_dir(tmp_path)) == old

    proc = ok(run_trainer(tmp_path, nproc=2, overrides=new, extra=["--fresh"]))
    aside = [p for p in ckpt_dir(tmp_path).iterdir() if p.name.startswith("previous-")]
    assert (
        len(aside) == 1
        and (
            f"moved step-3..step-6 (2 folders; lineage {old_lineage}) to "
            f"outputs/llama_debug/checkpoints/{aside[0].name}"
        )
        in proc.stdout
    )
    assert fingerprint(aside[0]) == old  # moved, byte for byte, never deleted
    assert steps_in(tmp_path) == ["step-4"]  # keep_last_n=1 of the new run only
    new_lineage = lineage_of(ckpt_dir(tmp_path) / "step-4")
    assert new_lineage is not None and new_lineage != old_lineage

    again = ok(
        run_trainer(
            tmp_path,
            nproc=2,
            overrides=FAST + ["training.steps=5", "checkpoint.save_interval=1", "checkpoint.keep_last_n=1"],
        )
    )
    assert "resumed from outputs/llama_debug/checkpoints/step-4 (step 4)" in again.stdout
    assert fingerprint(aside[0]) == old


@pytest.mark.multirank
def test_retention_deletes_only_the_trained_lineage(tmp_path, reference_run):
    """A folder holding checkpoints of another lineage (copied in) and of an older trainer
    (no record), plus a folder that is not a checkpoint: only this lineage's are pruned."""
    other = tmp_path / "other"
    other.mkdir()
    ok(run_trainer(other, nproc=1, overrides=FAST + ["training.steps=4", "checkpoint.save_interval=2"]))
    reference_run.copy(tmp_path, nproc=2, overrides=FAST + ["training.steps=6", "checkpoint.save_interval=3"])
    folder = ckpt_dir(tmp_path)
    for name in ("step-2", "step-4"):
        shutil.copytree(ckpt_dir(other) / name, folder / name)
    (folder / "step-2" / "titan-run.json").unlink(missing_ok=True)  # as an older trainer wrote it
    (folder / "export-step-6").mkdir()
    (folder / "export-step-6" / "model.safetensors").write_bytes(b"x")
    untouched = {n: fingerprint(folder / n) for n in ("step-2", "step-4", "export-step-6")}
    trained = lineage_of(folder / "step-6")

    proc = ok(
        run_trainer(
            tmp_path,
            nproc=2,
            overrides=FAST + ["training.steps=8", "checkpoint.save_interval=1", "checkpoint.keep_last_n=1"],
        )
    )
    assert "resumed from outputs/llama_debug/checkpoints/step-6 (step 6)" in proc.stdout
    assert "2 other step-N folder(s) of other runs left untouched" in proc.stdout
    assert steps_in(tmp_path) == ["step-2", "step-4", "step-8"]
    assert trained is not None and lineage_of(folder / "step-8") == trained
    assert {n: fingerprint(folder / n) for n in untouched} == untouched


def test_prune_in_process_never_touches_other_lineages_unrecorded_or_the_step_just_written(tmp_path):
    from titan_train.checkpoint import lineage

    def make(name, lin=None, complete=True):
        d = tmp_path / name
        d.mkdir()
        if complete:
            (d / ".metadata").write_bytes(b"m")
        if lin:
            lineage.write_record(d, lineage.record(lin, 0, {}))

    for n in (1, 2, 3):
        make(f"step-{n}", "A")
    make("step-9", "B")
    make("step-10")
    make("step-5", "A", complete=False)
    make("export-step-3")
    gone = lineage.prune(tmp_path, 1, "A", tmp_path / "step-2")  # just wrote step-2 (older than step-3)
    assert sorted(p.name for p in gone) == ["step-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "export-step-3",
        "step-10",
        "step-2",
        "step-3",
        "step-5",
        "step-9",
    ]


# ---- checkpoints carry their config ----


@pytest.mark.multirank
def test_resume_with_a_changed_lr_trains_with_the_new_lr(tmp_path):
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    common = FAST + ["training.warmup_steps=0", 'training.lr_schedule="constant"', "checkpoint.save_interval=1"]
    ok(run_trainer(tmp_path, nproc=1, overrides=common + ["training.steps=3", "optimizer.lr=0.001"]))
    proc = ok(
        run_trainer(
            tmp_path, nproc=1, overrides=common + ["training.steps=5", "optimizer.lr=0.003", "training.seq_len=32"]
        )
    )
    changed = [line for line in proc.stdout.splitlines() if "optimizer/schedule changed" in line]
    assert len(changed) == 1 and "optimizer.lr 0.001 -> 0.003" in changed[0] and "training.steps 3 -> 5" in changed[0]
    data = [line for line in proc.stdout.splitlines() if "data layout changed" in line]
    assert len(data) == 1 and "training.seq_len 64 -> 32" in data[0] and "data order" in data[0]
    lrs = per_step(tmp_path, "lr")
    assert lrs[3] == pytest.approx(1e-3) and lrs[4] == pytest.approx(3e-3) and lrs[5] == pytest.approx(3e-3)

    # the lr the optimizer really used from step 4 to 5, solved from AdamW's update:
    # p5 = p4 (1 - lr wd) - lr m5 / bc1 / (sqrt(v5 / bc2) + eps)
    states = {}
    for step in (4, 5):
        dcp_to_torch_save(ckpt_dir(tmp_path) / f"step-{step}", tmp_path / f"{step}.pt")
        states[step] = torch.load(tmp_path / f"{step}.pt", weights_only=False)
    name = "layers.0.attention.wq.weight"
    p4, p5 = states[4]["model"][name].double(), states[5]["model"][name].double()
    opt = states[5]["optim"]
    m, v, t = (opt[f"state.{name}.{k}"].double() for k in ("exp_avg", "exp_avg_sq", "step"))
    beta1, beta2 = opt[f"param_groups.{name}.betas"]
    wd, eps = opt[f"param_groups.{name}.weight_decay"], opt[f"param_groups.{name}.eps"]
    update = wd * p4 + m / (1 - beta1**t) / ((v / (1 - beta2**t)).sqrt() + eps)
    used = ((p4 - p5)[update.abs() > 1e-3] / update[update.abs() > 1e-3]).median().item()
    assert used == pytest.approx(3e-3, rel=1e-3)


SAVED_AT_2 = FAST + ["training.steps=2", "checkpoint.save_interval=2"]


def another_shape(field: str, value) -> list[str]:
    return FAST + ["training.steps=4", "checkpoint.save_interval=2", f"model.{field}={value}"]


@pytest.mark.multirank
@pytest.mark.parametrize(
    "field,value,saved", [("n_layers", 4, 6), ("d_model", 128, 256), ("n_kv_heads", 8, 16), ("vocab_size", 4096, 2048)]
)
def test_resume_into_another_model_shape_is_refused_in_one_line(
    tmp_path, field, value, saved, reference_run, monkeypatch
):
    """1 process: rank 0 refuses (a real trainer process); 2 ranks: the launcher refuses before
    any rank starts, so that refusal runs in this process (its real process: the test below)."""
    reference_run.copy(tmp_path, overrides=SAVED_AT_2)
    before = fingerprint(ckpt_dir(tmp_path))
    for nproc in (1, 2):
        run = run_trainer if nproc == 1 else functools.partial(run_in_process, monkeypatch=monkeypatch)
        line = one_line_refusal(run(tmp_path, nproc=nproc, overrides=another_shape(field, value)))
        assert f"model.{field} = {saved}, the config says {value}" in line, line
    assert fingerprint(ckpt_dir(tmp_path)) == before and not (ckpt_dir(tmp_path) / "run.lock").exists()


@pytest.mark.multirank
def test_the_launcher_refuses_another_model_shape_in_a_real_process(tmp_path, reference_run):
    """The 2-rank refusal above, end to end: `titan-train run --nproc 2` exits 2 in one line."""
    reference_run.copy(tmp_path, overrides=SAVED_AT_2)
    before = fingerprint(ckpt_dir(tmp_path))
    line = one_line_refusal(run_trainer(tmp_path, nproc=2, overrides=another_shape("n_layers", 4)))
    assert "model.n_layers = 6, the config says 4" in line, line
    assert fingerprint(ckpt_dir(tmp_path)) == before and not (ckpt_dir(tmp_path) / "run.lock").exists()


def test_a_changed_swiglu_width_names_the_config_fields_that_set_it():
    """ffn_dim is derived, not a config field: `set model.ffn_dim = 256` was an impossible fix."""
    from titan_train.checkpoint.resume_compare import ShapeChanged, compare

    base = {"d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 512, "multiple_of": 256}
    saved = {"model": dict(base)}
    with pytest.raises(ShapeChanged) as e:
        compare(saved, {"model": dict(base, multiple_of=64)}, "step-4")
    assert "SwiGLU hidden width of 256, the config gives 192" in str(e.value)
    assert "set model.multiple_of = 256" in str(e.value) and "model.ffn_dim" not in str(e.value)
    with pytest.raises(ShapeChanged) as e:
        compare(saved, {"model": dict(base, ffn_dim_multiplier=2.0)}, "step-4")
    assert "remove model.ffn_dim_multiplier" in str(e.value)


def test_a_changed_tokenizer_is_not_called_a_data_order_change():
    """Same vocab_size, other tokenizer: the rows keep their shapes but not their meaning."""
    from titan_train.checkpoint.resume_compare import compare

    saved = {"data": {"dataset": "a.txt", "tokenizer": "bpe/tokenizer.json"}, "training": {"seq_len": 32}}
    lines = compare(
        saved, {"data": {"dataset": "a.txt", "tokenizer": "byte"}, "training": {"seq_len": 32}}, "step-4"
    ).lines()
    assert len(lines) == 1 and "warning: data.tokenizer changed" in lines[0], lines
    assert "set data.tokenizer = 'bpe/tokenizer.json'" in lines[0] and "data order" not in lines[0]


@pytest.mark.multirank
def test_checkpoint_without_a_record_still_refuses_another_shape(tmp_path):
    """An older trainer's checkpoint (no titan-run.json): the parameter names and shapes in
    DCP's index are compared instead; fewer layers used to resume silently, dropping some."""
    ok(run_trainer(tmp_path, nproc=2, overrides=FAST + ["training.steps=2", "checkpoint.save_interval=2"]))
    (ckpt_dir(tmp_path) / "step-2" / "titan-run.json").unlink(missing_ok=True)
    proc = run_trainer(tmp_path, nproc=1, overrides=FAST + ["training.steps=4", "model.n_layers=4"])
    line = one_line_refusal(proc)
    assert "step-2 holds another model shape" in line and "layers.4." in line


# ---- unreadable newest checkpoint ----


def _truncate_shard(step: Path) -> str:
    shard = sorted(step.glob("*.distcp"))[0]
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    return f"shard {shard.name} is truncated"


def _delete_shard(step: Path) -> str:
    shard = sorted(step.glob("*.distcp"))[-1]
    shard.unlink()
    return f"shard {shard.name} is missing"


def _delete_metadata(step: Path) -> str:
    (step / ".metadata").unlink()
    return "no .metadata"


def _garble_metadata(step: Path) -> str:
    meta = step / ".metadata"
    meta.write_bytes(meta.read_bytes()[:100])
    return ".metadata is unreadable"


@pytest.mark.multirank
@pytest.mark.parametrize("damage", [_truncate_shard, _delete_shard, _delete_metadata, _garble_metadata])
def test_unreadable_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage, reference_run):
    common = FAST + ["training.steps=4", "checkpoint.save_interval=2"]
    reference_run.copy(tmp_path, nproc=2, overrides=common)  # one run for the four damages
    want = losses(tmp_path)
    why = damage(ckpt_dir(tmp_path) / "step-4")
    proc = ok(run_trainer(tmp_path, nproc=2, overrides=common))
    notes = [line for line in proc.stdout.splitlines() if "is unreadable" in line]
    assert len(notes) == 1 and "step-4 is unreadable: " + why in notes[0] and "step-4.unreadable" in notes[0]
    assert "resumed from outputs/llama_debug/checkpoints/step-2 (step 2)" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    got = losses(tmp_path)
    assert got[3] == pytest.approx(want[3], abs=1e-6) and got[4] == pytest.approx(want[4], abs=1e-6)
    assert steps_in(tmp_path) == ["step-2", "step-4"] and (ckpt_dir(tmp_path) / "step-4.unreadable").is_dir()


# ---- NaN / inf ----


@pytest.mark.multirank
def test_nan_from_an_absurd_lr_stops_at_that_step_and_keeps_the_last_finite_checkpoint(tmp_path):
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    absurd = FAST + [
        "training.steps=12",
        "optimizer.lr=1e4",
        "training.warmup_steps=0",
        'training.lr_schedule="constant"',
        "checkpoint.keep_last_n=1",
    ]
    proc = run_trainer(tmp_path, nproc=2, overrides=absurd + ["checkpoint.save_interval=2"])
    assert proc.returncode == 3, (proc.stdout[-2000:], proc.stderr[-2000:])
    loss, norm = losses(tmp_path), per_step(tmp_path, "grad_norm")
    bad = min(s for s in loss if not (math.isfinite(loss[s]) and math.isfinite(norm[s])))
    assert bad > 2 and max(loss) == bad  # logged every step, stopped at it
    assert f"non-finite loss or grad norm at step {bad}: training stopped" in proc.stderr
    err = proc.stderr.strip().splitlines()  # an agreed stop on every rank: one line, not a rank-failure summary
    assert len(err) == 1 and err[0].startswith("titan-train: error: non-finite"), proc.stderr
    last_good = 2 * ((bad - 1) // 2)
    assert steps_in(tmp_path) == [f"step-{last_good}"]
    dcp_to_torch_save(ckpt_dir(tmp_path) / f"step-{last_good}", tmp_path / "good.pt")
    weights = torch.load(tmp_path / "good.pt", weights_only=False)["model"]
    assert all(torch.isfinite(w).all() for w in weights.values())

    # checked only at log steps and before saves: the device-side flag still names the first bad step
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    proc = run_trainer(quiet, nproc=2, overrides=absurd + ["checkpoint.save_interval=0", "metrics.log_every=100"])
    assert proc.returncode == 3 and f"at step {bad}: training stopped" in proc.stderr
    assert steps_in(quiet) == []


@pytest.mark.multirank
def test_fp16_run_whose_loss_scale_collapses_stops_instead_of_halving_in_silence(tmp_path):
    tiny = [
        "training.seq_len=32",
        "training.batch_size=2",
        "model.n_layers=1",
        "model.d_model=64",
        "model.n_heads=4",
        "model.n_kv_heads=4",
        "model.multiple_of=32",
        "training.steps=40",
        "optimizer.lr=1e4",
        "training.warmup_steps=0",
        'training.lr_schedule="constant"',
        'training.mixed_precision="fp16"',
        "checkpoint.save_interval=4",
        "checkpoint.keep_last_n=0",
        "metrics.log_every=1",
    ]
    proc = run_trainer(tmp_path, nproc=1, overrides=tiny)
    assert proc.returncode == 3, (proc.stdout[-2000:], proc.stderr[-2000:])
    scale = per_step(tmp_path, "loss_scale")
    stop = max(scale)
    assert scale[stop] == 1.0 and scale[stop - 1] == 2.0 and stop < 40  # stopped at the first overflow at scale 1
    assert "fp16 loss scale collapsed" in proc.stderr and f"scale 1) at step {stop}:" in proc.stderr
    assert all(int(n.split("-")[1]) < stop for n in steps_in(tmp_path))


def test_guard_refuses_to_save_weights_that_the_last_update_overflowed():
    """A step's loss and grad norm are finite, its update overflows the weights: the next
    step's loss would show it, but the save of this step comes first and must not happen."""
    import torch

    from titan_train.runtime.finite_guard import FiniteGuard, NonFinite
    from titan_train.step import StepStats

    weights = [torch.ones(4), torch.ones(3)]
    guard = FiniteGuard(torch.device("cpu"), every=50, last_step=100, params=lambda: weights)
    guard.observe(1, StepStats(torch.tensor(1.0), torch.tensor(1.0), 1e-3, None))
    guard.before_save(1)
    assert guard.last_saved == 1
    guard.observe(2, StepStats(torch.tensor(1.0), torch.tensor(1.0), 1e-3, None))
    weights[1][2] = float("inf")
    with pytest.raises(NonFinite, match="non-finite weights after the update at step 2:.*step 1, is from before"):
        guard.before_save(2)
    assert guard.last_saved == 1


def test_guard_in_process_fp16_collapse_and_the_first_bad_step():
    import torch

    from titan_train.runtime.finite_guard import SKIP_LIMIT, FiniteGuard, NonFinite
    from titan_train.step import StepStats

    cpu = torch.device("cpu")
    guard = FiniteGuard(cpu, every=10, last_step=100)
    for step in range(1, 10):  # NaN at step 3, noticed at the log step 10 with step 3 named
        bad = step == 3
        guard.observe(step, StepStats(torch.tensor(float("nan") if bad else 1.0), torch.tensor(1.0), 1e-3, None))
    with pytest.raises(NonFinite, match="at step 3:"):
        guard.observe(10, StepStats(torch.tensor(1.0), torch.tensor(1.0), 1e-3, None))

    guard = FiniteGuard(cpu, every=1, last_step=100)
    inf = torch.tensor(float("inf"))
    for step in range(1, 6):  # fp16 overflow steps are skipped by the scaler: not a stop
        guard.observe(step, StepStats(torch.tensor(2.0), inf, 1e-3, 2.0 ** (16 - step), skipped=True))
    guard.observe(6, StepStats(torch.tensor(2.0), torch.tensor(1.0), 1e-3, 2.0**11))
    with pytest.raises(NonFinite, match=f"loss scale collapsed \\({SKIP_LIMIT} overflow steps in a row"):
        for step in range(7, 7 + SKIP_LIMIT):
            guard.observe(step, StepStats(torch.tensor(2.0), inf, 1e-3, 2.0**11, skipped=True))
    guard = FiniteGuard(cpu, every=1, last_step=100)
    with pytest.raises(NonFinite, match="scale 1\\)"):  # nothing left to halve
        guard.observe(1, StepStats(torch.tensor(2.0), inf, 1e-3, 1.0, skipped=True))


# ---- --stop-after ----


@pytest.mark.multirank
def test_stop_after_saves_its_step_even_with_save_interval_0(tmp_path):
    common = FAST + ["training.steps=6", "checkpoint.save_interval=0"]
    ok(run_trainer(tmp_path, nproc=1, overrides=common))
    assert not ckpt_dir(tmp_path).exists()  # no checkpointing asked: no folder left behind
    ok(run_trainer(tmp_path, nproc=2, overrides=common, extra=["--stop-after", "2"]))
    assert steps_in(tmp_path) == ["step-2"]
    proc = ok(run_trainer(tmp_path, nproc=2, overrides=common, extra=["--stop-after", "2"]))
    assert "resumed from outputs/llama_debug/checkpoints/step-2 (step 2)" in proc.stdout
    assert steps_in(tmp_path) == ["step-2", "step-4"]
