"""Notes for the errors torch raises on the user's own model code (autograd, shapes, dtypes,
DTensor), read from the figures their messages carry, so the finding says what the numbers
mean: which dimension disagrees, by what factor a view is off, which dtype met which.
Parsers of the signatures in rules/log_torch.toml's "torch on the model's own code"."""

from __future__ import annotations

import math
import re
from typing import Any

# the spellings torch prints a dtype in: ScalarType names (Float, c10::BFloat16), C type
# names (float), legacy tensor types (torch.cuda.HalfTensor)
_DTYPES = {
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
    "half": "float16",
    "float16": "float16",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "bool": "bool",
    "byte": "uint8",
}


def _dtype(name: str) -> str:
    name = re.sub(r"^(?:c10::|torch\.)?(?:cuda\.|npu\.)?", "", name.strip("'\"")).lower()
    name = name.removesuffix("tensor")
    return _DTYPES.get(name, name)


def dtype_pair(groups: dict[str, str], line: str) -> dict[str, Any]:
    """The two dtypes an operator met, whichever of torch's spellings printed them."""
    want = groups.get("want") or groups.get("want2") or groups.get("a") or groups.get("a2") or ""
    got = groups.get("got") or groups.get("got2") or groups.get("b") or groups.get("b2") or ""
    pair = {_dtype(want), _dtype(got)}
    out = {"want": _dtype(want) or "one dtype", "got": _dtype(got) or "another"}
    if pair & {"bfloat16", "float16"} and "float32" in pair:
        out["dtype_note"] = (
            " A half-precision model met a float32 tensor (or the reverse): a part left in float32 (an input, a "
            "buffer such as rotary tables or a mask, a layer kept in fp32, the loss target), or a model cast to "
            "bf16/fp16 while the inputs are not"
        )
        out["dtype_fix"] = (
            "Run the forward under autocast (with torch.autocast(device_type, dtype=torch.bfloat16)) instead of "
            "casting by hand, or cast the odd operand to the other's dtype (x.to(weight.dtype)); a loss target must "
            "have the output's dtype (target.to(output.dtype))"
        )
    elif pair & {"int64", "int32"}:
        out["dtype_note"] = (
            " One operand is an integer tensor (token ids, labels, an index) where a float one is expected, or the reverse"
        )
        out["dtype_fix"] = (
            "Cast the operand to the dtype the op expects (labels: .long() for cross_entropy; float targets: .float() / .to(output.dtype))"
        )
    else:
        out["dtype_note"] = ""
        out["dtype_fix"] = (
            "Cast one operand to the other's dtype before the op (x.to(y.dtype)), or run the forward under autocast"
        )
    return out


def view_size(groups: dict[str, str], line: str) -> dict[str, Any]:
    """How far a view's target shape is from the tensor's size (a factor says which dim is wrong)."""
    dims = [int(d) for d in re.findall(r"-?\d+", groups.get("shape", ""))]
    size = int(groups.get("size", "0") or 0)
    known = [d for d in dims if d > 0]
    want = math.prod(known) if known else 0
    note = ""
    if -1 in dims and size and want and size % want:
        note = f" With -1 in the shape, {size} elements do not divide by the other dims' product {want}"
    elif want and size and -1 not in dims:
        if want > size and want % size == 0:
            note = f" The shape asks for {want // size}x the elements there are"
        elif size > want and size % want == 0:
            note = f" The tensor has {size // want}x the elements the shape holds"
        if note:
            note += (
                ": one dimension is off by that factor (a head count or hidden size that is not this rank's share "
                "under tensor parallelism, a sequence length or batch size assumed instead of read from the tensor)"
            )
    return {"view_note": note + "." if note else ""}


def matmul_dims(groups: dict[str, str], line: str) -> dict[str, Any]:
    """A matmul's inner dimensions: the input's last dim against the weight's first."""
    inner, weight_in = groups.get("b", "?"), groups.get("c", "?")
    return {"inner": inner, "weight_in": weight_in}


def inplace(groups: dict[str, str], line: str) -> dict[str, Any]:
    """The backward function that saved the tensor, when the message names it."""
    fn = groups.get("fn")
    return {"fn_note": f" (output {groups.get('out', '0')} of {fn})" if fn else ""}
