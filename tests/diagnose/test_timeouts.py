"""`dist.timeouts`: the collective timeouts in force and the settings that raise them
together (titan-train's distributed.timeout_s with HCCL_EXEC_TIMEOUT / HCCL_CONNECT_TIMEOUT,
or with NCCL the process-group timeout alone)."""

from __future__ import annotations

from titan_doctor.diagnose.timeouts import check_timeouts
from titan_doctor.findings import Status


def test_on_ascend_it_names_the_hccl_clocks_and_the_shorter_one():
    (f,) = check_timeouts({"HCCL_EXEC_TIMEOUT": "900"}, on_npu=True)
    assert f.status == Status.INFO
    assert "process group 1800 s (torch's default; titan-train: distributed.timeout_s)" in f.message
    assert "HCCL_EXEC_TIMEOUT 900 s, HCCL_CONNECT_TIMEOUT 120 s (default)" in f.message
    assert "(900 s here;" in f.detail  # the shorter of 1800 and 900
    assert "--set distributed.timeout_s=3600 and export HCCL_EXEC_TIMEOUT=3600" in f.fix
    assert "HCCL_CONNECT_TIMEOUT=600" in f.fix
    assert f.data == {"pg_default_s": 1800, "hccl_exec_timeout_s": 900, "hccl_connect_timeout_s": 120}


def test_defaults_on_ascend_and_nccl_elsewhere():
    (f,) = check_timeouts({}, on_npu=True)
    assert "HCCL_EXEC_TIMEOUT 1836 s (default)" in f.message and "(1800 s here;" in f.detail
    (g,) = check_timeouts({}, on_npu=False)
    assert "process group 600 s with nccl, 1800 s with gloo" in g.message
    assert g.fix.endswith("--set distributed.timeout_s=3600") and "HCCL" not in g.fix


def test_the_old_nccl_spellings_are_a_warning_naming_torchs():
    warn, info = check_timeouts({"NCCL_ASYNC_ERROR_HANDLING": "1"}, on_npu=False)
    assert warn.status == Status.WARN
    assert warn.message == "NCCL_ASYNC_ERROR_HANDLING is the old spelling: torch reads TORCH_NCCL_ASYNC_ERROR_HANDLING"
    assert warn.fix == "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1; unset NCCL_ASYNC_ERROR_HANDLING"
    assert info.status == Status.INFO
    assert check_timeouts({"NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_BLOCKING_WAIT": "1"}, on_npu=False)[0].status == (
        Status.INFO
    )
