"""The command as users run it: exit codes, --help, --list-checks, --check, JSON, and
real broken interpreters (torch_npu without CANN; no torch at all)."""

import re

from titan_doctor.diagnose import registry

from .conftest import clean_env, make_cann, run_cli, run_json


def test_help_documents_checks_options_and_exit_codes():
    p = run_cli("--help")
    assert p.returncode == 0
    for text in (
        "Exit codes: 0 all good",
        "1 problems found",
        "2 usage error",
        "--comm",
        "--log",
        "--list-checks",
        "--check ID",
        "--strict",
        "--format",
        "versions.*",
        "dist.*",
    ):
        assert text in p.stdout, text


def test_list_checks_lists_every_id():
    p = run_cli("--list-checks")
    assert p.returncode == 0
    assert [ln.split()[0] for ln in p.stdout.splitlines()] == [c.id for c in registry.CHECKS]
    assert "(slow: --comm)" in p.stdout


def test_unknown_check_is_a_usage_error():
    p = run_cli("--check", "nope")
    assert p.returncode == 2 and "unknown check id(s): nope" in p.stderr and "Traceback" not in p.stderr


def test_default_run_on_a_clean_host_is_all_good(tmp_path):
    rc, rows = run_json("--ascend-root", str(tmp_path))
    assert rc == 0
    assert set(rows) >= {"versions.torch", "ascend.cann", "devices.npu", "dist.master.port", "dist.shm"}
    assert not any(k.startswith(("comm", "log")) for k in rows)
    for row in rows.values():
        assert set(row) >= {"id", "status", "title", "detail", "fix", "data"}
    p = run_cli("--ascend-root", str(tmp_path))
    assert "[ok] torch " in p.stdout and "✓" not in p.stdout  # not a terminal: ASCII marks
    assert re.fullmatch(r"\d+ checks: \d+ ok, .*0 problems.*", p.stdout.rstrip().splitlines()[-1])


def test_warnings_fail_only_with_strict(tmp_path):
    env = clean_env(NCCL_DEBUG="INFO")
    make_cann(tmp_path, "8.1.RC1")  # an Ascend host: leftovers become warnings
    args = ("--ascend-root", str(tmp_path), "--check", "dist.leftovers")
    rc, rows = run_json(*args, env=env)
    assert rc == 0 and rows["dist.leftovers"]["status"] == "warn"
    assert "ASCEND_GLOBAL_LOG_LEVEL" in rows["dist.leftovers"]["fix"]
    rc, _ = run_json(*args, "--strict", env=env)
    assert rc == 1


def test_check_family_and_ascend_root_tree(tmp_path):
    make_cann(tmp_path, "7.0.0")
    rc, rows = run_json("--ascend-root", str(tmp_path), "--check", "ascend")
    assert rc == 1 and set(rows) == {"ascend.cann", "ascend.env", "ascend.driver"}
    assert rows["ascend.cann"]["title"].startswith("CANN 7.0.0 is older than 8.0")
    assert rows["ascend.env"]["fix"].startswith(f"source {tmp_path}/ascend-toolkit/set_env.sh")


def test_broken_torch_npu_without_cann(npu_venv, tmp_path):
    """torch==2.13.0 + torch-npu==2.13.0 and no CANN: named, exit 1, no traceback."""
    p = run_cli("--python", str(npu_venv), "--ascend-root", str(tmp_path))
    assert p.returncode == 1
    assert "Traceback" not in p.stdout + p.stderr
    assert "[x] torch_npu 2.13.0 fails to import: CANN missing / set_env.sh not sourced" in p.stdout
    assert "libhccl.so" in p.stdout
    # plain `import torch` dies too; reported after its cause
    assert p.stdout.index("CANN missing") < p.stdout.index("Failed to load the backend extension: torch_npu")
    assert f"[x] CANN toolkit not found (looked in {tmp_path} and $ASCEND_HOME_PATH)" in p.stdout


def test_broken_torch_npu_names_the_set_env_script_found(npu_venv, tmp_path):
    make_cann(tmp_path, "8.5.0")
    rc, rows = run_json("--python", str(npu_venv), "--ascend-root", str(tmp_path), "--check", "versions")
    assert rc == 1
    row = rows["versions.torch_npu"]
    assert row["data"]["cause"] == "import.cann_missing"
    assert row["fix"] == f"source {tmp_path}/ascend-toolkit/set_env.sh"


def test_interpreter_without_torch(notorch_venv, tmp_path):
    rc, rows = run_json("--python", str(notorch_venv), "--ascend-root", str(tmp_path))
    assert rc == 1
    assert rows["versions.torch"]["status"] == "fail" and "not installed" in rows["versions.torch"]["title"]
    assert "torch==2.13.0" in rows["versions.torch"]["fix"]
    assert rows["versions.fsdp2"]["status"] == "skip" and rows["devices.accelerator"]["status"] == "skip"


def test_interpreter_that_does_not_exist(tmp_path):
    rc, rows = run_json("--python", str(tmp_path / "nope"), "--check", "versions.torch")
    assert rc == 1 and "probe failed: cannot run" in rows["versions.torch"]["title"]


def test_cli_never_imports_torch_or_libcst(tmp_path):
    """`import torch` alone costs ~1.6 s; the doctor probes it in a subprocess instead."""
    code = (
        "import sys; from click.testing import CliRunner; from titan_doctor.cli import main; "
        f"r = CliRunner().invoke(main, ['diagnose', '--ascend-root', {str(tmp_path)!r}]); "
        "print(r.exit_code, 'torch' in sys.modules, 'libcst' in sys.modules)"
    )
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["0", "False", "False"], p.stderr


def test_torch_whose_import_fails(tmp_path):
    """A torch that dies at import (a CUDA build missing its runtime) is reported, not raised."""
    site = tmp_path / "site"
    (site / "torch" / "distributed" / "fsdp").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.6.0+cu124'\ncuda: Optional[str] = '12.4'\n"
    )
    (site / "torch" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')\n"
    )
    (site / "torch" / "distributed" / "fsdp" / "__init__.py").write_text("__all__ = ['fully_shard']\n")
    env = clean_env(PYTHONPATH=f"{site}:{clean_env()['PYTHONPATH']}")
    rc, rows = run_json("--check", "versions", env=env)
    assert rc == 1
    t = rows["versions.torch"]
    assert t["status"] == "fail" and t["title"].startswith("torch 2.6.0+cu124 fails to import: ImportError: libcudart")
    assert t["data"]["build"] == "cuda 12.4"
    assert rows["versions.fsdp2"]["status"] == "ok"  # read from the file, no import needed


def test_every_finding_code_belongs_to_its_check(tmp_path):
    """JSON consumers map a row to its check: id == check id or starts with it + '.'."""
    log = tmp_path / "x.log"
    log.write_text("RuntimeError: Distributed package doesn't have NCCL built in\n")
    ids = [c.id for c in registry.CHECKS]
    _, rows = run_json("--ascend-root", str(tmp_path))
    _, more = run_json("--log", str(log))
    for code in list(rows) + list(more):
        assert any(code == i or code.startswith(i + ".") for i in ids), code


def test_broken_rules_file_is_a_tool_error_exit_2(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import titan_knowledge as knowledge
    from titan_doctor.diagnose.command import diagnose

    (tmp_path / "hccl_env.toml").write_text("[[range]\nname = 1\n")
    monkeypatch.setattr(knowledge, "rules_dir", lambda: tmp_path)
    knowledge.load.cache_clear()
    try:
        result = CliRunner().invoke(diagnose, ["--check", "dist.hccl_env"])
    finally:
        knowledge.load.cache_clear()
    assert result.exit_code == 2, result.output
    assert "hccl_env.toml: invalid TOML" in result.output and "check crashed" not in result.output
