"""ONNX Runtime's block-quantized weights (what its MatMulNBits quantizer and onnxruntime-genai's
model builder write): MatMulNBits and GatherBlockQuantized, frontend/contrib.py's companion,
joined into its table.

MatMulNBits becomes aotc.MatMulNBits (ops/nbits.py), which reads its weights packed as the
quantizer wrote them (2, 4 or 8 bits, packed or float zero points, any block size) and unpacks
them in its inner loop: the artifact holds them at their own size (4 bits in blocks of 32 with
zero points: 1/6.4 of float32's bytes; blocks of 128, symmetric: 1/7.5). A bias is an Add after
it. GatherBlockQuantized in ONNX Runtime's uint8 form (a 2-D table gathered along axis 0,
quantized along the last: onnxruntime-genai's quantized embeddings) becomes
aotc.GatherBlockQuantized, which keeps the table packed and dequantizes the rows it gathers.
Otherwise (MatMulNBits with g_idx, act-order groups, or other than float32 activations and
scales; GatherBlockQuantized's int4 / uint4 tables and other axes) the weights are unpacked in
the graph (bits of each byte, low bits first: integer Div, Mod), less their zero points, times
their blocks' scales, then a MatMul / Gather: constant weights fold at compile time into
float32.

Either way each weight is (q - zero) * scale in float32, the exact dequantize-then-float
product, at accuracy levels 0 to 3 and wherever ONNX Runtime computes that at level 4. Where
its CPU kernel quantizes the activations to int8 blocks instead (level 4, `_int8_activations`
says where), aotc.MatMulNBits does the same (int8_activations: each block of 2^k values of a
row scaled by 127 / its largest magnitude and rounded half to even, the products summed
exactly in int32 and scaled back), so that a decoder's tokens follow ONNX Runtime's at the
level the model asks for.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ..errors import ModelError, ShapeError
from ..ir.internal import GATHER_NBITS, MATMUL_NBITS
from .contrib import _at, _declared, _known, _reject_attrs, after_inputs
from .emit import Emit

MS = "com.microsoft"


def _in(e: Emit, k: int) -> str | None:
    ins = e.node.input
    return ins[k] if len(ins) > k and ins[k] else None


def _i64(e: Emit, v) -> str:
    return e.const(np.asarray(v, np.int64))


def _unpack(e: Emit, packed: str, bits: int, per_byte_shape: list) -> str:
    """uint8 bytes [..., m] -> their values of `bits` bits [..., m * 8 / bits], low bits first,
    as int32."""
    b = e.op("Cast", [packed], to=TensorProto.INT32)
    if bits == 8:
        return e.op("Reshape", [b, _i64(e, per_byte_shape)])
    per = 8 // bits
    # value i of a byte: (byte >> (i * bits)) & (2^bits - 1), as integer Div and Mod (opset 17's)
    steps = e.const((1 << (np.arange(per, dtype=np.int32) * bits)).astype(np.int32))
    vals = e.op("Mod", [e.op("Div", [e.unsqueeze(b, -1), steps]), e.const(np.int32(1 << bits))])
    return e.op("Reshape", [vals, _i64(e, per_byte_shape)])


def _int8_activations(e: Emit, level: int, bits: int, bs: int, zps: str | None) -> bool:
    """Does ONNX Runtime's CPU kernel quantize the activations to int8 blocks here? At
    accuracy_level 4 with no zero points or uint8 ones, for 4 and 8-bit weights, and 2-bit ones
    in blocks of at least 32 (probed on onnxruntime 1.32, x86-64 with AVX-512: float zero
    points, g_idx and 2-bit blocks of 16 compute the exact product instead)."""
    if level != 4 or (zps is not None and e.elem_type(zps) != TensorProto.UINT8):
        return False
    return bits in (4, 8) or (bits == 2 and bs >= 32)


def _matmul_nbits(e: Emit, a: dict):
    _reject_attrs(e, a, {"K", "N", "bits", "block_size", "accuracy_level"})
    for req in ("K", "N", "block_size"):
        if req not in a:
            raise ModelError(f"{e.label}: attribute {req} is required")
    K, N, bits, bs = int(a["K"]), int(a["N"]), int(a.get("bits", 4)), int(a["block_size"])
    if bits not in (2, 4, 8):
        e.refuse(f"bits={bits} (2, 4 and 8 are compiled)")
    if bs < 16 or bs & (bs - 1):
        raise ModelError(f"{e.label}: block_size {bs} is not a power of two of at least 16")
    level = int(a.get("accuracy_level", 0))
    if level not in range(5):
        raise ModelError(f"{e.label}: accuracy_level {level} is not 0 to 4")
    A, B, scales, zps, g_idx, bias = (_in(e, k) for k in range(6))
    if A is None or B is None or scales is None:
        raise ModelError(f"{e.label}: A, B and scales are required")
    kb = (K + bs - 1) // bs
    blob = bs * bits // 8
    bsh = _known(e, B, "B")
    if tuple(bsh) != (N, kb, blob) and tuple(bsh) != (N, kb * blob):
        raise ShapeError(f"{e.label}: B {bsh} is not ({N}, {kb}, {blob}) for K={K}, N={N}, block_size={bs}, "
                         f"bits={bits}")
    ash = _declared(e, A)                       # (its leading dims may be run-time ones)
    if not ash or ash[-1] != K:
        raise ShapeError(f"{e.label}: A {ash} does not end in K={K}")
    if g_idx is None and e.elem_type(A) == e.elem_type(scales) == TensorProto.FLOAT and \
            (zps is None or e.elem_type(zps) in (TensorProto.UINT8, TensorProto.FLOAT)):
        # the weights stay packed: aotc.MatMulNBits unpacks them in its inner loop (ops/nbits.py)
        y = e.name("y") if bias is not None else e.node.output[0]
        e.nodes.append(helper.make_node(MATMUL_NBITS, [A, B, scales] + ([zps] if zps else []), [y],
                                        K=K, N=N, bits=bits, block_size=bs,
                                        int8_activations=int(_int8_activations(e, level, bits, bs, zps))))
        e.declare(y, TensorProto.FLOAT, list(ash[:-1]) + [N])
        if bias is not None:
            e.op("Add", [y, bias], out=e.node.output[0])
        return
    q = _unpack(e, B, bits, [N, kb * bs])                                   # [N, kb * bs]
    q = e.op("Slice", [q, _i64(e, [0]), _i64(e, [K]), _i64(e, [1])])         # [N, K]
    q = e.op("Cast", [q], to=TensorProto.FLOAT)
    s = e.op("Reshape", [scales, _i64(e, [N, kb])])
    if zps is None:
        z = e.const(np.float32(1 << (bits - 1)))
    elif e.elem_type(zps) == TensorProto.UINT8:
        zb = (kb * bits + 7) // 8
        z = _unpack(e, e.op("Reshape", [zps, _i64(e, [N, zb])]), bits, [N, zb * 8 // bits])
        z = e.op("Cast", [e.op("Slice", [z, _i64(e, [0]), _i64(e, [kb]), _i64(e, [1])])], to=TensorProto.FLOAT)
    elif e.elem_type(zps) == e.elem_type(scales):
        z = e.op("Reshape", [zps, _i64(e, [N, kb])])
    else:
        raise ModelError(f"{e.label}: zero_points must be uint8 (packed) or of the scales' type")
    if g_idx is not None and zps is not None and e.elem_type(zps) == TensorProto.UINT8:
        e.refuse("g_idx with packed uint8 zero_points",
                 "ONNX Runtime's CPU kernel ignores those zero points with g_idx (it takes 2^(bits-1); "
                 "checked with onnxruntime 1.32): leave them out, or give float zero points")
    if g_idx is not None:
        # act-order: column k's scale and zero point are its group's, g_idx[k]
        gi = e.op("Cast", [g_idx], to=TensorProto.INT64)
        s = e.op("Gather", [s, gi], axis=1)
        if zps is not None:
            z = e.op("Gather", [z, gi], axis=1)
    else:
        rep = e.op("Reshape", [e.op("Expand", [e.unsqueeze(s, -1), _i64(e, [N, kb, bs])]), _i64(e, [N, kb * bs])])
        s = e.op("Slice", [rep, _i64(e, [0]), _i64(e, [K]), _i64(e, [1])])
        if zps is not None:
            rep = e.op("Reshape", [e.op("Expand", [e.unsqueeze(z, -1), _i64(e, [N, kb, bs])]), _i64(e, [N, kb * bs])])
            z = e.op("Slice", [rep, _i64(e, [0]), _i64(e, [K]), _i64(e, [1])])
    w = e.op("Mul", [e.op("Sub", [q, z]), s])                               # [N, K]
    y = e.op("MatMul", [A, e.op("Transpose", [w], perm=[1, 0])])
    if bias is not None:
        y = e.op("Add", [y, bias])
    e.op("Identity", [y], out=e.node.output[0])


_SUB_BYTE = {TensorProto.INT4, TensorProto.UINT4}


def _blocks_along(e: Emit, v: str, shape: list, axis: int, bs: int) -> str:
    """Per-block values v (shape with ceil(d / bs) along `axis`) repeated to each element:
    `shape` (the logical data's)."""
    d = shape[axis]
    nb = (d + bs - 1) // bs
    expanded = list(shape[:axis]) + [nb, bs] + list(shape[axis + 1:])
    rep = e.op("Expand", [e.unsqueeze(v, axis + 1), _i64(e, expanded)])
    full = list(shape[:axis]) + [nb * bs] + list(shape[axis + 1:])
    rep = e.op("Reshape", [rep, _i64(e, full)])
    return e.op("Slice", [rep, _i64(e, [0]), _i64(e, [d]), _i64(e, [axis])])


def _gather_block_quantized(e: Emit, a: dict):
    _reject_attrs(e, a, {"gather_axis", "quantize_axis", "block_size", "bits"})
    data, idx, scales, zps = (_in(e, k) for k in range(4))
    if data is None or idx is None or scales is None:
        raise ModelError(f"{e.label}: data, indices and scales are required")
    t = e.elem_type(data)
    bits = int(a.get("bits", 4))
    bs = int(a.get("block_size", 128))
    if bs < 16 or bs & (bs - 1):
        raise ModelError(f"{e.label}: block_size {bs} is not a power of two of at least 16")
    dsh = list(_known(e, data, "data"))
    r = len(dsh)
    if t == TensorProto.UINT8 and bits in (4, 8) and r == 2 and int(a.get("gather_axis", 0)) in (0, -2) and \
            int(a.get("quantize_axis", 1)) in (1, -1) and e.elem_type(scales) == TensorProto.FLOAT and \
            (zps is None or e.elem_type(zps) == TensorProto.UINT8):
        # ONNX Runtime's uint8 form: the table stays packed; aotc.GatherBlockQuantized (ops/nbits.py)
        # dequantizes the rows it gathers
        y = e.node.output[0]
        e.nodes.append(helper.make_node(GATHER_NBITS, [data, idx, scales] + ([zps] if zps else []), [y],
                                        bits=bits, block_size=bs))
        e.declare(y, TensorProto.FLOAT, _declared(e, idx) + [dsh[-1] * 8 // bits])
        return
    if t in _SUB_BYTE:
        if bits != 4:
            raise ModelError(f"{e.label}: bits {bits} with 4-bit data")
        q = _at(e, 21, "Cast", [data], to=TensorProto.INT32)       # (4-bit Casts: opset 21)
        default_zp = 0
    elif t == TensorProto.UINT8:
        if bits not in (4, 8):
            e.refuse(f"bits={bits} with uint8 data (4 and 8 are compiled)")
        if bits == 4:
            dsh[-1] *= 2                                      # (two values a byte, along the last axis)
        q = _unpack(e, data, bits, dsh)
        default_zp = 1 << (bits - 1)
    else:
        e.refuse(f"data of element type {TensorProto.DataType.Name(t) if t else 'unknown'} (int4, uint4 or uint8)")
    qa = int(a.get("quantize_axis", r - 1))
    qa = qa + r if qa < 0 else qa
    ga = int(a.get("gather_axis", 0))
    ga = ga + r if ga < 0 else ga
    if not (0 <= qa < r and 0 <= ga < r):
        raise ShapeError(f"{e.label}: gather_axis / quantize_axis outside a rank-{r} data")
    if t == TensorProto.UINT8 and (ga != 0 or qa != r - 1):
        # (ONNX Runtime's own check, for its uint8 form)
        raise ModelError(f"{e.label}: uint8 data is gathered along axis 0 and quantized along the last")
    s = _blocks_along(e, scales, dsh, qa, bs)
    if zps is None:
        z = e.const(np.float32(default_zp))
    else:
        if e.elem_type(zps) != t:
            raise ModelError(f"{e.label}: zero_points must be of data's element type")
        zsh = list(_known(e, zps, "zero_points"))
        if t == TensorProto.UINT8 and bits == 4:
            zsh[-1] *= 2
            zq = _unpack(e, zps, bits, zsh)
            want = dsh[:qa] + [(dsh[qa] + bs - 1) // bs] + dsh[qa + 1:]
            zq = e.op("Slice", [zq, _i64(e, [0]), _i64(e, [want[-1]]), _i64(e, [r - 1])])
        else:
            zq = _at(e, 21, "Cast", [zps], to=TensorProto.INT32)
        z = e.op("Cast", [_blocks_along(e, zq, dsh, qa, bs)], to=TensorProto.FLOAT)
    w = e.op("Mul", [e.op("Sub", [e.op("Cast", [q], to=TensorProto.FLOAT), z]), s])
    e.op("Gather", [w, idx], out=e.node.output[0], axis=ga)


NBITS_BUILDERS = {(MS, "MatMulNBits"): after_inputs(_matmul_nbits),
                  (MS, "GatherBlockQuantized"): after_inputs(_gather_block_quantized)}
NBITS_HOW = {"MatMulNBits": "aotc.MatMulNBits: the packed weights read in place, unpacked in its inner loop; at "
                            "accuracy_level 4, where ONNX Runtime does, int8 activations (CPU: runtime/aotc_nbits.h, "
                            "VNNI) (with g_idx: dequantized in the graph, folded to float32, MatMul)",
             "GatherBlockQuantized": "aotc.GatherBlockQuantized: the uint8 table read packed, the gathered rows "
                                     "dequantized (int4 / uint4 tables: dequantized in the graph, folded, Gather)"}
NBITS_REFUSED = {"MatMulNBits": "bits other than 2, 4, 8; g_idx with packed uint8 zero_points (ORT's CPU kernel "
                                 "ignores them)",
                 "GatherBlockQuantized": "bits other than 4 and 8"}
