"""The four ops of a LLaMA block that Ascend has fused kernels for, picked once per model by
device: RMSNorm, rotary embedding, causal attention and SwiGLU.

`REFERENCE` is plain PyTorch and runs everywhere (it is what the model computed before this
module existed). `for_device("npu")` returns the torch_npu twins. model.py calls these ops
and nothing else for them, so a reader of the model sees what runs on the NPU, and this file
and device.py are the only ones that touch torch_npu (imported here only when an NPU model is
built, so importing the model never needs CANN).

Each NPU adapter cites the torch_npu 2.13.0 documentation entry it relies on
(torch_npu/_op_plugin_docs.py in the wheel). tests/train/test_kernels.py binds every call to
the op's schema in the wheel and checks each adapter against the reference on CPU, through a
stand-in module that implements those documented semantics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


@dataclass(frozen=True)
class Kernels:
    name: str
    rms_norm: Callable[[Tensor, Tensor, float], Tensor]  # (x, weight, eps) -> x / rms(x) * weight
    rope: Callable[[Tensor, Tensor], Tensor]  # (x (B,S,H,D), table (2,S,D/2)) -> rotated x
    attention: Callable[[Tensor, Tensor, Tensor], Tensor]  # causal; q (B,S,Hq,D), k/v (B,S,Hkv,D) -> (B,S,Hq,D)
    swiglu: Callable[[Tensor, Tensor], Tensor]  # (gate, up) -> silu(gate) * up


# ---------------------------------------------------------------- reference (any device)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Normalized in fp32 whatever the input dtype, then scaled."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return normed.type_as(x) * weight


def rope(x: Tensor, table: Tensor) -> Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of each head by the angles in `table` = (cos, sin),
    in real arithmetic (NPUs cannot index complex64 tensors)."""
    cos, sin = table[0][None, :, None, :], table[1][None, :, None, :]
    x32 = x.float().unflatten(-1, (-1, 2))
    real, imag = x32[..., 0], x32[..., 1]
    rotated = torch.stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1)
    return rotated.flatten(-2).type_as(x)


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal scaled dot-product attention; each kv head serves Hq / Hkv query heads."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    n_rep = q.shape[1] // k.shape[1]
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    return F.silu(gate) * up


REFERENCE = Kernels("reference", rms_norm, rope, attention, swiglu)


# ---------------------------------------------------------------- torch_npu twins

COMPRESSED_MASK = 2048  # sparse_mode 2 takes this fixed-size mask whatever the sequence length
ROPE_MAX_BN = 1000  # interleave mode needs batch * heads < 1000


def npu_kernels() -> Kernels:
    """The torch_npu fused ops. torch_npu registers DTensor sharding rules for all four
    (torch_npu/distributed/tensor/_math_ops.py, _attention.py), so they also run on the
    sequence-parallel norms of a tensor-parallel model."""
    import torch_npu

    def npu_rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
        # doc "npu_rms_norm": returns (y, rstd); the 1st output is the normalized result y.
        # gamma must have the dtype of self.
        return torch_npu.npu_rms_norm(x, weight.to(x.dtype), epsilon=eps)[0]

    def npu_rope(x: Tensor, table: Tensor) -> Tensor:
        # doc "npu_rotary_mul", interleave mode: x_new interleaves (-x[1::2], x[::2]) and
        # output = r1 * x + r2 * x_new, i.e. out[2i] = x[2i] cos - x[2i+1] sin and
        # out[2i+1] = x[2i+1] cos + x[2i] sin: our pairs, with r1 / r2 = cos / sin repeated per
        # pair, shaped 1S1D for BSND input. Constraint: B * N < 1000, else the reference.
        if x.shape[0] * x.shape[2] >= ROPE_MAX_BN:
            return rope(x, table)
        cos = table[0].repeat_interleave(2, dim=-1)[None, :, None, :].to(x.dtype)
        sin = table[1].repeat_interleave(2, dim=-1)[None, :, None, :].to(x.dtype)
        return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")

    def npu_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        # doc "npu_fusion_attention": layout BSND is our (batch, seq, heads, head_dim), no
        # transposes; head_num = query heads, Nq / Nkv > 1 is GQA (no repeat of k, v);
        # atten_mask True = masked; sparse_mode 2 (leftUpCausal) takes the compressed
        # 2048x2048 upper-triangular mask and ignores pre/next_tockens; output 1 is the result.
        # 4 MiB, built per call: no cached tensor outlives its device or a fake-tensor trace
        mask = torch.ones(COMPRESSED_MASK, COMPRESSED_MASK, dtype=torch.bool, device=q.device).triu_(1)
        return torch_npu.npu_fusion_attention(
            q, k, v, q.shape[2], "BSND", atten_mask=mask, scale=1.0 / math.sqrt(q.shape[-1]), sparse_mode=2
        )[0]

    def npu_swiglu(gate: Tensor, up: Tensor) -> Tensor:
        # doc "npu_swiglu": x is split in two halves A, B along dim; output = silu(A) * B.
        return torch_npu.npu_swiglu(torch.cat([gate, up], dim=-1), dim=-1)

    return Kernels("torch_npu", npu_rms_norm, npu_rope, npu_attention, npu_swiglu)


def for_device(device_type: str) -> Kernels:
    """The fused ops on an NPU, the reference everywhere else."""
    return npu_kernels() if device_type == "npu" else REFERENCE
