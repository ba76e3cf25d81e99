"""Distributed settings with real sockets and crafted environments."""

import socket

import pytest

from titan_doctor.diagnose import distributed_env as d
from titan_doctor.findings import Status

from .test_devices import fake_tool


def by_code(fs, code):
    return [f for f in fs if f.code == code]


@pytest.fixture
def busy_port():
    s = socket.socket()
    s.bind(("", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_occupied_master_port(busy_port):
    fs = d.check_master({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(busy_port)})
    (f,) = by_code(fs, "dist.master.port")
    assert f.status is Status.FAIL and f"MASTER_PORT={busy_port} is already in use" in f.message
    assert f.data["error"] == "Address already in use" and f"grep :{busy_port}" in f.fix


def test_free_port_and_invalid_port():
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    (f,) = by_code(d.check_master({"MASTER_PORT": str(port)}), "dist.master.port")
    assert f.status is Status.OK
    (f,) = by_code(d.check_master({"MASTER_PORT": "70000"}), "dist.master.port")
    assert f.status is Status.FAIL and "not a port number" in f.message


def test_unresolvable_master_addr():
    (f,) = by_code(d.check_master({"MASTER_ADDR": "no-such-host.invalid"}), "dist.master.addr")
    assert f.status is Status.FAIL and "does not resolve" in f.message and f.data["host"] == "no-such-host.invalid"


def test_loopback_master_with_several_nodes():
    (f,) = by_code(d.check_master({"MASTER_ADDR": "127.0.0.1"}, nnodes=2), "dist.master.addr")
    assert f.status is Status.FAIL and "loopback" in f.message
    (f,) = by_code(d.check_master({}, nnodes=2), "dist.master.addr")
    assert f.status is Status.FAIL and "unset" in f.message


@pytest.mark.parametrize(
    "env,nproc,ok,text",
    [
        ({}, None, True, "unset"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, 2, True, "consistent"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, None, False, "RANK=2 >= WORLD_SIZE=2"),
        ({"RANK": "0"}, None, False, "RANK set without WORLD_SIZE"),
        ({"WORLD_SIZE": "4"}, 2, False, "WORLD_SIZE=4 but --nproc 2 x --nnodes 1 = 2"),
        ({"LOCAL_RANK": "a"}, None, False, "not a non-negative integer"),
        ({"LOCAL_RANK": "2", "WORLD_SIZE": "2"}, 2, False, "LOCAL_RANK=2 >= --nproc 2 (local ranks are 0..1)"),
    ],
)
def test_rank_variables(env, nproc, ok, text):
    (f,) = d.check_ranks(env, nproc)
    assert (f.status is Status.OK) == ok and text in f.message


def test_hccl_ranges():
    fs = d.check_hccl_env({"HCCL_CONNECT_TIMEOUT": "60", "HCCL_EXEC_TIMEOUT": "1800", "HCCL_BUFFSIZE": "abc"})
    msgs = {f.data.get("var"): f for f in fs}
    assert (
        msgs["HCCL_CONNECT_TIMEOUT"].status is Status.FAIL
        and "outside [120, 7200]" in msgs["HCCL_CONNECT_TIMEOUT"].message
    )
    assert msgs["HCCL_CONNECT_TIMEOUT"].fix == "export HCCL_CONNECT_TIMEOUT=120"
    assert msgs["HCCL_EXEC_TIMEOUT"].status is Status.OK
    assert msgs["HCCL_BUFFSIZE"].status is Status.FAIL and "not an integer" in msgs["HCCL_BUFFSIZE"].message
    (big,) = d.check_hccl_env({"HCCL_BUFFSIZE": "65536"})
    assert (
        big.status is Status.WARN
        and "2 x HCCL_BUFFSIZE" in big.message
        and big.fix.startswith("export HCCL_BUFFSIZE=200")
    )
    (never,) = d.check_hccl_env({"HCCL_EXEC_TIMEOUT": "0"})  # 0 = never time out on Atlas A2/A3
    assert never.status is Status.OK


def test_hccl_buffsize_that_can_only_be_bytes_is_a_failure():
    """NCCL_BUFFSIZE's default 4 MiB copied as bytes: as MB it is 4 TiB per buffer."""
    (f,) = d.check_hccl_env({"HCCL_BUFFSIZE": "4194304"})
    assert f.status is Status.FAIL and "given in bytes" in f.message
    assert f.fix.startswith("export HCCL_BUFFSIZE=4   (the same 4194304 bytes in MB)") and f.data["as_mb"] == 4
    assert d.largest_device_mb() >= 64 * 1024  # from rules/devices.toml, not a constant here


def test_master_addr_needed_without_a_launcher():
    (f,) = d.check_master({"WORLD_SIZE": "4", "RANK": "0"})
    assert f.status is Status.FAIL and f.message.startswith("WORLD_SIZE=4 but MASTER_ADDR is unset")
    assert "torchrun" in f.fix and "MASTER_PORT=29500" in f.fix
    launched = by_code(d.check_master({"WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x"}), "dist.master.addr")
    assert launched[0].status is Status.OK
    single = by_code(d.check_master({"WORLD_SIZE": "1"}), "dist.master.addr")
    assert single[0].status is Status.OK


def test_hccl_if_ip_and_ifname():
    (ok,) = d.check_hccl_env({"HCCL_IF_IP": "127.0.0.1"})
    assert ok.status is Status.OK
    (bad,) = d.check_hccl_env({"HCCL_IF_IP": "203.0.113.7"})  # TEST-NET-3, never ours
    assert bad.status is Status.FAIL and "not an address of this host" in bad.message
    (f,) = d.check_hccl_env({"HCCL_SOCKET_IFNAME": "eth"}, if_names=["lo", "eth0"])
    assert f.status is Status.OK and "eth0" in f.message
    (f,) = d.check_hccl_env({"HCCL_SOCKET_IFNAME": "=ib0"}, if_names=["lo", "eth0"])
    assert f.status is Status.FAIL and f.fix == "export HCCL_SOCKET_IFNAME=eth0"
    (f,) = d.check_hccl_env({"HCCL_SOCKET_IFNAME": "^docker,lo"}, if_names=["lo", "docker0", "enp1s0"])
    assert f.status is Status.OK and f.message.endswith("matches enp1s0")


def test_leftovers_named_with_equivalents():
    env = {"NCCL_SOCKET_IFNAME": "eth0", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_IB_HCA": "mlx5", "PATH": "/bin"}
    fs = d.check_leftovers(env, on_npu=True)
    got = {f.data["var"]: f for f in fs}
    assert set(got) == {"NCCL_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA"}
    assert got["CUDA_VISIBLE_DEVICES"].fix == "export ASCEND_RT_VISIBLE_DEVICES=0,1; unset CUDA_VISIBLE_DEVICES"
    assert got["NCCL_SOCKET_IFNAME"].data["equivalent"] == "HCCL_SOCKET_IFNAME"
    assert "no Ascend equivalent" in got["NCCL_IB_HCA"].fix
    assert all(f.status is Status.WARN for f in fs)
    (f,) = d.check_leftovers(env, on_npu=False)
    assert f.status is Status.INFO


@pytest.mark.parametrize(
    "var,value,fix",
    [
        ("NCCL_DEBUG", "INFO", "export ASCEND_GLOBAL_LOG_LEVEL=1; unset NCCL_DEBUG"),
        ("NCCL_DEBUG", "warn", "export ASCEND_GLOBAL_LOG_LEVEL=2; unset NCCL_DEBUG"),
        ("NCCL_DEBUG", "SUBSYS", "unset NCCL_DEBUG; set ASCEND_GLOBAL_LOG_LEVEL by hand: 'SUBSYS' has no equivalent"),
        ("NCCL_BUFFSIZE", "4194304", "export HCCL_BUFFSIZE=4; unset NCCL_BUFFSIZE"),
        ("NCCL_ALGO", "Ring", "unset NCCL_ALGO; set HCCL_ALGO by hand: its syntax differs"),
    ],
)
def test_leftover_values_are_translated_or_left_to_a_person(var, value, fix):
    (f,) = d.check_leftovers({var: value}, on_npu=True)
    assert f.fix.startswith(fix), f.fix
    if "by hand" not in fix:  # a suggested value must be one the Ascend variable accepts
        assert f.data["value"].isdigit()


def test_hccn_tool(tmp_path):
    body = (
        'case "$3" in -link) echo "link status: $( [ "$2" = 1 ] && echo DOWN || echo UP )";; '
        '-net_health) echo "net health status: Success";; esac\n'
    )
    env = fake_tool(tmp_path, "hccn_tool", body)
    (f,) = d.check_hccn(env, [0, 1])
    assert f.status is Status.FAIL and f.data["bad"] == [1] and "NPU 1: link DOWN" in f.detail
    (f,) = d.check_hccn(env, [0])
    assert f.status is Status.OK
    (f,) = d.check_hccn({"PATH": str(tmp_path / "nowhere")}, [0])
    assert f.status is Status.SKIP


def test_shm(tmp_path):
    (f,) = d.check_shm(tmp_path, minimum=1)
    assert f.status is Status.OK and f.data["bytes"] > 0
    (f,) = d.check_shm(tmp_path, minimum=1 << 60)
    assert f.status is Status.WARN and "--shm-size" in f.fix
    (f,) = d.check_shm(tmp_path / "absent")
    assert f.status is Status.WARN


def test_port_of_a_remote_rank0_is_not_bind_tested(busy_port):
    fs = d.check_master({"MASTER_ADDR": "203.0.113.7", "MASTER_PORT": str(busy_port)}, nnodes=2)
    addr, port = fs
    assert addr.status is Status.OK and addr.data["addresses"] == ["203.0.113.7"]
    assert port.status is Status.OK and "rank 0 is another host" in port.message


def test_leftover_advice_is_migrates_env_mapping():
    """One source of truth: every NCCL/CUDA variable migrate renames gets the same name
    here, and a value migrate converts gets the same value."""
    from titan_doctor.migrate.rules import builtin_rules
    from titan_doctor.migrate.rules.kinds.env_values import convert_env

    rules = builtin_rules()
    renamed = [r for r in rules.env.values() if r.new]
    assert len(renamed) > 15
    for rule in renamed:
        (f,) = d.check_leftovers({rule.old: "1"}, on_npu=True)
        assert f.data["equivalent"] == rule.new, rule.old
        change = convert_env(rules, rule.old, "1")
        if change.new_name is not None:
            assert f.data["value"] == (change.new_value or "1"), rule.old
        else:
            assert f.data["value"] is None and "by hand" in f.fix, rule.old


@pytest.mark.parametrize(
    "var,value,fix",
    [
        ("NCCL_ASYNC_ERROR_HANDLING", "1", "export TORCH_HCCL_ASYNC_ERROR_HANDLING=1; unset NCCL_ASYNC_ERROR_HANDLING"),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True",
            "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True; unset PYTORCH_CUDA_ALLOC_CONF",
        ),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "backend:cudaMallocAsync",
            "unset PYTORCH_CUDA_ALLOC_CONF; set PYTORCH_NPU_ALLOC_CONF by hand: torch_npu does not accept the setting 'backend'",
        ),
        (
            "NCCL_BUFFSIZE",
            "1000000",
            "unset NCCL_BUFFSIZE; set HCCL_BUFFSIZE by hand: 1000000 bytes is not a whole number of MB",
        ),
        ("NCCL_IB_HCA", "mlx5", "unset NCCL_IB_HCA   (no Ascend equivalent); HCCL uses RoCE"),
    ],
)
def test_leftover_values_follow_the_migrate_rules(var, value, fix):
    (f,) = d.check_leftovers({var: value}, on_npu=True)
    assert f.fix.startswith(fix), f.fix


def test_hccl_buffsize_byte_count_that_is_no_whole_mb():
    (f,) = d.check_hccl_env({"HCCL_BUFFSIZE": "5000000"})
    assert f.status is Status.FAIL and "given in bytes" in f.message
    assert f.fix.startswith("export HCCL_BUFFSIZE=<MB>: 5000000 bytes is not a whole number of MB")
    assert f.data["as_mb"] is None
