"""convert_env: a variable's value keeps its meaning when its name moves to NPU/HCCL."""

from __future__ import annotations

import pytest

from titan_doctor.findings import Status
from titan_doctor.migrate.rules.kinds.env_values import convert_env
from titan_doctor.migrate.text.lines import migrate_text

from .helpers import rules


@pytest.mark.parametrize(
    "name, value, new_name, new_value",
    [
        ("NCCL_BUFFSIZE", "4194304", "HCCL_BUFFSIZE", "4"),  # bytes -> MB
        ("NCCL_BUFFSIZE", "1073741824", "HCCL_BUFFSIZE", "1024"),
        ("NCCL_DEBUG", "INFO", "ASCEND_GLOBAL_LOG_LEVEL", "1"),
        ("NCCL_DEBUG", "warn", "ASCEND_GLOBAL_LOG_LEVEL", "2"),
        ("NCCL_DEBUG", "TRACE", "ASCEND_GLOBAL_LOG_LEVEL", "0"),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "release_lock_on_cudamalloc:True",
            "PYTORCH_NPU_ALLOC_CONF",
            "release_lock_on_npumalloc:True",
        ),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "PYTORCH_NPU_ALLOC_CONF", None),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3", "ASCEND_RT_VISIBLE_DEVICES", None),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", "TORCH_HCCL_ASYNC_ERROR_HANDLING", None),
        ("NCCL_ASYNC_ERROR_HANDLING", "1", "TORCH_HCCL_ASYNC_ERROR_HANDLING", None),
        ("NCCL_BLOCKING_WAIT", "1", "TORCH_HCCL_BLOCKING_WAIT", None),
        ("NCCL_IB_RETRY_CNT", "7", "HCCL_RDMA_RETRY_CNT", None),
    ],
)
def test_exact_conversions_are_fixed(name, value, new_name, new_value):
    change = convert_env(rules(), name, value)
    assert (change.status, change.new_name, change.new_value) == (Status.FIXED, new_name, new_value)
    if new_value is not None:
        assert "exact" in change.message and new_value in change.message


@pytest.mark.parametrize(
    "name, value, why",
    [
        ("NCCL_BUFFSIZE", "1000", "not a whole number of MB"),
        ("NCCL_BUFFSIZE", "524288", "not a whole number of MB"),  # 0.5 MB
        ("NCCL_BUFFSIZE", "0", "below HCCL_BUFFSIZE's minimum"),
        ("NCCL_BUFFSIZE", "4M", "not a whole number of bytes"),
        ("NCCL_DEBUG", "VERSION", "has no equivalent ASCEND_GLOBAL_LOG_LEVEL level"),
        ("NCCL_ALGO", "Ring", "its syntax differs"),
        ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", "does not accept the setting 'backend'"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,garbage_collection_threshold:0.6", "refuses"),
        ("CUDA_VISIBLE_DEVICES", "MIG-4b2b-1", "has no ASCEND_RT_VISIBLE_DEVICES equivalent"),
        ("CUDA_VISIBLE_DEVICES", "-1", "has no ASCEND_RT_VISIBLE_DEVICES equivalent"),
        ("TORCH_NCCL_DESYNC_DEBUG", "true", "has no TORCH_HCCL_DESYNC_DEBUG equivalent"),
        ("NCCL_IB_TIMEOUT", "23", "has no HCCL_RDMA_TIMEOUT equivalent"),
    ],
)
def test_values_without_an_exact_counterpart_are_manual_and_keep_the_name(name, value, why):
    change = convert_env(rules(), name, value)
    assert change.status is Status.MANUAL and change.new_name is None and change.new_value is None
    assert why in change.message, change.message
    assert change.fix


def test_a_value_that_is_not_a_literal_moves_only_when_values_keep_their_meaning():
    assert convert_env(rules(), "NCCL_SOCKET_IFNAME", None, value_known=False).new_name == "HCCL_SOCKET_IFNAME"
    change = convert_env(rules(), "NCCL_BUFFSIZE", None, value_known=False)
    assert change.status is Status.MANUAL and "bytes -> MB" in change.message


def test_variables_without_counterpart_and_unknown_names():
    change = convert_env(rules(), "NCCL_IB_HCA", "mlx5_0")
    assert change.status is Status.MANUAL and change.new_name is None and "HCCL_RDMA_TC" in change.fix
    assert convert_env(rules(), "MY_OWN_VAR", "1") is None


@pytest.mark.parametrize(
    "line, out",
    [
        ("export NCCL_BUFFSIZE=4194304\n", "export HCCL_BUFFSIZE=4\n"),
        ("NCCL_DEBUG=INFO torchrun train.py\n", "ASCEND_GLOBAL_LOG_LEVEL=1 torchrun train.py\n"),
        ("  NCCL_BUFFSIZE: '8388608'\n", "  HCCL_BUFFSIZE: '8'\n"),
        ('NCCL_BUFFSIZE = "2097152"\n', 'HCCL_BUFFSIZE = "2"\n'),
        ("export NCCL_BUFFSIZE=1000\n", "export NCCL_BUFFSIZE=1000\n"),  # manual, untouched
        ("export NCCL_BUFFSIZE=$BUF\n", "export NCCL_BUFFSIZE=$BUF\n"),  # not a literal
        ("echo ${NCCL_SOCKET_IFNAME:-eth0}\n", "echo ${HCCL_SOCKET_IFNAME:-eth0}\n"),
    ],
)
def test_launch_scripts_convert_values_too(line, out):
    new, _ = migrate_text(line.encode(), rules(), "run.sh")
    assert new.decode() == out
