"""What one module's migration learns from the other modules of its tree (python/facts.py):
a CUDA-only function defined elsewhere keeps the check that guards it, a value the package
already picks per device keeps its CUDA default everywhere in the package, and a device
name carried into another module is a device there too."""

from __future__ import annotations

from titan_doctor.findings import Status
from titan_doctor.migrate.engine import runner as engine

from .helpers import rules


def _run(root, files: dict[str, str], jobs: int = 1):
    paths = []
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        paths.append((p, name))
    return {r.path.relative_to(root).as_posix(): r for r in engine.run(paths, rules(), jobs=jobs)}


ENV = """import subprocess


def check_fp8_capability():
    out = subprocess.check_output(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    return float(out.decode().split()[0]) >= 8.9
"""

STATE = """import torch

from .environment import check_fp8_capability


def fp8_enabled():
    if torch.cuda.is_available() and not check_fp8_capability():
        return False
    return True


def seed(n):
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(n)
"""


def test_a_cuda_only_function_of_another_module_keeps_its_guard(tmp_path):
    results = _run(tmp_path, {"lib/__init__.py": "", "lib/environment.py": ENV, "lib/state.py": STATE})
    state = results["lib/state.py"]
    kept = [f for f in state.findings if f.code == "NPU110"]
    assert [(f.line, f.status) for f in kept] == [(7, Status.MANUAL)]
    assert "check_fp8_capability" in kept[0].message and "nvidia-smi" in kept[0].message
    new = state.new.decode()
    assert "torch.cuda.is_available() and not check_fp8_capability()" in new  # left as is
    assert "torch.npu.manual_seed_all(n)" in new  # an unrelated guard still moves


DIST = """import torch
import torch.distributed as dist


def comm_device(backend):
    if backend == "hccl":
        return torch.device("npu", torch.npu.current_device())
    return torch.device("cuda", torch.cuda.current_device())
"""

RUNNER = """def default_env(launcher="none", dist_cfg=dict(backend="nccl")):
    return dict(launcher=launcher, dist_cfg=dist_cfg)
"""


def test_a_backend_the_package_picks_per_device_keeps_its_cuda_default_in_other_modules(tmp_path):
    results = _run(tmp_path, {"pkg/__init__.py": "", "pkg/dist.py": DIST, "pkg/runner.py": RUNNER})
    assert results["pkg/runner.py"].state == engine.UNCHANGED
    assert results["pkg/runner.py"].findings == [] and results["pkg/runner.py"].kept == 1
    # outside the package (a script of its own) the same default is CUDA's alone: rewritten
    alone = _run(tmp_path / "other", {"runner.py": RUNNER, "x.py": "y = 1\n"})
    assert b'backend="hccl"' in alone["runner.py"].new


PRODUCER = """import torch

dev = "cuda"
model = torch.nn.Linear(2, 2).to(dev)
"""

CONSUMER = """def fast_path(dev):
    return dev == "cuda"
"""


def test_a_device_name_carried_into_another_module_is_a_device_there(tmp_path):
    results = _run(tmp_path, {"train.py": PRODUCER, "util.py": CONSUMER}, jobs=2)
    assert b'dev = "npu"' in results["train.py"].new
    assert b'dev == "npu"' in results["util.py"].new


def test_one_file_alone_has_no_tree(tmp_path):
    results = _run(tmp_path, {"util.py": CONSUMER})
    assert results["util.py"].state == engine.UNCHANGED


CUDA_ACCELERATOR = """import torch


class CUDAAccelerator:
    def setup_device(self, device):
        torch.cuda.set_device(device)

    @staticmethod
    def parallel_devices(ids):
        return [torch.device("cuda", i) for i in ids]
"""

MPS_ACCELERATOR = """import torch


class MPSAccelerator:
    @staticmethod
    def parallel_devices(ids):
        return [torch.device("mps", i) for i in ids]
"""


def test_cuda_module_of_a_per_device_set_is_left_whole(tmp_path):
    """accelerators/cuda.py next to mps.py is CUDA's accelerator, not code to turn into NPU's."""
    results = _run(tmp_path, {"accelerators/cuda.py": CUDA_ACCELERATOR, "accelerators/mps.py": MPS_ACCELERATOR})
    cuda = results["accelerators/cuda.py"]
    assert cuda.state == engine.UNCHANGED
    [f] = cuda.findings
    assert (f.code, f.line) == ("NPU114", 1) and "mps" in f.message
    # the same module alone is CUDA code to migrate
    alone = _run(tmp_path / "alone", {"cuda.py": CUDA_ACCELERATOR, "x.py": "y = 1\n"})
    assert b"torch.npu.set_device" in alone["cuda.py"].new


MARKERS = """import pytest
import torch

from .utils import torch_device


def require_non_cpu(test_case):
    return pytest.mark.skipif(torch_device == "cpu", reason="needs an accelerator")(test_case)


def require_non_xpu(test_case):
    return pytest.mark.skipif(torch_device == "xpu", reason="not on XPU")(test_case)


def require_torch_gpu(test_case):
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="test requires GPU")(test_case)
"""

GPU_TESTS = """import torch

from .testing_utils import require_non_cpu, require_torch_gpu


@require_torch_gpu
def test_memory_is_released():
    model = torch.nn.Linear(4, 4).cuda()
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() >= 0


@require_non_cpu
def test_seeded():
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)
"""


def test_a_cuda_marker_of_another_module_keeps_the_tests_it_marks(tmp_path):
    results = _run(
        tmp_path,
        {"tests/__init__.py": "", "tests/testing_utils.py": MARKERS, "tests/test_gpu.py": GPU_TESTS},
    )
    assert results["tests/testing_utils.py"].state == engine.UNCHANGED  # the marker asks for CUDA itself
    new = results["tests/test_gpu.py"].new.decode()
    assert "torch.nn.Linear(4, 4).cuda()" in new and "torch.cuda.memory_reserved()" in new
    assert "torch.npu.manual_seed_all(0)" in new  # the generic test moves
    # alone (no marker module in the tree) the same test file is CUDA's only: it moves
    alone = _run(tmp_path / "alone", {"test_gpu.py": GPU_TESTS.replace("from .testing_utils", "from testing_utils")})
    assert b".npu()" in alone["test_gpu.py"].new


TRAINER = """def device_name(device):
    if device == "npu":
        return "Ascend"
    return str(device)
"""

TEST_MODEL = """import torch


class TestModel:
    def setup_method(self):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = torch.nn.Linear(2, 2).to(self.device)
"""


def test_a_device_value_held_by_another_module_keeps_the_check_that_chooses_it(tmp_path):
    """The package compares `device` with "npu", so its tests' "cuda" stays CUDA's case; the
    check choosing it stays too, or on an NPU the test would pick "cuda" (trl's tests)."""
    files = {
        "lib/__init__.py": "",
        "lib/trainer.py": TRAINER,
        "lib/tests/__init__.py": "",
        "lib/tests/test_model.py": TEST_MODEL,
    }
    result = _run(tmp_path, files)["lib/tests/test_model.py"]
    assert result.state == engine.UNCHANGED
    assert result.findings == [] and result.kept == 2
