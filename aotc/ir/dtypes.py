"""Element types: ONNX TensorProto codes <-> numpy dtypes <-> C types."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

# ONNX element type code -> numpy dtype, for the types the C target can hold.
_ONNX_TO_NP = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BOOL: np.dtype(np.bool_),
    # only at a graph's inputs and outputs: inside, float16 and bfloat16 are computed in
    # float32 (aotc/frontend/half.py). numpy has no bfloat16: ml_dtypes' (an onnx dependency).
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}
_NP_TO_ONNX = {v: k for k, v in _ONNX_TO_NP.items()}

FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT64 = np.dtype(np.int64)
INT32 = np.dtype(np.int32)
BOOL = np.dtype(np.bool_)
FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# 16-bit floats: stored at a graph's edges, computed in float32 (their values all are float32's)
NARROW_FLOATS = (FLOAT16, BFLOAT16)


class UnsupportedDtype(ValueError):
    pass


def from_onnx(code: int) -> np.dtype:
    try:
        return _ONNX_TO_NP[code]
    except KeyError:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else str(code)
        raise UnsupportedDtype(f"element type {name} is not supported") from None


def to_onnx(dtype) -> int:
    return _NP_TO_ONNX[np.dtype(dtype)]


def name(dtype) -> str:
    """Short human name, as used in the manifest: float32, int64, bool..."""
    return np.dtype(dtype).name


def from_name(s: str) -> np.dtype:
    return BFLOAT16 if s == "bfloat16" else np.dtype(s)


def is_float(dtype) -> bool:
    """A floating-point type (bfloat16 included, whose numpy kind is 'V')."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == BFLOAT16


def is_narrow_float(dtype) -> bool:
    """float16 or bfloat16: a storage type, computed in float32."""
    return np.dtype(dtype) in NARROW_FLOATS


def compute_dtype(dtype) -> np.dtype:
    """The dtype values stored as `dtype` are computed in."""
    return FLOAT32 if is_narrow_float(dtype) else np.dtype(dtype)
