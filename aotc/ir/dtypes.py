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
    # float32 (aotc/frontend/narrow.py). numpy has no bfloat16: ml_dtypes' (an onnx dependency).
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    # 8- and 4-bit floats and 4- and 2-bit integers: likewise only at a graph's edges (inside,
    # float32 and int8 / uint8: aotc/frontend/narrow.py), one element per byte as ml_dtypes
    # holds them (a 4- or 2-bit element in the byte's low bits)
    TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    TensorProto.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    TensorProto.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    TensorProto.FLOAT8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
    TensorProto.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
    TensorProto.INT4: np.dtype(ml_dtypes.int4),
    TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
    TensorProto.INT2: np.dtype(ml_dtypes.int2),
    TensorProto.UINT2: np.dtype(ml_dtypes.uint2),
}
_NP_TO_ONNX = {v: k for k, v in _ONNX_TO_NP.items()}

FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT64 = np.dtype(np.int64)
INT32 = np.dtype(np.int32)
BOOL = np.dtype(np.bool_)
FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
# floats narrower than float32: stored at a graph's edges, computed in float32 (their values
# all are float32's)
SMALL_FLOATS = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                           ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz,
                                           ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn))
NARROW_FLOATS = (FLOAT16, BFLOAT16) + SMALL_FLOATS
# integers narrower than a byte: stored at a graph's edges, computed in the byte type that holds
# their values
SMALL_INTS = {np.dtype(ml_dtypes.int4): np.dtype(np.int8), np.dtype(ml_dtypes.uint4): np.dtype(np.uint8),
              np.dtype(ml_dtypes.int2): np.dtype(np.int8), np.dtype(ml_dtypes.uint2): np.dtype(np.uint8)}
_BY_NAME = {d.name: d for d in _ONNX_TO_NP.values()}


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
    return _BY_NAME[s] if s in _BY_NAME else np.dtype(s)


def is_float(dtype) -> bool:
    """A floating-point type (bfloat16 and the 8- and 4-bit floats included, whose numpy kind
    is 'V')."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in NARROW_FLOATS


def is_narrow_float(dtype) -> bool:
    """A float narrower than float32 (16, 8 or 4 bits): a storage type, computed in float32."""
    return np.dtype(dtype) in NARROW_FLOATS


def is_small_int(dtype) -> bool:
    """A 4- or 2-bit integer: a storage type, computed in int8 / uint8."""
    return np.dtype(dtype) in SMALL_INTS


def is_narrow(dtype) -> bool:
    """A storage type (a graph's inputs and outputs only) whose values are computed in another,
    compute_dtype()."""
    return is_narrow_float(dtype) or is_small_int(dtype)


def compute_dtype(dtype) -> np.dtype:
    """The dtype values stored as `dtype` are computed in."""
    dtype = np.dtype(dtype)
    if is_narrow_float(dtype):
        return FLOAT32
    return SMALL_INTS.get(dtype, dtype)


def int_range(dtype) -> tuple[int, int]:
    """The least and greatest value of an integer type (4- and 2-bit ones included)."""
    info = ml_dtypes.iinfo(np.dtype(dtype)) if is_small_int(dtype) else np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)
