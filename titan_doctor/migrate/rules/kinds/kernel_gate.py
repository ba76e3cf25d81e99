"""The kernel_gate rule: a device check that selects a CUDA-only kernel is left as it is
and reported (NPU110). python/gates.py finds, before the walk, which lines hold such a
check; this module owns the rule, the text pre-filters that decide whether a file is
scanned at all, and the check the pieces ask at a node (`checker`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context
from titan_doctor.migrate.rules.kind import Example, Family, Kind, Rule, fill, set_field
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import LITERALS


@dataclass(frozen=True, kw_only=True)
class KernelGate(Rule):
    """A device check (`x.device.type == "cuda"`, a name in `gates`, or `.attr` in `gates`
    such as ".is_cuda") whose guarded code uses a CUDA-only kernel (a `kernel = true`
    report rule, a name imported from a module with a path component matching one of
    `module_globs` or `extension_globs`, an object returned by one of `builders`) is left
    as is and reported (see python/gates.py). `extension_globs` name compiled extension
    modules only: a called name (`get_cuda_rng_tracker()`) is a function, never matched
    by them."""

    gates: tuple[str, ...] = ()
    module_globs: tuple[str, ...] = ()
    extension_globs: tuple[str, ...] = ()
    builders: tuple[str, ...] = ()  # calls whose result is a compiled CUDA extension


def checker(
    ctx: Context, rules: RuleSet, kernel_lines: dict[int, tuple[str, str]], line_of: Callable[[cst.CSTNode], int]
) -> Callable[[cst.CSTNode, str], bool]:
    """The check the pieces ask: True (after reporting NPU110) when the device check at
    `node` (shown as `shown`) selects a CUDA-only kernel, python/gates.py having found one
    on its line (`kernel_lines`: line -> (kernel, NPU alternative)); the caller then
    leaves the check as it is."""
    gate = rules.kernel_gate

    def selects_kernel(node: cst.CSTNode, shown: str) -> bool:
        hit = kernel_lines.get(line_of(node)) if gate is not None else None
        if hit is None:
            return False
        kernel, fix = hit
        ctx.emit(gate.code, Status.MANUAL, node, fill(gate.message, old=shown, new=kernel), fix or gate.fix)
        return True

    return selects_kernel


def _derive(rules: RuleSet) -> None:
    """Text a file must contain to be scanned: a device check (`gate_re`: a gate's last
    name, or a quoted device string) and a kernel (`kernel_re`: a kernel library's name
    anywhere, cpp_extension, or an import line naming a module that matches the globs)."""
    gate = rules.kernel_gate
    if gate is None:
        return
    words = {g.rsplit(".", 1)[-1] for g in gate.gates}
    device = LITERALS["device"].cuda
    rules.gate_re = re.compile("|".join([*(re.escape(w) for w in sorted(words)), f"[\"']{device}"]).encode())
    # a CUDA-only name is spelled by its package (flash_attn, pynvml), or for torch's own
    # names by its last part (CUDA_HOME, get_device_capability); nvidia-smi by its string
    libraries = {_spelling(r.match) for r in rules.names.values() if getattr(r, "kernel", False)}
    libraries |= {r.match.rsplit(".", 1)[-1] for r in rules.capabilities.values()}
    libraries |= {r.marker for _, r in rules.strings if r.kernel}
    libraries.add("cpp_extension")
    # a glob's fixed part starts a name (torch._C._cuda_*: `_cuda_isInBadFork`)
    prefixes = {last.split("*")[0] for head, last, r in rules.name_globs if head and r.kernel} - {""}
    fragments = {g.replace("*", "") for g in (*gate.module_globs, *gate.extension_globs)} - {""}
    words = b"|".join(re.escape(w.encode()) for w in sorted(libraries, key=len, reverse=True))
    starts = b"|".join(re.escape(w.encode()) for w in sorted(prefixes, key=len, reverse=True))
    spelled = rb"(?<![\w])(?:(?:" + words + rb")(?![\w])" + (rb"|" + starts if starts else b"") + rb")"
    imports = None
    if fragments:
        imports = re.compile(
            rb"(?m)^[ \t]*(?:from|import)[ \t][^\n]*?(?:"
            + b"|".join(re.escape(f.encode()) for f in sorted(fragments))
            + rb")"
        )
    rules.kernel_re = _AnyOf(re.compile(spelled), imports)


class _AnyOf:
    """A file's text test as two regexes (a word anywhere, or an import line naming a glob's
    fragment): one alternation of both costs a try at every position for the second."""

    def __init__(self, *patterns: re.Pattern | None) -> None:
        self.patterns = [p for p in patterns if p is not None]

    def search(self, data: bytes):
        for p in self.patterns:
            m = p.search(data)
            if m:
                return m
        return None


def _spelling(match: str) -> str:
    """The word a use of a CUDA-only name spells for sure: its last part (the import
    names it, `from vllm...pynccl import X`; so does a use through the package,
    torch.utils.cpp_extension.CUDA_HOME); the rarest word of it, too."""
    return match.rsplit(".", 1)[-1]


KERNEL_GATE = Kind(
    "kernel_gate",
    KernelGate,
    set_field("kernel_gate"),
    valid=(
        Example(
            "import torch\n\n\ndef f(x):\n    if x.is_cuda:\n        return x.cuda()\n    return x\n",
            fixed="import torch\n\n\ndef f(x):\n    if x.is_npu:\n        return x.npu()\n    return x\n",
        ),
    ),
    invalid=(
        Example(
            "import triton\n\n\n@triton.jit\ndef _k(x):\n    pass\n\n\n"
            "def f(x):\n    if x.is_cuda:\n        return _k(x)\n    return x\n"
        ),
    ),
)

FAMILY = Family(
    kinds=(KERNEL_GATE,),
    fields={
        "kernel_gate": lambda: None,
        "kernel_re": lambda: None,  # words of CUDA-only kernel libraries in a file (derived)
        "gate_re": lambda: None,  # text of a device check (derived)
    },
    derive=_derive,
)
