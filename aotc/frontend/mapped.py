"""Weights read in place: a model's large initializers are memory-mapped from its files, never
copied into the protobuf or into Python memory.

A model's weights are most of its bytes. Parsing them into the ModelProto, converting them to
arrays and copying the proto for rewriting would hold several copies at once (a 0.5 GB
decoder peaked at 3 GB while importing). Instead:

- `skeleton(data, location)`: the serialized model with the `raw_data` of each large
  initializer of the main graph replaced by ONNX's external-data entries pointing back into the
  .onnx file itself (offset and length of those bytes in it). The proto parsed from the skeleton
  is small; its initializers keep their names, types and dims, so ONNX's shape inference and the
  rewrites see them as before.
- `mark(t, path, offset, length)`: an external tensor whose location the loader has checked
  (inside the model's folder, long enough) is marked as such, with its resolved path, so that
  `array(t)` may map it and validation need not see its bytes.
- `Files.array(t)`: the tensor's values, a read-only view of its bytes in one mapping per file
  (one descriptor, however many tensors). Element types numpy reads as they are stored are
  mapped; others (4-bit, strings...) are read into the tensor and converted as before.
- `drop_pages(arr)`: what has read a whole weight and is done with it (the subnormal scan, the
  GEMM packer, the weights file's writer) lets its pages leave the process's resident memory;
  they stay in the page cache, and a later read maps them in again.

Initializers of subgraphs and tensors in attributes keep their bytes in the proto (they are
small in the models that have them). A mapped file must not shrink while a graph that maps it
is alive (as with any mapped file, reading past its new end would stop the process).
"""
from __future__ import annotations

import mmap
import os

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# initializers with fewer bytes stay in the proto (shape inference reads small constants' values)
MIN_MAPPED_BYTES = 4096

# the external_data key that says the loader checked the entry and resolved its location
MARK = "aotc_checked"

# element types whose raw bytes numpy reads as they are (little-endian)
_MAPPABLE = {TensorProto.FLOAT: "<f4", TensorProto.DOUBLE: "<f8", TensorProto.FLOAT16: "<f2",
             TensorProto.INT8: "i1", TensorProto.UINT8: "u1", TensorProto.INT16: "<i2", TensorProto.UINT16: "<u2",
             TensorProto.INT32: "<i4", TensorProto.UINT32: "<u4", TensorProto.INT64: "<i8",
             TensorProto.UINT64: "<u8", TensorProto.BOOL: "?"}


class _Malformed(Exception):
    pass


def _varint(buf, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= end or shift > 63:
            raise _Malformed
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf, start: int, end: int):
    """(field number, wire type, start of the field's key, start of its value, its end) of each
    field of the message in buf[start:end]."""
    i = start
    while i < end:
        at = i
        key, i = _varint(buf, i, end)
        num, wire = key >> 3, key & 7
        if wire == 0:
            _, j = _varint(buf, i, end)
        elif wire == 1:
            j = i + 8
        elif wire == 2:
            n, i = _varint(buf, i, end)
            j = i + n
        elif wire == 5:
            j = i + 4
        else:
            raise _Malformed
        if num == 0 or j > end:
            raise _Malformed
        yield num, wire, at, i, j
        i = j


def _encode_varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _message_field(num: int, payload: bytes) -> bytes:
    return _encode_varint(num << 3 | 2) + _encode_varint(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _message_field(13, _message_field(1, key.encode()) + _message_field(2, value.encode()))


# field numbers: ModelProto.graph, GraphProto.initializer, TensorProto.dims / data_type / raw_data /
# external_data / data_location
_GRAPH, _INITIALIZER, _DIMS, _TYPE, _RAW, _EXTERNAL, _LOCATION = 7, 5, 1, 2, 9, 13, 14


def _tensor(buf, start: int, end: int, location: str) -> bytes | None:
    """The initializer in buf[start:end] with its raw_data as a reference into the file; None
    to keep it as it is."""
    fields = list(_fields(buf, start, end))
    raws = [f for f in fields if f[0] == _RAW]
    if len(raws) != 1 or any(f[0] in (_EXTERNAL, _LOCATION) for f in fields):
        return None
    _, wire, _, v0, v1 = raws[0]
    if wire != 2 or v1 - v0 < MIN_MAPPED_BYTES or v1 - v0 != _declared_bytes(buf, fields):
        return None          # (a payload that does not fit its dims: validation says so, from the proto)
    kept = b"".join(bytes(buf[a:j]) for num, _, a, _, j in fields if num != _RAW)
    return (kept + _entry("location", location) + _entry("offset", str(v0)) + _entry("length", str(v1 - v0))
            + _encode_varint(_LOCATION << 3) + _encode_varint(TensorProto.EXTERNAL))


def _declared_bytes(buf, fields) -> int | None:
    """The bytes a tensor's dims and element type call for; None where it is not a mapped type."""
    types = [f for f in fields if f[0] == _TYPE]
    if len(types) != 1 or types[0][1] != 0:
        return None
    dtype = _MAPPABLE.get(_varint(buf, types[0][3], types[0][4])[0])
    if dtype is None:
        return None
    n = np.dtype(dtype).itemsize
    for num, wire, _, v0, v1 in fields:
        if num != _DIMS:
            continue
        while v0 < v1:                  # packed (wire type 2) or one value (0)
            d, v0 = _varint(buf, v0, v1)
            if d >= 1 << 62:            # a negative dim: validation refuses it
                return None
            n *= d
            if wire == 0:
                break
    return n


def skeleton(buf, location: str) -> bytes | None:
    """The serialized model in `buf` (the whole file named `location`) with its main graph's
    large raw_data initializers as external data in that same file; None where nothing would be
    mapped or the bytes are not a well-formed message (the protobuf parser then says so)."""
    try:
        top = list(_fields(buf, 0, len(buf)))
        graphs = [f for f in top if f[0] == _GRAPH]
        if len(graphs) != 1 or graphs[0][1] != 2:
            return None
        _, _, _, g0, g1 = graphs[0]
        parts, changed = [], False
        for num, wire, a, v0, v1 in _fields(buf, g0, g1):
            new = _tensor(buf, v0, v1, location) if num == _INITIALIZER and wire == 2 else None
            if new is None:
                parts.append(bytes(buf[a:v1]))
            else:
                parts.append(_message_field(_INITIALIZER, new))
                changed = True
        if not changed:
            return None
        graph = _message_field(_GRAPH, b"".join(parts))
        return b"".join(graph if f[0] == _GRAPH else bytes(buf[f[2]:f[4]]) for f in top)
    except _Malformed:
        return None


def mappable(t: TensorProto) -> bool:
    return t.data_type in _MAPPABLE


def mark(t: TensorProto, path: str, offset: int, length: int) -> None:
    """Record on an external tensor that its entry was checked: its bytes are `length` bytes at
    `offset` of the file at the absolute `path`."""
    del t.external_data[:]
    for k, v in (("location", path), ("offset", str(offset)), ("length", str(length)), (MARK, "1")):
        e = t.external_data.add()
        e.key, e.value = k, v


def is_marked(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL and any(e.key == MARK for e in t.external_data)


class Files:
    """The weights files one import reads, each mapped once (one mapping and one descriptor per
    file, however many tensors it holds): `array(t)` gives a tensor's values."""

    def __init__(self):
        self._maps: dict[str, np.ndarray] = {}

    def _file(self, path: str) -> np.ndarray:
        whole = self._maps.get(path)
        if whole is None:
            with open(path, "rb") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            whole = self._maps[path] = np.frombuffer(m, np.uint8)
        return whole

    def array(self, t: TensorProto) -> np.ndarray:
        """The tensor's values: a read-only view of its file where the loader marked it, else
        converted from the proto."""
        if not is_marked(t):
            return numpy_helper.to_array(t)
        info = {e.key: e.value for e in t.external_data}
        offset, length = int(info["offset"]), int(info["length"])
        shape = tuple(int(d) for d in t.dims)
        dt = np.dtype(_MAPPABLE[t.data_type])
        if length == 0:
            return np.zeros(shape, dt.newbyteorder("="))
        arr = self._file(info["location"])[offset:offset + length].view(dt).reshape(shape)
        return arr if dt.isnative else arr.astype(dt.newbyteorder("="))


def drop_pages(arr: np.ndarray) -> None:
    """Done reading a mapped array for now: its pages leave this process's resident memory
    (they stay in the page cache, and a later read maps them in again). Nothing for an array
    that is not mapped."""
    whole, b = None, arr
    while isinstance(b, np.ndarray):
        whole, b = b, b.base
    m = b.obj if isinstance(b, memoryview) else None
    if not isinstance(m, mmap.mmap) or m.closed or not arr.size or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = arr.ctypes.data - whole.ctypes.data
    lo = sum(s * (n - 1) for s, n in zip(arr.strides, arr.shape) if s < 0)
    hi = arr.itemsize + sum(s * (n - 1) for s, n in zip(arr.strides, arr.shape) if s > 0)
    first = max(0, start + lo) // mmap.PAGESIZE * mmap.PAGESIZE
    m.madvise(mmap.MADV_DONTNEED, first, min(len(m), start + hi) - first)


def read_into(t: TensorProto, path: str, offset: int, length: int) -> None:
    """An external tensor of a type that is not mapped: its bytes read into raw_data."""
    with open(path, "rb") as f:
        f.seek(offset)
        t.raw_data = f.read(length)
    t.data_location = TensorProto.DEFAULT
    del t.external_data[:]


def open_model(path: str | os.PathLike) -> onnx.ModelProto:
    """The model in the file at `path`, its large inline weights left in the file as external
    references. Raises what ParseFromString raises on bytes that are no model."""
    model = onnx.ModelProto()
    with open(path, "rb") as f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:           # an empty file cannot be mapped
            buf = b""
    try:
        small = skeleton(buf, os.path.basename(path)) if len(buf) >= MIN_MAPPED_BYTES else None
        model.ParseFromString(bytes(buf) if small is None else small)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    return model
