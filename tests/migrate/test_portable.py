"""`migrate --target portable`: the fixtures that show it (X.portable.out.* next to X.out.*),
the mapping table checked against the installed torch, and the rewritten scripts run on
this CPU-only torch (torch.accelerator.current_accelerator() is None here)."""

from __future__ import annotations

import inspect
import os
import socket
import subprocess
import sys
import warnings

import pytest
import torch

from titan_doctor.findings import Status
from titan_doctor.migrate import command
from titan_doctor.migrate.rules import load_rules, portable
from titan_doctor.migrate.rules.kinds.name_rules import Rename, _check_rename
from titan_doctor.migrate.rules.words import TARGETS
from titan_doctor.migrate.text.lines import migrate_text

from .helpers import FIXTURES, PORTABLE, expected_paths, migrate_fixture, portable_inputs, render, run

CASES = portable_inputs()
IDS = [str(p.relative_to(FIXTURES)) for p in CASES]
TABLE = portable.table()
SCRIPTS = FIXTURES / "portable"


def _resolve(qname: str):
    obj = torch
    for part in qname.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def test_there_are_portable_fixtures_of_each_class():
    names = {p.name for p in CASES}
    assert {
        "train_script.in.py",
        "ddp_script.in.py",
        "amp_positional.in.py",
        "device_utils.in.py",
        "cuda_only.in.py",
    } <= names


@pytest.mark.parametrize("src", CASES, ids=IDS)
def test_portable_output_and_findings(src):
    out_path, findings_path = expected_paths(src, PORTABLE)
    new, findings = migrate_fixture(src, PORTABLE)
    assert new == out_path.read_bytes(), f"output differs from {out_path.name}"
    assert render(findings) == findings_path.read_text()
    for word in (b"torch_npu", b"torch.npu"):  # the portable target never adds either
        assert new.count(word) == src.read_bytes().count(word)


@pytest.mark.parametrize("src", CASES, ids=IDS)
def test_portable_second_run_changes_nothing(src, tmp_path):
    out_path, _ = expected_paths(src, PORTABLE)
    again = tmp_path / src.name.replace(".in.", ".")
    again.write_bytes(out_path.read_bytes())
    new, findings = migrate_fixture(again, PORTABLE)
    assert new == out_path.read_bytes()
    assert not [f for f in findings if f.status is Status.FIXED]


@pytest.mark.parametrize("src", CASES, ids=IDS)
def test_portable_output_compiles(src):
    out_path, _ = expected_paths(src, PORTABLE)
    compile(out_path.read_bytes(), str(out_path), "exec")


def test_multi_backend_module_is_unchanged_under_both_targets():
    src = SCRIPTS / "device_utils.in.py"
    for target in TARGETS:
        new, findings = migrate_fixture(src, target)
        assert new == src.read_bytes() and findings == [], target


def test_portable_codes_are_shown_by_fixtures():
    shown = {line.split()[1] for p in CASES for line in expected_paths(p, PORTABLE)[1].read_text().splitlines()}
    assert {portable.ACCELERATOR_CODE, portable.CLASS_CODE} | set(portable.REWRITTEN) <= shown


# -- the table against the installed torch ------------------------------------------------
@pytest.mark.parametrize("old,new", sorted(portable.accelerator_names(TABLE).items()))
def test_every_accelerator_row_names_functions_torch_has(old, new):
    cuda_fn, acc_fn = _resolve(old), _resolve(new)
    assert callable(cuda_fn) and callable(acc_fn)
    assert new.startswith("torch.accelerator.") and new.rsplit(".", 1)[1] in dir(torch.accelerator)
    # the portable call passes what the CUDA one was given, positionally: never more
    # parameters, and none keyword-only
    acc = list(inspect.signature(acc_fn).parameters.values())
    assert len(acc) <= len(inspect.signature(cuda_fn).parameters)
    assert all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in acc)


@pytest.mark.parametrize("row", TABLE.classes, ids=[r["old"] for r in TABLE.classes])
def test_every_device_class_row_names_its_parameters_as_torch_has_them(row):
    old = [n for n in inspect.signature(_resolve(row["old"])).parameters if n != "self"]
    assert row["params"] == old[: len(row["params"])]  # positional arguments go by these names
    # the new class takes them by those names, with the device (here: cpu); each with the
    # old class's default, so nothing but the names is tested
    defaults = {p.name: p.default for p in inspect.signature(_resolve(row["old"])).parameters.values()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU autocast warns about float16
        _resolve(row["new"])(**{row["keyword"]: "cpu"}, **{n: defaults[n] for n in row["params"]})
    assert row["code"] in portable.REWRITTEN


@pytest.mark.parametrize("name", [n for row in TABLE.kept for n in row["names"]])
def test_every_kept_name_is_torch_cudas_and_torch_npus_but_not_the_cpu_modules(name):
    rs = load_rules(target=PORTABLE)
    assert callable(getattr(torch.cuda, name)) and name in load_rules().npu_names
    assert not hasattr(torch.get_device_module("cpu"), name)  # why it is not rewritten
    rule = rs.name_rule(f"torch.cuda.{name}")[0]
    assert rule.kernel and rule.code == "NPU102" and "<name>" not in rule.fix


def test_the_expressions_resolve_to_cpu_and_gloo_here():
    device = eval(TABLE.device.format(torch="torch"), {"torch": torch})  # noqa: S307 - our own table
    assert device == "cpu" and torch.accelerator.current_accelerator(check_available=True) is None
    backend = eval(TABLE.backend.format(torch="torch", device=TABLE.device.format(torch="torch")), {"torch": torch})  # noqa: S307
    assert backend == "gloo"


def test_the_overlay_rules_pass_the_rename_checks():
    rules = portable.overlay([], TABLE)
    renames = [r for r in rules if isinstance(r, Rename)]
    assert len(renames) == len(portable.accelerator_names(TABLE)) + len(TABLE.classes)
    for r in renames:
        assert _check_rename(r) == [], r.old


def test_the_npu_target_is_untouched_by_the_table():
    rs = load_rules()
    assert rs.target == TARGETS[0] and rs.report_only == {} and rs.portable_exprs == {}
    assert rs.name_rule("torch.cuda.synchronize")[0].new == "torch.npu"


# -- the CLI --------------------------------------------------------------------------------
def test_the_command_spells_the_targets_of_words():
    assert command.TARGETS == TARGETS


def test_help_explains_both_targets():
    r = run("--help")
    assert r.exit_code == 0
    assert "--target [npu|portable]" in r.output and "torch.accelerator" in r.output


def test_cli_portable_rewrites_without_torch_npu(tmp_path):
    f = tmp_path / "t.py"
    f.write_text(
        'import torch\n\nif __name__ == "__main__":\n    torch.cuda.synchronize()\n    x = torch.ones(1).cuda()\n'
    )
    r = run("--target", "portable", "--diff", f)
    assert r.exit_code == 1, r.output
    assert "+    torch.accelerator.synchronize()" in r.output
    assert "torch_npu" not in r.output.split("files")[0]
    npu = run("--diff", f)
    assert "+import torch_npu" in npu.output and "+    torch.npu.synchronize()" in npu.output


def test_cli_refuses_an_unknown_target(tmp_path):
    r = run("--target", "rocm", tmp_path)
    assert r.exit_code == 2 and "rocm" in r.output


def test_script_lines_are_reported_not_rewritten():
    line = "export NCCL_DEBUG=INFO\n"
    new, findings = migrate_text(line.encode(), load_rules(target=PORTABLE), "run.sh")
    assert new == line.encode()
    assert [(f.code, f.status) for f in findings] == [("NPU301", Status.MANUAL)]
    assert "not rewritten, " + portable.REASON in findings[0].message


# -- the rewritten scripts run on this CPU-only torch ---------------------------------------
def _python(script, cwd, env=None, *args):
    p = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_portable_training_script_runs_on_cpu(tmp_path):
    out = _python(SCRIPTS / "train_script.portable.out.py", tmp_path, None, "--steps", "2")
    assert out.count("step ") == 2 and "peak 0.0 MiB" in out and (tmp_path / "model.pt").exists()


def test_portable_amp_module_runs_on_cpu():
    code = (SCRIPTS / "amp_positional.portable.out.py").read_text()
    space: dict = {}
    exec(compile(code, "amp_positional.portable.out.py", "exec"), space)  # noqa: S102 - our fixture
    assert space["scaler"]._device == "cpu" and not space["scaler"].is_enabled()  # no accelerator here
    assert space["forward"](torch.nn.Linear(2, 2), torch.ones(1, 2)).dtype == torch.bfloat16


def test_portable_ddp_script_runs_on_cpu_with_gloo(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    out = _python(SCRIPTS / "ddp_script.portable.out.py", tmp_path, env)
    assert "world 1 rank 0 backend gloo" in out
