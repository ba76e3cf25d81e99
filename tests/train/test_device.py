"""Device selection, decided from injected probes (no fake NPUs)."""

from __future__ import annotations

import pytest

from titan_train.runtime.device import Device, DeviceError, Probe, select

LIBHCCL = "torch_npu failed to import: ImportError: libhccl.so: cannot open shared object file"


@pytest.mark.parametrize(
    "probe,want",
    [
        (Probe(npu_count=8, cuda_count=0), ("npu", "hccl", 8)),
        (Probe(npu_count=8, cuda_count=2), ("npu", "hccl", 8)),
        (Probe(npu_count=0, cuda_count=4, npu_error="torch_npu is not installed"), ("cuda", "nccl", 4)),
        (Probe(npu_error=LIBHCCL), ("cpu", "gloo", 1)),
    ],
)
def test_auto_prefers_npu_then_cuda_then_cpu(probe, want):
    dev = select("auto", probe)
    assert (dev.type, dev.backend, dev.count) == want


def test_auto_fallback_says_why():
    dev = select("auto", Probe(npu_error=LIBHCCL))
    assert "libhccl.so" in dev.note and "no CUDA device" in dev.note and dev.note.endswith("cpu+gloo")
    assert select("auto", Probe(npu_count=1)).note == ""


def test_explicit_backends():
    assert select("hccl", Probe(npu_count=2)) == Device("npu", "hccl", 2)
    assert select("nccl", Probe(cuda_count=1, npu_count=8)) == Device("cuda", "nccl", 1)
    assert select("gloo", Probe(npu_count=8)) == Device("cpu", "gloo", 1)


def test_hccl_without_npu_names_the_cause_and_the_fix():
    with pytest.raises(DeviceError) as e:
        select("hccl", Probe(npu_error=LIBHCCL, cuda_count=8))
    msg = str(e.value)
    assert "needs an Ascend NPU" in msg and "libhccl.so" in msg and 'backend = "auto"' in msg


def test_nccl_without_gpu_and_unknown_backend():
    with pytest.raises(DeviceError, match="needs a CUDA GPU"):
        select("nccl", Probe(npu_count=8))
    with pytest.raises(DeviceError, match="use one of auto, hccl, nccl, gloo"):
        select("mpi", Probe())


def test_options_that_need_an_accelerator():
    from titan_train.runtime.device import check_options

    check_options(Device("npu", "hccl", 8), cpu_offload=True, mixed_precision="bf16")
    with pytest.raises(DeviceError, match="cpu_offload = true needs an accelerator"):
        check_options(Device("cpu", "gloo", 1), cpu_offload=True, mixed_precision="fp32")


def test_real_probe_on_this_machine_reports_no_npu():
    from titan_train.runtime.device import probe

    p = probe()
    assert p.npu_count == 0 and p.npu_error  # no Ascend here; the reason is recorded, not raised
