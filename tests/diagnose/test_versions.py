"""Version verdicts: the matrix on real (torch, torch_npu, CANN, Python) combinations,
and classification of real torch_npu import errors from probe output."""

import pytest

from titan_doctor.diagnose import versions
from titan_doctor.findings import Status

TABLE = versions.table()


def verdicts(torch, npu, cann, py):
    return versions.matrix_verdicts(torch, npu, cann, py, TABLE)


def statuses(fs):
    return sorted(f.status.value for f in fs)


def test_listed_combination_fits():
    # CANN 8.2.RC1 row: torch 2.6.0 / torch_npu 2.6.0 (torch_npu README, Ascend Auxiliary Software)
    fs = verdicts("2.6.0+cpu", "2.6.0", "8.2.RC1", "3.11.9")
    assert statuses(fs) == ["ok"] and "listed together" in fs[0].message


def test_torch_npu_for_other_torch_fails_with_both_pins():
    fs = verdicts("2.4.0", "2.3.1.post4", "8.0.0", "3.10.12")
    bad = [f for f in fs if f.status is Status.FAIL]
    assert len(bad) == 1 and "built for torch 2.3.1, but torch is 2.4.0" in bad[0].message
    assert "pip install torch-npu==2.4.0" in bad[0].fix and "pip install torch==2.3.1" in bad[0].fix


def test_old_torch_and_old_cann_both_fail():
    # CANN 7.0.0 row: torch 2.0.1 / torch_npu 2.0.1.post1 -- listed upstream, below our pins
    fs = verdicts("2.0.1", "2.0.1.post1", "7.0.0", "3.9.18")
    msgs = [f.message for f in fs if f.status is Status.FAIL]
    assert any("torch 2.0.1 < 2.1" in m for m in msgs)
    assert any("CANN 7.0.0 < 8.0" in m for m in msgs)


def test_torch_npu_released_for_newer_cann_warns_and_names_alternatives():
    fs = verdicts("2.8.0", "2.8.0", "8.1.RC1", "3.11.4")
    (f,) = fs
    assert f.status is Status.WARN
    assert "released for CANN 8.3.RC1, found CANN 8.1.RC1" in f.message
    assert "2.5.1" in f.fix and "2.4.0.post4" in f.fix  # what CANN 8.1.RC1 does ship with


def test_python_outside_the_shipped_set_warns():
    fs = verdicts("2.5.1", "2.5.1", "8.1.RC1", "3.8.18")
    (f,) = fs
    assert f.status is Status.WARN and "Python 3.8 is not among" in f.message and "3.11" in f.fix


def test_torch_npu_without_cann_is_not_called_a_fit():
    fs = verdicts("2.13.0+cpu", "2.13.0", None, "3.11.7")
    (f,) = fs
    assert f.status is Status.INFO and "CANN not found" in f.message  # ascend.cann reports the failure


def test_unlisted_torch_npu_is_info_not_a_guess():
    fs = verdicts("2.13.0", "2.13.0", "8.5.0", "3.11.7")
    (f,) = fs
    assert f.status is Status.INFO and "not in our compatibility table" in f.message


def test_post_releases_compare_on_base_version():
    assert versions.base("2.1.0.post10") == versions.base("2.1.0+cpu") == "2.1.0"
    assert versions.base("2.10.0rc2") == "2.10.0"
    fs = verdicts("2.1.0", "2.1.0.post10", "8.0.0", "3.10.1")
    assert statuses(fs) == ["ok"]


def test_every_row_has_a_source_and_rows_parse():
    assert all(r["source"].startswith("https://") for r in TABLE["compat"] + TABLE["python"])
    assert all(versions.base(r["torch_npu"]) == r["torch"] for r in TABLE["compat"])


PINS = TABLE["pins"]


def probe(torch=None, npu=None, py="3.11.7"):
    return {
        "python": {"version": py, "executable": "/x/python"},
        "torch": torch or {"installed": False},
        "torch_npu": npu or {"installed": False},
    }


TORCH = {"installed": True, "version": "2.13.0+cpu", "cuda": None, "imported": True, "fsdp2_public": True}


@pytest.mark.parametrize(
    "error,sig,fix_part",
    [
        (
            "ImportError: libhccl.so: cannot open shared object file: No such file or directory",
            "import.cann_missing",
            "source /opt/Ascend/ascend-toolkit/set_env.sh",
        ),
        (
            "ImportError: /usr/local/lib/python3.9/site-packages/torch_npu/lib/libtorch_npu.so: undefined symbol: "
            "_ZN5torch10ValueErrorC1EPKcz",
            "import.undefined_symbol",
            "pip install torch-npu==2.13.0",
        ),
        (
            "RuntimeError: Two accelerators cannot be used at the same time in PyTorch: npu and cuda. You can install "
            "the cpu version of PyTorch to use your npu device, or use the cuda device with 'export "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0'.",
            "import.two_accelerators",
            "download.pytorch.org/whl/cpu",
        ),
    ],
)
def test_torch_npu_import_errors_are_classified(error, sig, fix_part):
    npu = {
        "installed": True,
        "dist_version": "2.13.0",
        "imported": False,
        "error": error,
        "error_text": 'Traceback (most recent call last):\n  File "x.py", line 1\n' + error,
    }
    (f,) = versions.check_torch_npu(probe(TORCH, npu), True, ["/opt/Ascend/ascend-toolkit/set_env.sh"])
    assert f.status is Status.FAIL and f.data["cause"] == sig
    assert fix_part in f.fix


def test_cann_missing_is_named_as_such():
    npu = {
        "installed": True,
        "dist_version": "2.13.0",
        "imported": False,
        "error": "ImportError: libascendcl.so: cannot open shared object file: No such file or directory",
        "error_text": "ImportError: libascendcl.so: cannot open shared object file: No such file or directory",
    }
    (f,) = versions.check_torch_npu(probe(TORCH, npu), False, [])
    assert "CANN missing / set_env.sh not sourced" in f.message
    assert "libascendcl.so" in f.detail and "Install the CANN toolkit" in f.fix


def test_unknown_import_error_shows_the_text():
    npu = {
        "installed": True,
        "dist_version": "2.13.0",
        "imported": False,
        "error": "OSError: boom",
        "error_text": "OSError: boom",
    }
    (f,) = versions.check_torch_npu(probe(TORCH, npu), True, [])
    assert f.status is Status.FAIL and "OSError: boom" in f.message


def test_torch_checks():
    (f,) = versions.check_torch(probe(), PINS)
    assert f.status is Status.FAIL and "not installed" in f.message
    (f,) = versions.check_torch(probe(dict(TORCH, version="2.0.1")), PINS)
    assert f.status is Status.FAIL and "2.0.x has known bugs" in f.message
    (f,) = versions.check_torch(probe(dict(TORCH, cuda="12.4")), PINS)
    assert f.status is Status.OK and "cuda 12.4 build" in f.message


def test_fsdp2_needs_2_6():
    assert versions.check_fsdp2(probe(TORCH), PINS)[0].status is Status.OK
    old = dict(TORCH, version="2.5.1", fsdp2_public=False)
    (f,) = versions.check_fsdp2(probe(old), PINS)
    assert f.status is Status.FAIL and "fully_shard" in f.message


def test_missing_torch_npu_beside_cuda_torch_asks_for_the_cpu_build():
    (f,) = versions.check_torch_npu(probe(dict(TORCH, version="2.6.0+cu124", cuda="12.4")), True, [])
    assert f.status is Status.WARN and "'torch==2.6.0+cpu'" in f.fix and "torch-npu==2.6.0" in f.fix
    (f,) = versions.check_torch_npu(probe(TORCH), False, [])
    assert f.status is Status.INFO and f.fix == ""


@pytest.mark.parametrize(
    "torch,cann,advice",
    [
        ("2.6.0+cpu", "8.3.RC1", "pip install torch-npu==2.6.0.post3   (built for torch 2.6.0 and CANN 8.3.RC1)"),
        ("2.6.0", "8.2.RC1", "pip install torch-npu==2.6.0   (built for torch 2.6.0 and CANN 8.2.RC1)"),
        ("2.4.0", "8.0.RC3.alpha002", "pip install torch-npu==2.4.0   (built for torch 2.4.0 and CANN 8.0.RC3)"),
        (
            "2.9.0",
            "8.2.RC1",
            "pip install torch==2.6.0 torch-npu==2.6.0   (no torch_npu release pairs torch 2.9.0 with CANN 8.2.RC1",
        ),
        ("2.13.0", None, "pip install torch-npu==2.13.0   (not in titan-npu's table"),
    ],
)
def test_torch_npu_advice_respects_the_installed_cann(torch, cann, advice):
    assert versions.torch_npu_advice(torch, cann, versions.table()).startswith(advice)


def test_install_advice_in_the_checks_uses_the_cann_found():
    (f,) = versions.check_torch_npu(probe(dict(TORCH, version="2.5.1")), True, [], cann="8.1.RC1")
    assert f.status is Status.WARN and f.fix.startswith(
        "pip install torch-npu==2.5.1   (built for torch 2.5.1 and CANN 8.1.RC1)"
    )
    (f,) = versions.check_torch(probe(), PINS, cann="8.3.RC1")
    assert "torch==2.8.0" in f.fix and "torch-npu==2.8.0" in f.fix and "CANN 8.3.RC1" in f.fix
    (f,) = versions.check_fsdp2(probe(dict(TORCH, version="2.5.1", fsdp2_public=False)), PINS, cann="8.1.RC1")
    assert "CANN 8.1.RC1 has no torch_npu release with torch >= 2.6" in f.fix
    (f,) = versions.check_fsdp2(probe(dict(TORCH, version="2.5.1", fsdp2_public=False)), PINS, cann="8.2.RC1")
    assert "pip install torch==2.6.0 torch-npu==2.6.0   (released for CANN 8.2.RC1)" in f.fix
