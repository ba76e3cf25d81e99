"""Devices: a real `npu-smi` process (a script on PATH printing a real table),
/dev/davinci* nodes in a directory, ASCEND_RT_VISIBLE_DEVICES against --nproc."""

import os
import stat

from titan_doctor.diagnose import devices
from titan_doctor.findings import Status

# From https://github.com/vllm-project/vllm-ascend/issues/942 (npu-smi 24.1 on 910B3).
NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 98.1        41                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3389 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | {health}      | 93.6        40                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          {used} / 65536         |
+===========================+===============+====================================================+
"""


def fake_tool(tmp_path, name, body):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bindir}:{os.environ.get('PATH', '')}"}


def smi_env(tmp_path, health="OK", used=3380):
    table = tmp_path / "table.txt"
    table.write_text(NPU_SMI.format(health=health, used=used))
    return fake_tool(tmp_path, "npu-smi", f'[ "$1" = info ] && cat "{table}"\n')


def test_parse_real_table():
    npus = devices.parse_npu_smi(NPU_SMI.format(health="OK", used=3380))
    assert [(n["id"], n["name"], n["health"], n["hbm_used_mb"], n["hbm_total_mb"]) for n in npus] == [
        (0, "910B3", "OK", 3389, 65536),
        (1, "910B3", "OK", 3380, 65536),
    ]


def test_healthy_npus_via_real_process(tmp_path):
    smi = devices.run_npu_smi(smi_env(tmp_path))
    (f,) = devices.check_npus(smi, [0, 1])
    assert f.status is Status.OK and f.message == "2 NPU(s) healthy (910B3)"


def test_unhealthy_and_busy(tmp_path):
    (f,) = devices.check_npus(devices.run_npu_smi(smi_env(tmp_path, health="Alarm")), [0, 1])
    assert f.status is Status.FAIL and "1 of 2 NPU(s) not healthy" in f.message and "NPU 1 910B3: Alarm" in f.detail
    (f,) = devices.check_npus(devices.run_npu_smi(smi_env(tmp_path, used=60000)), [0, 1])
    assert f.status is Status.WARN and ">20% HBM" in f.message


def test_npu_smi_failing(tmp_path):
    env = fake_tool(
        tmp_path,
        "npu-smi",
        "echo 'dcmi model initialized failed, because the device is used. ret is -8020' >&2\nexit 1\n",
    )
    (f,) = devices.check_npus(devices.run_npu_smi(env), [0])
    assert f.status is Status.FAIL and "ret is -8020" in f.message


def test_davinci_nodes_without_npu_smi(tmp_path):
    for n in ("davinci0", "davinci1", "davinci_manager", "davinci7"):
        (tmp_path / n).write_text("")
    nodes = devices.davinci_nodes(tmp_path)
    assert nodes == [0, 1, 7]
    (f,) = devices.check_npus(devices.NpuSmi(False), nodes)
    assert f.status is Status.WARN and "npu-smi not on PATH" in f.message
    (f,) = devices.check_npus(devices.NpuSmi(False), [])
    assert f.status is Status.INFO


def test_visible_devices_vs_nproc():
    ok = devices.check_visible({"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, 4, 8)[0]
    assert ok.status is Status.OK
    few = devices.check_visible({"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, 4, 8)[0]
    assert few.status is Status.FAIL and "exposes 2 NPU(s)" in few.message and "0,1,2,3" in few.fix
    bad = devices.check_visible({"ASCEND_RT_VISIBLE_DEVICES": "0,x"}, 2, 8)[0]
    assert bad.status is Status.FAIL and "not a list" in bad.message
    out = devices.check_visible({"ASCEND_RT_VISIBLE_DEVICES": "6,9"}, 2, 8)[0]
    assert out.status is Status.FAIL and "[9]" in out.message
    unset = devices.check_visible({}, 16, 8)[0]
    assert unset.status is Status.FAIL and "only 8 NPU(s)" in unset.message


def test_accelerator_follows_trainer_rule():
    probe = {
        "torch": {"installed": True, "cuda_count": 0},
        "torch_npu": {"installed": True, "imported": True, "npu_count": 8},
    }
    (f,) = devices.check_accelerator(probe, 8)
    assert f.status is Status.OK and f.data == {"type": "npu", "backend": "hccl", "count": 8, "note": ""}
    (f,) = devices.check_accelerator(probe, 16)
    assert f.status is Status.FAIL
    broken = {
        "torch": {"installed": True},
        "torch_npu": {"installed": True, "imported": False, "error": "ImportError: x"},
    }
    (f,) = devices.check_accelerator(broken, None)
    assert f.data["type"] == "cpu" and "torch_npu failed to import: ImportError: x" in f.detail
