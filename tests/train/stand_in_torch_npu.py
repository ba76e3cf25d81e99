"""A stand-in for the four torch_npu ops titan_train/models/kernels.py calls, in plain PyTorch, for
CPU tests only (the product never fakes an NPU).

Each op follows its entry in torch_npu 2.13.0's `torch_npu/_op_plugin_docs.py` (the text is
quoted in DOCUMENTED below and test_kernels.py checks it is still in the wheel): argument
names and defaults as in the op's schema, tuple returns as the meta functions in
`torch_npu/op_plugin/meta/_meta_registrations.py`, and it refuses what the docs rule out
(a gamma of another dtype, a causal mask of the wrong size or polarity, dropout).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake

# op -> sentences of its doc entry that the semantics below rely on
DOCUMENTED = {
    "npu_rms_norm": [
        "相比LayerNorm算子，其去掉了减去均值的部分",  # LayerNorm without the mean
        "gamma：Tensor类型，数据类型需要和self保持一致",  # gamma has self's dtype
        "第1个输出为Tensor，计算公式的最终输出y",  # output 1 is y
        "第2个输出为Tensor，rms_norm的reverse rms中间结果",  # output 2 is rstd
    ],
    "npu_rotary_mul": [
        "x1, x2 = torch.chunk(input, 2, -1)",  # half mode
        "x_new = torch.cat((-x2, x1), dim=-1)",
        "x1 = input[..., ::2]",  # interleave mode
        "x2 = input[..., 1::2]",
        'x_new = rearrange(torch.stack((-x2, x1), dim=-1), "... d two -> ...(d two)", two=2)',
        "output = r1 * input + r2 * x_new",
        "input为BSND: 1S1D",  # interleave r1 layout
        "B * N < 1000",
    ],
    "npu_fusion_attention": [
        "$y=Softmax(Mask(scale*(pse+query*key^{T}),atten_mask),keep_prob)$",
        "取值为1(或True)代表该位不参与计算(被遮蔽)",  # mask True = masked out
        "支持BSH、SBH、BSND、BNSD",
        "2: leftUpCausal模式",
        "传入的atten_mask为优化后的压缩下三角矩阵(2048*2048)",
        "当Nq/Nkv > 1时, 即为GQA",
        "第1个输出为Tensor, 计算公式的最终输出attention_out",
        "共7个输出, 类型依次为Tensor、Tensor、Tensor、Tensor、int、int、int",
    ],
    "npu_swiglu": [
        "outputs = swiglu\\(x, dim = -1) = swish(A) * B = A * sigmoid(A) * B",
        "“A”和“B”是x沿dim维度切分的Tensor",
    ],
}


def npu_rms_norm(self, gamma, epsilon=1e-06):
    if gamma.dtype != self.dtype:
        raise RuntimeError(f"npu_rms_norm: gamma {gamma.dtype} must have the dtype of self {self.dtype}")
    dims = tuple(range(self.dim() - gamma.dim(), self.dim()))
    x32 = self.float()
    rstd = torch.rsqrt(x32.pow(2).mean(dims, keepdim=True) + epsilon)
    return (x32 * rstd * gamma.float()).to(self.dtype), rstd


def npu_rotary_mul(self, r1, r2, rotary_mode="half", rotate=None):
    if self.dim() != 4 or rotate is not None:
        raise RuntimeError("npu_rotary_mul: stand-in supports 4-D input without `rotate`")
    if rotary_mode == "half":
        x1, x2 = torch.chunk(self, 2, -1)
        x_new = torch.cat((-x2, x1), dim=-1)
    elif rotary_mode == "interleave":
        if sum(d > 1 for d in r1.shape[:3]) > 1 or r1.shape != r2.shape:
            raise RuntimeError("npu_rotary_mul interleave: r1/r2 must be 11SD, 1S1D or S11D")
        x1, x2 = self[..., ::2], self[..., 1::2]
        x_new = torch.stack((-x2, x1), dim=-1).flatten(-2)
    else:
        raise RuntimeError(f"npu_rotary_mul: rotary_mode {rotary_mode!r} is not 'half' or 'interleave'")
    return r1 * self + r2 * x_new


def _to_bnsd(t, layout, head_num):
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.unflatten(-1, (head_num, -1)).transpose(1, 2)
    if layout == "SBH":
        return t.unflatten(-1, (head_num, -1)).permute(1, 2, 0, 3)
    raise RuntimeError(f"npu_fusion_attention: stand-in has no layout {layout!r}")


def _from_bnsd(t, layout):
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.transpose(1, 2).flatten(-2)
    return t.permute(2, 0, 1, 3).flatten(-2)  # SBH


def npu_fusion_attention(
    query,
    key,
    value,
    head_num,
    input_layout,
    pse=None,
    padding_mask=None,
    atten_mask=None,
    scale=1.0,
    keep_prob=1.0,
    pre_tockens=2147483647,
    next_tockens=2147483647,
    inner_precise=0,
    prefix=None,
    actual_seq_qlen=None,
    actual_seq_kvlen=None,
    sparse_mode=0,
    gen_mask_parallel=True,
    sync=False,
    softmax_layout="",
    sink=None,
    dropout_mask=None,
    seed=0,
    offset=0,
):
    if keep_prob != 1.0 or pse is not None:
        raise RuntimeError("npu_fusion_attention: stand-in has no dropout or pse")
    q = _to_bnsd(query, input_layout, head_num)
    kv_heads = {"BSND": key.shape[2], "BNSD": key.shape[1]}.get(input_layout, key.shape[-1] // q.shape[-1])
    k, v = _to_bnsd(key, input_layout, kv_heads), _to_bnsd(value, input_layout, kv_heads)
    if q.shape[1] != head_num or head_num % k.shape[1]:
        raise RuntimeError(
            f"npu_fusion_attention: head_num {head_num}, query has {q.shape[1]} heads, "
            f"key {k.shape[1]}: Nq must equal head_num and be a multiple of Nkv"
        )
    # GQA: query head h reads kv head h // (Nq / Nkv), the grouping torch_npu's tensor-parallel
    # rule for this op assumes when it shards q and k heads alike (distributed/tensor/_attention.py)
    group = head_num // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    sq, skv = q.shape[2], k.shape[2]
    if atten_mask is None:
        masked = None
    elif sparse_mode in (2, 3):
        want = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
        # a fake tensor (the memory planner's trace) has a shape but no values to compare,
        # like the input of the op's meta function
        values_wrong = not is_fake(atten_mask) and not torch.equal(atten_mask.bool().cpu(), want)
        if atten_mask.shape != (2048, 2048) or values_wrong:
            raise RuntimeError(
                "npu_fusion_attention: sparse_mode 2/3 needs the compressed 2048x2048 mask with True above the diagonal"
            )
        shift = 0 if sparse_mode == 2 else skv - sq  # leftUpCausal / rightDownCausal
        i, j = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
        masked = j > i + shift
    elif sparse_mode == 0:
        masked = atten_mask.bool()
    else:
        raise RuntimeError(f"npu_fusion_attention: stand-in has no sparse_mode {sparse_mode}")
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    if masked is not None:
        scores = scores.masked_fill(masked.to(scores.device), float("-inf"))
    out = F.softmax(scores, dim=-1) @ v.float()
    b = q.shape[0]
    softmax_max = torch.zeros(b, head_num, sq, 8)
    return (
        _from_bnsd(out.to(query.dtype), input_layout),
        softmax_max,
        softmax_max.clone(),
        torch.empty(0, dtype=query.dtype),
        0,
        0,
        0,
    )


def npu_swiglu(self, dim=-1):
    a, b = torch.chunk(self, 2, dim=dim)
    return a * torch.sigmoid(a) * b
