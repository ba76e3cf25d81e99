"""dtype names as the formats spell them, without importing torch."""

from __future__ import annotations

from titan_train.config.precision import DTYPE_NAMES, PRECISIONS

# torch.save storage classes (torch/storage.py `_pickle_storage_type`)
STORAGE_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
    "Float8_e4m3fnStorage": "float8_e4m3fn",
    "Float8_e5m2Storage": "float8_e5m2",
}

# safetensors header "dtype" (https://github.com/huggingface/safetensors, format spec)
SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}

ITEMSIZE = {
    **dict(PRECISIONS.values()),
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

# what `--dtype` / `export_dtype` accept: the trainer's precision names
SHORT_NAMES = DTYPE_NAMES


def torch_dtype(name: str):
    """torch.<name>, imported late (callers that get here already use torch)."""
    import torch

    return getattr(torch, name)


def itemsize(dtype: str) -> int:
    """Bytes per element of a checkpoint dtype name (4 for one we do not list)."""
    return ITEMSIZE.get(dtype, 4)
