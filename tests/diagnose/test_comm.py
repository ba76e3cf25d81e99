"""The live collective test, for real on gloo with 2 local ranks."""

import socket
import sys

import pytest

from titan_doctor.diagnose import comm
from titan_doctor.findings import Status

from .conftest import clean_env, run_json

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes


def test_comm_nproc_2_passes_on_gloo():
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    rc, rows = run_json(
        "--comm", "--nproc", "2", "--check", "comm", "--comm-timeout", "60", env=clean_env(MASTER_PORT=str(port))
    )
    assert rc == 0, rows
    assert rows["comm.init"]["status"] == "ok" and rows["comm.init"]["data"]["backend"] == "gloo"
    assert rows["comm.init"]["data"]["MASTER_PORT"] == str(port)
    assert rows["comm.allreduce"]["status"] == "ok"
    bw = rows["comm.bandwidth"]["data"]["rows"]
    assert [r["bytes"] for r in bw] == list(comm.SIZES)
    assert all(r["busbw_gbs"] > 0 and r["time_us"] > 0 for r in bw)
    assert "busbw (GB/s)" in rows["comm.bandwidth"]["detail"]


def test_occupied_master_port_names_rank_0_live():
    """Launched anyway (no pre-flight): rank 0 dies with the real EADDRINUSE, rank 1 is
    named as hanging in init and killed."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        results, rdv = comm.launch(2, sys.executable, clean_env(MASTER_PORT=str(port)), timeout=20)
    fs = comm.findings(results, rdv, 20)
    assert {f.code for f in fs} == {"comm.rank"}
    r0 = next(f for f in fs if f.data["rank"] == 0)
    assert r0.status is Status.FAIL and r0.data["signature"] == "dist.address_in_use"
    assert "EADDRINUSE" in r0.data["error"] and r0.data["phase"] == "init"
    assert "MASTER_PORT" in r0.detail
    r1 = next(f for f in fs if f.data["rank"] == 1)
    assert r1.data.get("hung") and r1.data["phase"] == "init"


def test_occupied_master_port_via_cli_is_caught_before_launch():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, rows = run_json("--comm", "--check", "comm", env=clean_env(MASTER_PORT=str(port)))
    assert rc == 1
    f = rows["comm.preflight"]
    assert f["status"] == "fail" and f["title"].startswith(f"not started: MASTER_PORT={port} is already in use")


def test_unresolvable_master_addr_via_cli():
    rc, rows = run_json("--comm", "--check", "comm", env=clean_env(MASTER_ADDR="no-such-host.invalid"))
    assert rc == 1
    f = rows["comm.preflight"]
    assert f["status"] == "fail" and "MASTER_ADDR=no-such-host.invalid does not resolve" in f["title"]
    assert "IP address" in f["fix"]
