"""The CUDA words and their NPU spellings, spelled once: "cuda" -> "npu" as a device,
"nccl" -> "hccl" as a backend, and where torch_npu puts torch.npu. Every other module
asks here (tests/migrate/test_rules.py checks that no other module spells them)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Literal:
    """A string kind whose CUDA spelling has an NPU spelling: a device or a backend."""

    kind: str
    cuda: str  # the word on a CUDA host
    npu: str  # the word on an Ascend host
    whole: re.Pattern  # a complete value of this kind that names CUDA
    head: re.Pattern  # the start of a value built at run time ("cuda:" + ...)

    def rewrite(self, value: str) -> str | None:
        """The NPU spelling of a complete value, or None when it is not one of ours."""
        if self.kind == "device":
            return self.npu + value[len(self.cuda) :] if self.whole.match(value) else None
        if not self.whole.match(value):
            return None
        dev = LITERALS["device"]
        value = re.sub(rf"\b{self.cuda}\b", self.npu, value)
        return re.sub(rf"\b{dev.cuda}:", f"{dev.npu}:", value)

    def rewrite_head(self, text: str) -> str | None:
        """The NPU spelling of the literal part that starts a composed value
        ("cuda:" + str(rank), "cuda:%d" % rank, "cuda:{}".format(rank), f"cuda:{rank}")."""
        return self.npu + text[len(self.cuda) :] if self.head.match(text) else None


# torch_npu registers torch.npu as a module (the torch.cuda counterpart); its submodules
# are not in sys.modules, so imports of them go through the torch_npu package.
NPU_MODULE = ("torch", "npu")
NPU_PACKAGE = "torch_npu"

LITERALS: dict[str, Literal] = {
    "device": Literal(
        "device",
        "cuda",
        "npu",
        re.compile(r"^cuda(:\d+)?$"),
        re.compile(r"^cuda(?::(?:\d*|%[-0-9]*[dis]|\{[^{}]*\}))?$"),
    ),
    # "nccl", or a per-device list such as "cpu:gloo,cuda:nccl"
    "backend": Literal(
        "backend", "nccl", "hccl", re.compile(r"^(?=.*\bnccl\b)(?:\w+:)?\w+(?:,(?:\w+:)?\w+)*$"), re.compile(r"^nccl$")
    ),
}
# `migrate --target`: for Ascend NPU (the default), or device-generic PyTorch
# (rules/portable.py). command.py spells them again (its --help loads no rules):
# tests/migrate/test_portable.py checks both agree.
TARGETS = ("npu", "portable")
GATE_NPU = "npu"  # a rename rule's gate = "npu": the next name must be one torch.npu provides

# The other accelerators torch knows by device type (a device string, `torch.<name>`, an
# `is_<name>_available()` helper, an enum member such as DistributedType.MULTI_XPU): code
# that names one of them already runs on more than CUDA, and migrate leaves its CUDA
# parts as they are (python/backends.py). The NPU is one of them: code that names it
# already answers for Ascend.
OTHER_DEVICES = (
    LITERALS["device"].npu,
    "xpu",
    "mps",
    "hpu",
    "mlu",
    "musa",
    "xla",
    "tpu",
    "sdaa",
    "neuron",
    "mtia",
    "privateuseone",
)
# Platforms that torch runs as "cuda" but code still tells apart by name (ROCm): a value
# list or dispatch that names one chooses between them, so its "cuda" stays too.
OTHER_PLATFORMS = ("hip", "rocm")
# Collective backends of other accelerators, by the device they serve.
OTHER_BACKENDS = {LITERALS["backend"].npu: LITERALS["device"].npu, "xccl": "xpu", "cncl": "mlu", "mccl": "musa"}
NPU = LITERALS["device"].npu
CUDA = LITERALS["device"].cuda
# The variable each accelerator's runtime reads for the devices a process may see. A file
# that sets another accelerator's beside CUDA's (CUDA_VISIBLE_DEVICES next to Intel's
# ZE_AFFINITY_MASK) already picks devices on each of them: CUDA's line stays and Ascend's
# is what is missing (python/backends.py, text/lines.py). Sources: Intel oneAPI Level Zero
# docs (ZE_AFFINITY_MASK), ROCm docs (HIP_/ROCR_VISIBLE_DEVICES), Habana docs
# (HABANA_VISIBLE_MODULES), Cambricon (MLU_VISIBLE_DEVICES), Moore Threads
# (MUSA_VISIBLE_DEVICES), CANN env var reference (ASCEND_RT_VISIBLE_DEVICES).
VISIBLE_DEVICES_ENV = {
    "ASCEND_RT_VISIBLE_DEVICES": LITERALS["device"].npu,
    "ZE_AFFINITY_MASK": "xpu",
    "HIP_VISIBLE_DEVICES": "hip",
    "ROCR_VISIBLE_DEVICES": "rocm",
    "HABANA_VISIBLE_MODULES": "hpu",
    "MLU_VISIBLE_DEVICES": "mlu",
    "MUSA_VISIBLE_DEVICES": "musa",
}
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
_VISIBLE_RE = re.compile(r"\b(" + "|".join(VISIBLE_DEVICES_ENV) + r")\b")


def visible_devices_set(text: str) -> frozenset[str]:
    """The accelerators (other than CUDA) whose visible-devices variable `text` names."""
    return frozenset(VISIBLE_DEVICES_ENV[m.group(1)] for m in _VISIBLE_RE.finditer(text))


GENERIC_MODULE = ("torch", "accelerator")  # torch.accelerator: the device-generic API
GENERIC_CALLS = ("torch.get_device_module",)  # device-generic too (answers for npu)
