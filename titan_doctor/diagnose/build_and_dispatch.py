"""What three classes of torch-ecosystem failure mean, read from their own text rather than
from one example: torch's dispatcher finding no kernel for the inputs' backend, a torch
feature that validates the device and refuses this one, and a C/C++ link that leaves a
symbol undefined. Each parser turns the matched groups into the note and fix of its
signature (rules/log_torch.toml: op.no_kernel_for_backend, op.feature_not_on_device,
build.undefined_reference)."""

from __future__ import annotations

import re
from typing import Any

# torch_npu registers its kernels under the PrivateUse1 dispatch key (renamed "npu" in Python);
# older releases printed their own key, NPU. The Autograd / Autocast keys of the same backend
# say the same thing one level up.
_NPU_KEYS = re.compile(r"^(?:Autograd|Autocast|Sparse|Quantized)?(?:PrivateUse1|NPU)$")
_AVAILABLE = re.compile(r"is only available for these backends: \[(?P<list>[^\]]*)\]")
# extensions whose operators ship CUDA kernels only (their NPU builds, where one exists, are
# separate packages)
_CUDA_EXTENSIONS = ("xformers", "flash_attn", "vllm", "_C", "torchvision", "mmcv", "apex", "bitsandbytes", "fbgemm")

_NPU_OP_FIX = (
    "On the NPU: call an equivalent operator that torch_npu implements (the unfused form of a fused aten op, or "
    "the torch_npu.npu_* kernel for it), or run this one op on the CPU (x.cpu() -> op -> .to('npu')) until "
    "torch_npu adds it; upgrading torch_npu together with its matching CANN brings newer operators (torch_npu's "
    "supported-operator list says which release has it)"
)


def backend_kernel(groups: dict[str, str], line: str) -> dict[str, Any]:
    """Which mistake 'Could not run <op> with arguments from the <backend> backend' is."""
    op, backend = groups.get("op", ""), groups.get("backend", "")
    namespace = op.split("::")[0] if "::" in op else "aten"
    m = _AVAILABLE.search(line)
    available = [b.strip() for b in m.group("list").split(",")] if m else []
    shown = [b for b in available if not b.startswith(("Autograd", "Autocast", "Functionalize", "Python", "Tracer"))]
    out = {"available_note": f"; it has kernels only for: {', '.join(shown[:8])}" if shown else ""}
    if _NPU_KEYS.match(backend):
        if namespace != "aten" and namespace.split(".")[0] in _CUDA_EXTENSIONS:
            out["backend_note"] = (
                f" (PrivateUse1 is the NPU): {op} is an operator of the {namespace} extension, whose compiled "
                "kernels are CUDA's, so it has none for the NPU"
            )
            out["backend_fix"] = (
                f"Do not call {namespace}'s compiled operators on the NPU: take the library's pure-PyTorch path or "
                "its NPU build where one exists (e.g. attention: scaled_dot_product_attention / "
                "torch_npu.npu_fusion_attention)"
            )
        else:
            out["backend_note"] = f" (PrivateUse1 is the NPU): torch_npu registers no kernel of {op} in this release"
            out["backend_fix"] = _NPU_OP_FIX
    elif backend in ("CPU", "AutogradCPU") and (namespace == "npu" or "npu" in op.lower()):
        out["backend_note"] = f": {op} is torch_npu's own operator and its inputs are on the CPU"
        out["backend_fix"] = (
            "Move the operator's inputs to the NPU first (tensor.to('npu') / .npu()); torch_npu's npu_* operators run only on NPU tensors"
        )
    elif backend in ("CPU", "CUDA", "XPU", "MPS", "HPU"):
        dev = backend.lower()
        out["backend_note"] = f": its inputs are {dev} tensors, and the operator is not implemented there"
        out["backend_fix"] = (
            f"Move the inputs to a device the operator supports{' (' + ', '.join(shown[:4]) + ')' if shown else ''}, "
            "or use an operator that has a kernel for this device"
        )
    elif backend == "Meta":
        out["backend_note"] = (
            ": the operator has no meta (shape-only) kernel, which fake tensors need (torch.compile / "
            "meta-device init / FSDP's deferred init trace through it)"
        )
        out["backend_fix"] = (
            "Run that part eagerly (torch.compiler.disable on the function calling it), or initialise the model "
            "on a real device instead of meta; a newer torch / torch_npu may add the meta kernel"
        )
    else:
        out["backend_note"] = (
            f": inputs of the {backend} kind (layout, quantization or dispatch key) are not supported by it"
        )
        out["backend_fix"] = (
            "Give the operator inputs of a kind it supports (a dense, non-quantized tensor on a device it lists)"
        )
    return out


def feature_device(groups: dict[str, str], line: str) -> dict[str, Any]:
    """A feature that checks the device and lists the ones it runs on."""
    found = re.search(r"(?:Found input tensors on|got|on) (?P<dev>[a-z]+[\w:]*) device", line)
    dev = found.group("dev") if found else ""
    npu = dev.startswith("npu") or dev.startswith("privateuseone")
    feature = groups.get("feature", "this feature")
    out = {"found_note": f"; the inputs are on {dev}" if dev else ""}
    if "attention" in feature.lower() or "flex" in feature.lower():
        out["feature_fix"] = (
            "Use an attention implementation that runs on this device: scaled_dot_product_attention "
            "(transformers: attn_implementation='sdpa' or 'eager')"
            + ("; on Ascend, torch_npu.npu_fusion_attention is the fused kernel" if npu or not dev else "")
        )
    else:
        out["feature_fix"] = (
            f"Turn {feature} off (or take the code's plain-PyTorch path) on this device, or run that part on a "
            "device it lists"
        )
    return out


# the names (demangled) and the library that defines them, most specific first
_SYMBOL_HOMES = (
    (re.compile(r"\b(?:torch_npu|c10_npu|at_npu)::"), "npu"),
    (re.compile(r"std::__cxx11::"), "abi"),
    (re.compile(r"^(?:acl[A-Za-z]|aclnn|Hccl|hccl[A-Z])"), "cann"),
    (re.compile(r"^(?:c10|at|torch|caffe2)::"), "torch"),
)


def link_error(groups: dict[str, str], line: str) -> dict[str, Any]:
    """Who defines the undefined symbol (or which library the linker cannot find)."""
    sym, lib = groups.get("sym", ""), groups.get("lib", "")
    if lib:
        return {
            "what": f"the library -l{lib}",
            "link_note": f": the linker looked for lib{lib}.so on its search path and found none",
            "link_fix": (
                f"Add the folder holding lib{lib}.so to the link (-L<dir>, or LIBRARY_PATH); for CANN's libraries "
                "(ascendcl, hccl, opapi, runtime) source /usr/local/Ascend/ascend-toolkit/set_env.sh first, which puts "
                "${ASCEND_TOOLKIT_HOME}/lib64 on the path"
            ),
        }
    home = next((h for pattern, h in _SYMBOL_HOMES if pattern.search(sym)), "")
    out = {"what": f"the symbol {sym[:120]}"}
    if home == "npu":
        out["link_note"] = (
            ": it is a C++ API of torch_npu. The libtorch_npu.so inside the Python torch_npu wheel exports what the "
            "Python package uses, not the standalone C++ API (torch_npu::init_npu and friends)"
        )
        out["link_fix"] = (
            "Link the standalone C++ library instead: build libtorch_npu from the Ascend/pytorch sources with its "
            "build_libtorch_npu.py script and link that; or, with the wheel's library, initialise the device the "
            "way it exports (aclInit, then c10_npu::SetDevice)"
        )
    elif home == "abi":
        out["link_note"] = (
            ": its std::__cxx11 strings say it was compiled with another C++ string ABI (_GLIBCXX_USE_CXX11_ABI) "
            "than the library that should define it"
        )
        out["link_fix"] = (
            "Compile with the ABI torch was built with: python -c 'import torch; print(torch.compiled_with_cxx11_abi())' "
            "and pass -D_GLIBCXX_USE_CXX11_ABI=0/1 to match (CMake: add_compile_definitions)"
        )
    elif home == "cann":
        out["link_note"] = ": it is defined by a CANN library (libascendcl.so, libhccl.so, libopapi.so), not linked"
        out["link_fix"] = (
            "Link CANN's libraries from ${ASCEND_TOOLKIT_HOME}/lib64 (-lascendcl -lhccl -lopapi after sourcing "
            "set_env.sh), from the same CANN release as the headers"
        )
    elif home == "torch":
        out["link_note"] = (
            ": it is defined by libtorch (libc10.so, libtorch_cpu.so), not linked or from another release"
        )
        out["link_fix"] = (
            "Link libtorch from the same torch as the headers: CMake find_package(Torch) with "
            "CMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)') and "
            "target_link_libraries(<target> ${TORCH_LIBRARIES})"
        )
    else:
        out["link_note"] = ": no library on the link line defines it"
        out["link_fix"] = (
            "Add the library that defines it to the link line (nm -DC <lib>.so | grep <name> finds which), in the same release as the headers"
        )
    return out
