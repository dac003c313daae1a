"""Quantization operators: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.

MatMulInteger, QLinearMatMul and the ConvInteger / QLinearConv that sum many products per output
are integer Gemms of the 8-bit operands (kernel/ir.py), which the schedule runs (CPU: the 8-bit
GEMM of runtime/aotc_igemm.h where it fits, schedule/cpu.py; else loops).

Quantizing rounds half to even (C's rint in the default rounding mode) and saturates to the
output type: y = clamp(rint(x / scale) + zero_point). A NaN quantizes to the type's least
value, as in ONNX Runtime (ONNX leaves it undefined; C would leave a conversion of NaN
undefined too). Scales and zero points are per tensor (scalars), per axis (1-D along `axis`)
or per block (x's shape with `axis` in blocks of block_size). The 4- and 2-bit integers are
computed as int8 / uint8 and the float8 and float4 types as float32 (frontend/narrow.py):
QuantizeLinear to one saturates to its range, or rounds to its nearest value (float8:
saturating unless saturate = 0). Integer products accumulate exactly in int32."""
from __future__ import annotations

import contextlib

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.internal import CONV_INTEGER, NARROW_ATTR
from ..kernel.ir import F32, REDUCTION, SPATIAL, Builder, Expr, GemmDest, Load, binop, call, cast, const, matrix, select
from .common import broadcast, norm_axis, prod
from .conv import conv_gemms
from .narrow import FORMATS, round_to_small_float, rounded
from .registry import register
from .window import conv_parts

I32 = np.dtype(np.int32)
_QTYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.uint16), np.dtype(np.int16))


def _name(node) -> str:
    return f"{node.op_type} node {node.name!r}"


def _quant_params(node, x, scale, zp) -> tuple[int | None, int]:
    """(axis, block) of the parameters, checked: axis None per tensor; block 0 per axis, else
    the block size along the axis (blocked quantization)."""
    if scale.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"{_name(node)} with a {scale.dtype} scale (float32 only)"])
    one = prod(scale.shape) == 1 and len(scale.shape) <= 1
    # a single scale and zero point may be a scalar beside a [1] (ONNX Runtime's quantize_static
    # writes an int32 bias's parameters so); other shapes must agree
    if zp is not None and tuple(zp.shape) != tuple(scale.shape) and not (one and prod(zp.shape) == 1
                                                                         and len(zp.shape) <= 1):
        raise ShapeError(f"{_name(node)}: zero point {tuple(zp.shape)} and scale {tuple(scale.shape)} differ")
    block = int(node.attr("block_size", 0))
    if one and not block:
        return None, 0
    axis = norm_axis(int(node.attr("axis", 1)), len(x.shape), node)
    if block:
        want = tuple(-(-d // block) if k == axis else d for k, d in enumerate(x.shape))
        if block < 0 or tuple(scale.shape) != want:
            raise ShapeError(f"{_name(node)}: block_size {block} along axis {axis} of {tuple(x.shape)} takes "
                             f"scales of shape {want}, not {tuple(scale.shape)}")
        return axis, block
    if len(scale.shape) != 1:
        raise ShapeError(f"{_name(node)}: scale {tuple(scale.shape)} must be a scalar or 1-D "
                         "(or x's shape with the axis in blocks, given block_size)")
    if scale.shape[0] != x.shape[axis]:
        raise ShapeError(f"{_name(node)}: {scale.shape[0]} scales for axis {axis} of {tuple(x.shape)}")
    return axis, 0


def _params_index(x_shape, axis, block, p, c, q) -> Expr:
    """The index of the scale (and zero point) of x's element (p, c, q) (see _split)."""
    if axis is None:
        return const(0, dtypes.INT64)
    if not block:
        return c
    blocks = -(-x_shape[axis] // block)
    return (p * blocks + c / block) * prod(x_shape[axis + 1:]) + q


def _params_array(a: np.ndarray, x_shape, axis, block) -> np.ndarray:
    """A scale or zero point array, broadcast against x (numpy folding)."""
    if axis is None:
        return a.reshape(())
    if not block:
        return a.reshape([-1 if k == axis else 1 for k in range(len(x_shape))])
    return np.repeat(a, block, axis=axis).take(range(x_shape[axis]), axis=axis)


def _saturate(b, v: Expr, dt, bounds: tuple[int, int] | None = None) -> Expr:
    """rint-ed float v (zero point added) clamped into dt's range (or `bounds`), as dt; a NaN
    to the least value, as ONNX Runtime's max / min instructions make it. (Two selects, "v if
    v > lo else lo", then the same below hi: compilers vectorize that form with fewer compares
    and blends than a NaN test and two clamps; docs/PERFORMANCE.md has the measurements.)"""
    lo, hi = bounds or dtypes.int_range(dt)
    lo, hi = const(float(lo), F32), const(float(hi), F32)
    v = b.local("q", select(v > lo, v, lo))
    return cast(select(v < hi, v, hi), dt)


# ----------------------------------------------------------------------------- QuantizeLinear
def _narrow(node) -> np.dtype | None:
    """The narrow type a QuantizeLinear quantizes to (frontend/narrow.py marks it), or None."""
    code = int(node.attr(NARROW_ATTR, 0))
    return dtypes.from_onnx(code) if code else None


def _q_dtype(node, ins) -> np.dtype:
    narrow = _narrow(node)
    if narrow is not None:
        if dtypes.is_narrow_float(narrow) and dtypes.to_onnx(narrow) not in FORMATS:
            raise UnsupportedError([f"{_name(node)} to {narrow} (float8 E4M3 and E5M2, float4 E2M1 and the "
                                    "integers only)"])
        return dtypes.compute_dtype(narrow)
    zp = ins[2] if len(ins) > 2 else None
    od = int(node.attr("output_dtype", 0))
    if zp is not None:
        dt = zp.dtype
    elif od:
        try:
            dt = dtypes.from_onnx(od)
        except dtypes.UnsupportedDtype:
            raise UnsupportedError([f"{_name(node)} with output_dtype {od}"]) from None
    else:
        dt = np.dtype(np.uint8)
    if dt not in _QTYPES:
        raise UnsupportedError([f"{_name(node)} to {dt} (uint8, int8, uint16, int16, the 4- and 2-bit "
                                "integers, float8 and float4 only)"])
    return dt


def _q_infer(node, ins):
    x = ins[0]
    if x.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"{_name(node)} on {x.dtype} (float32 only)"])
    _quant_params(node, x, ins[1], ins[2] if len(ins) > 2 else None)
    return [(_q_dtype(node, ins), tuple(x.shape))]


def _split(x_shape, axis):
    """x as (before the axis, the axis, after it); per tensor (axis None): (1, 1, everything)."""
    if axis is None:
        return 1, 1, prod(x_shape)
    return prod(x_shape[:axis]), x_shape[axis], prod(x_shape[axis + 1:])


def _lower_q(node, ctx):
    X, S, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    Z = ctx.ins[2] if len(ctx.ins) > 2 else None
    axis, block = _quant_params(node, X, S, Z)
    narrow = _narrow(node)
    small_float = narrow is not None and dtypes.is_narrow_float(narrow)
    b = ctx.b
    pre, n, post = _split(X.shape, axis)
    b.comment(f"quantize to {narrow or Y.dtype}: "
              + ("x / scale + zero point, rounded to the nearest" if small_float
                 else "rint(x / scale) + zero point, saturated")
              + (f"; scale per block of {block} along axis {axis}" if block else
                 f"; scale per index of axis {axis}" if axis is not None else ""))
    with b.loops([pre, n, post], ["p", "c", "q"], role=SPATIAL) as (p, c, q):
        at = (p * n + c) * post + q
        k = _params_index(X.shape, axis, block, p, c, q)
        zp = cast(Load(Z, k), F32) if Z is not None else const(0.0, F32)
        if small_float:
            code = dtypes.to_onnx(narrow)
            v = round_to_small_float(Load(X, at) / Load(S, k) + zp, FORMATS[code],
                                     bool(int(node.attr("saturate", 1))), b)
        else:
            v = _saturate(b, call("rint", Load(X, at) / Load(S, k)) + zp, Y.dtype,
                          dtypes.int_range(narrow) if narrow is not None else None)
        b.store(Y, at, v)


def _fold_q(node, ins):
    """QuantizeLinear to a narrow type on constants, in numpy (ONNX's reference implementation
    knows nothing of the type it computes in here); other types: None (the reference folds)."""
    narrow = _narrow(node)
    if narrow is None or any(v is not None and v.const is None for v in ins):
        return None
    x, s = ins[0].const, ins[1].const
    axis, block = _quant_params(node, ins[0], ins[1], ins[2] if len(ins) > 2 else None)
    zp = 0.0
    if len(ins) > 2 and ins[2] is not None:
        zp = _params_array(ins[2].const.astype(np.float32), x.shape, axis, block)
    v = x / _params_array(s, x.shape, axis, block)
    if dtypes.is_narrow_float(narrow):
        return [rounded((v + zp).astype(np.float32), dtypes.to_onnx(narrow), bool(int(node.attr("saturate", 1))))]
    lo, hi = dtypes.int_range(narrow)
    return [np.clip(np.rint(v) + zp, lo, hi).astype(dtypes.compute_dtype(narrow))]


register("QuantizeLinear", lower=_lower_q, fold=_fold_q)(_q_infer)


# ----------------------------------------------------------------------------- DequantizeLinear
def _dq_infer(node, ins):
    """x is an 8- or 16-bit integer or int32, or a value computed wider than its narrow type
    (frontend/narrow.py): a 4- or 2-bit integer as int8 / uint8, a float8 or float4 as float32."""
    x = ins[0]
    if x.dtype not in _QTYPES + (I32, dtypes.FLOAT32):
        raise UnsupportedError([f"{_name(node)} from {x.dtype}"])
    zp = ins[2] if len(ins) > 2 else None
    _quant_params(node, x, ins[1], zp)
    if zp is not None and zp.dtype != x.dtype:
        raise ShapeError(f"{_name(node)}: zero point {zp.dtype} and input {x.dtype} differ")
    return [(ins[1].dtype, tuple(x.shape))]


def _lower_dq(node, ctx):
    X, S, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    Z = ctx.ins[2] if len(ctx.ins) > 2 else None
    axis, block = _quant_params(node, X, S, Z)
    b = ctx.b
    pre, n, post = _split(X.shape, axis)
    b.comment("dequantize: (x - zero point) * scale" + (f", per block of {block} along axis {axis}" if block else
                                                         f", per index of axis {axis}" if axis is not None else ""))
    wide = F32 if X.dtype == dtypes.FLOAT32 else I32          # (a float8 x is float32 here)
    with b.loops([pre, n, post], ["p", "c", "q"], role=SPATIAL) as (p, c, q):
        at = (p * n + c) * post + q
        k = _params_index(X.shape, axis, block, p, c, q)
        v = cast(Load(X, at), wide) - (cast(Load(Z, k), wide) if Z is not None else const(0, wide))
        b.store(Y, at, cast(v, F32) * Load(S, k))


def _fold_dq(node, ins):
    """DequantizeLinear on constants, in numpy: (x - zero point) * scale (int4 weights of a
    weight-only quantized model, widened to int8 here, which the reference does not take)."""
    if any(v is not None and v.const is None for v in ins):
        return None
    x = ins[0].const
    axis, block = _quant_params(node, ins[0], ins[1], ins[2] if len(ins) > 2 else None)
    wide = np.float32 if x.dtype == np.float32 else np.int32
    v = x.astype(wide)
    if len(ins) > 2 and ins[2] is not None:
        v = v - _params_array(ins[2].const.astype(wide), x.shape, axis, block)
    return [(v.astype(np.float32) * _params_array(ins[1].const, x.shape, axis, block)).astype(np.float32)]


register("DequantizeLinear", lower=_lower_dq, fold=_fold_dq)(_dq_infer)


# ----------------------------------------------------------------------------- DynamicQuantizeLinear
def _dyn_infer(node, ins):
    x = ins[0]
    if x.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"{_name(node)} on {x.dtype} (float32 only)"])
    return [(np.dtype(np.uint8), tuple(x.shape)), (dtypes.FLOAT32, ()), (np.dtype(np.uint8), ())]


def quantize_dynamic_u8(b, n, load, store, keep, counts=None) -> None:
    """n values quantized to uint8 with the scale and zero point of their range, 0 included
    (DynamicQuantizeLinear's, and ONNX Runtime's GetQuantizationParameter for the activations of
    its dynamically quantized kernels): load(i) is value i, store(i, q) takes its uint8;
    counts(i), where given, says whether value i is in the range. scale = (max - min) / 255,
    zero point = saturate(rint(-min / scale)), q = saturate(rint(x / scale) + zero point); an
    all-zero range gives scale 0, zero point 0 and q 0. keep(scale, zero point) is handed them
    (float32 locals) before the values are quantized."""
    b.comment("uint8 quantization with the scale and zero point of x's range (0 included)")
    lo = b.local("lo", const(0.0, F32))
    hi = b.local("hi", const(0.0, F32))
    with b.loop(n, "i", role=REDUCTION) as i:
        with contextlib.ExitStack() as scope:
            if counts is not None:
                scope.enter_context(b.if_(counts(i)))
            v = b.local("v", load(i))
            b.assign(lo, select(v < lo, v, lo))
            b.assign(hi, select(v > hi, v, hi))
    scale = b.local("scale", (hi - lo) / const(255.0, F32))
    empty = b.local("empty", binop("==", scale, const(0.0, F32)))
    zpf = b.local("zpf", select(empty, const(0.0, F32), call("rint", (const(0.0, F32) - lo) / scale)))
    zpf = b.local("zpc", select(zpf < const(0.0, F32), const(0.0, F32),
                                select(zpf > const(255.0, F32), const(255.0, F32), zpf)))
    keep(scale, zpf)
    with b.loop(n, "i", role=SPATIAL) as i:
        q = select(empty, const(0.0, F32), call("rint", load(i) / scale) + zpf)
        store(i, _saturate(b, q, np.dtype(np.uint8)))


def _lower_dyn(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    SC = ctx.outs[1] if len(ctx.outs) > 1 else None
    ZP = ctx.outs[2] if len(ctx.outs) > 2 else None
    b = ctx.b

    def keep(scale, zpf):
        if SC is not None:
            b.store(SC, 0, scale)
        if ZP is not None:
            b.store(ZP, 0, cast(zpf, np.dtype(np.uint8)))
    quantize_dynamic_u8(b, prod(X.shape), lambda i: Load(X, i), lambda i, q: b.store(Y, i, q), keep)


register("DynamicQuantizeLinear", lower=_lower_dyn, accepts_epilogue=False)(_dyn_infer)


# ----------------------------------------------------------------------------- MatMulInteger, QLinearMatMul
def _mm_dims(node, a, b):
    """(batch shape, M, K, N) of an integer matmul, numpy's broadcasting of the batch dims."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise UnsupportedError([f"{_name(node)} on 1-D operands {tuple(a.shape)}, {tuple(b.shape)}"])
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2:
        raise ShapeError(f"{_name(node)}: {tuple(a.shape)} x {tuple(b.shape)}: inner dims {K} and {K2} differ")
    batch = broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]), node=node)
    return tuple(batch), M, K, N


def _zp_along(node, zp, n: int, what: str):
    """A zero point: a scalar, or one per row of A / column of B (1-D of n)."""
    if zp is None:
        return None
    if prod(zp.shape) == 1:
        return "scalar"
    if tuple(zp.shape) != (n,):
        raise UnsupportedError([f"{_name(node)}: {what} zero point of shape {tuple(zp.shape)} (a scalar or {n} values)"])
    return "vector"


def _batch_offset(idx, batch, shape, rows, cols):
    """Offset of matrix `idx` (an index into the broadcast batch) in an operand of `shape`."""
    own = tuple(shape[:-2])
    off: Expr = const(0)
    pad = len(batch) - len(own)
    stride = rows * cols
    for k in range(len(own) - 1, -1, -1):
        if own[k] != 1:
            off = off + idx[k + pad] * stride
        stride *= own[k]
    return off


def _int_matmul(b, node, A, B, AZ, BZ, batch, M, K, N, store):
    """acc(i, j) = sum_k (a[i, k] - a_zp) * (b[k, j] - b_zp) in int32, handed to store(flat, acc, j)."""
    az_kind = _zp_along(node, AZ, M, "A's")
    bz_kind = _zp_along(node, BZ, N, "B's")
    with b.loops(list(batch) + [M, N], [f"t{k}" for k in range(len(batch))] + ["i", "j"], role=SPATIAL) as idx:
        t, i, j = idx[:-2], idx[-2], idx[-1]
        a0 = _batch_offset(t, batch, A.shape, M, K) + i * K
        b0 = _batch_offset(t, batch, B.shape, K, N) + j
        azv = cast(Load(AZ, i if az_kind == "vector" else const(0)), I32) if AZ is not None else const(0, I32)
        bzv = cast(Load(BZ, j if bz_kind == "vector" else const(0)), I32) if BZ is not None else const(0, I32)
        az = b.local("az", azv)
        bz = b.local("bz", bzv)
        acc = b.local("acc", const(0, I32))
        with b.loop(K, "k", role=REDUCTION) as k:
            b.assign(acc, acc + (cast(Load(A, a0 + k), I32) - az) * (cast(Load(B, b0 + k * N), I32) - bz))
        flat = const(0)
        for v, n in zip(list(t) + [i, j], list(batch) + [M, N]):
            flat = flat * n + v
        store(flat, acc, j)


def _one_value(ctx, i: int) -> bool:
    """Is input i a constant holding one value throughout (a zero point per row or column in
    form only, as quantizers write per-channel weights' zeros)?"""
    c = ctx.const(i)
    return c is not None and c.size > 0 and bool(np.all(c == c.reshape(-1)[0]))


def _int_gemms(ctx, node, A, B, AZ, BZ, batch, M, K, N, dest_buf, epilogue=None, zp_inputs=(2, 3)) -> bool:
    """The product of A and B less their zero points (node inputs zp_inputs) as integer Gemms
    (kernel/ir.py: the schedule picks how they run) landing in dest_buf [batch..., M, N]
    (int32), as MatMul lowers its float products: one taller Gemm when B is one matrix for the
    whole batch, else one per batch entry. `epilogue(builder, gemm)` gives a Gemm its epilogue.
    False (nothing emitted) where a zero point differs along the rows or columns, which the
    Gemm has not."""
    for z, n, what, i in ((AZ, M, "A's", zp_inputs[0]), (BZ, N, "B's", zp_inputs[1])):
        if _zp_along(node, z, n, what) == "vector" and not _one_value(ctx, i):
            return False
    b = ctx.b
    # (element 0: the only value, or, per row or column, the one they all hold; the schedule
    # reads a constant one as its value, schedule/cpu.py _known)
    zero = [cast(Load(z, const(0)), I32) if z is not None else None for z in (AZ, BZ)]
    nb = len(batch)
    a_batch = (1,) * (nb - len(A.shape) + 2) + tuple(A.shape[:-2])
    b_batch = (1,) * (nb - len(B.shape) + 2) + tuple(B.shape[:-2])
    if prod(b_batch) == 1 and tuple(a_batch) == tuple(batch):
        # B is one matrix for the whole batch: the batch's rows of A are one taller matrix
        dest = GemmDest(dest_buf, (0,) * len(dest_buf.shape), tuple(range(nb + 1)), (nb + 1,))
        g = b.gemm(M * prod(batch), N, K, matrix(A, 0, K, 1), matrix(B, 0, N, 1), dest, a_zero=zero[0], b_zero=zero[1])
        if epilogue:
            epilogue(b, g)
        return True
    with b.loops(batch, [f"t{k}" for k in range(nb)], role=SPATIAL) as idx:
        oa = _batch_offset(idx, batch, A.shape, M, K)
        ob = _batch_offset(idx, batch, B.shape, K, N)
        dest = GemmDest(dest_buf, tuple(idx) + (0, 0), (nb,), (nb + 1,))
        g = b.gemm(M, N, K, matrix(A, oa, K, 1), matrix(B, ob, N, 1), dest, a_zero=zero[0], b_zero=zero[1])
        if epilogue:
            epilogue(b, g)
    return True


def _check_int8(node, *vals):
    for v in vals:
        if v is not None and v.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
            raise UnsupportedError([f"{_name(node)} on {v.dtype} (uint8 and int8 only)"])


def _mmi_infer(node, ins):
    a, b_ = ins[0], ins[1]
    _check_int8(node, a, b_)
    batch, M, K, N = _mm_dims(node, a, b_)
    _zp_along(node, ins[2] if len(ins) > 2 else None, M, "A's")
    _zp_along(node, ins[3] if len(ins) > 3 else None, N, "B's")
    return [(I32, batch + (M, N))]


def _lower_mmi(node, ctx):
    A, B, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    AZ = ctx.ins[2] if len(ctx.ins) > 2 else None
    BZ = ctx.ins[3] if len(ctx.ins) > 3 else None
    batch, M, K, N = _mm_dims(node, A, B)
    b = ctx.b
    b.comment(f"integer matmul {M} x {K} x {N}, exact in int32")
    if not _int_gemms(ctx, node, A, B, AZ, BZ, batch, M, K, N, Y):
        _int_matmul(b, node, A, B, AZ, BZ, batch, M, K, N, lambda at, acc, j: b.store(Y, at, acc))


register("MatMulInteger", lower=_lower_mmi,
         how="an integer Gemm: on CPUs an 8-bit GEMM where one operand is an int8 constant and the other "
             "uint8, else loops")(_mmi_infer)


def _qlmm_infer(node, ins):
    a, a_s, a_zp, b_, b_s, b_zp, y_s, y_zp = ins[:8]
    _check_int8(node, a, b_, y_zp)
    batch, M, K, N = _mm_dims(node, a, b_)
    for s, n, what in ((a_s, M, "a_scale"), (b_s, N, "b_scale"), (y_s, 1, "y_scale")):
        if s.dtype != dtypes.FLOAT32 or prod(s.shape) not in (1, n):
            raise UnsupportedError([f"{_name(node)}: {what} {s.dtype} {tuple(s.shape)} (float32, a scalar or per "
                                    "row / column)"])
    if prod(a_s.shape) != 1 or prod(y_s.shape) != 1:
        raise UnsupportedError([f"{_name(node)}: per-row a_scale or y_scale"])
    _zp_along(node, a_zp, M, "A's")
    _zp_along(node, b_zp, N, "B's")
    return [(y_zp.dtype, batch + (M, N))]


def _lower_qlmm(node, ctx):
    """y = saturate(rint(acc * (a_scale * b_scale / y_scale)) + y_zero_point), acc the exact
    int32 product of the zero-point-shifted operands, the multiplier in float32."""
    A, AS, AZ, B, BS, BZ, YS, YZ = ctx.ins[:8]
    Y = ctx.outs[0]
    batch, M, K, N = _mm_dims(node, A, B)
    b = ctx.b
    b.comment(f"quantized matmul {M} x {K} x {N}: int32 products requantized to {Y.dtype}")
    per_col = prod(BS.shape) != 1

    def requantize(bld, acc, j) -> Expr:
        mult = bld.local("mult", Load(AS, const(0)) * Load(BS, j if per_col else const(0)) / Load(YS, const(0)))
        v = call("rint", cast(acc, F32) * mult) + cast(Load(YZ, const(0)), F32)
        return _saturate(bld, v, Y.dtype)

    def epilogue(bld, g):
        """the Gemm's int32 sums (in a scratch) requantized into Y, element (i, j) of its C"""
        ep = Builder()
        ep.names = bld.names
        ep.store(Y, g.dest.matrix().at(g.i, g.j), requantize(ep, g.value, g.j))
        g.epilogue = ep.body

    sums = ctx.scratch(tuple(batch) + (M, N), I32, "sums")
    if not _int_gemms(ctx, node, A, B, AZ, BZ, batch, M, K, N, sums, epilogue, zp_inputs=(2, 5)):
        _int_matmul(b, node, A, B, AZ, BZ, batch, M, K, N, lambda at, acc, j: b.store(Y, at, requantize(b, acc, j)))


register("QLinearMatMul", lower=_lower_qlmm,
         how="an integer Gemm (as MatMulInteger), requantized in its epilogue")(_qlmm_infer)


# ----------------------------------------------------------------------------- ConvInteger, QLinearConv
def _is_scalar(v) -> bool:
    return prod(v.shape) == 1 and len(v.shape) <= 1


def _per_channel(node, v, M: int, what: str) -> bool:
    """Is v (a zero point or scale) one value per output channel? A scalar: False; else a
    ShapeError unless it is 1-D of M."""
    if v is None or _is_scalar(v):
        return False
    if tuple(v.shape) != (M,):
        raise ShapeError(f"{_name(node)}: {what} of shape {tuple(v.shape)} (a scalar or {M} values, one per "
                         "output channel)")
    return True


def _scalar_only(node, v, what: str) -> None:
    if v is not None and not _is_scalar(v):
        raise ShapeError(f"{_name(node)}: {what} of shape {tuple(v.shape)} must be a scalar")


def _same_dtype(node, zp, v, what: str) -> None:
    if zp is not None and zp.dtype != v.dtype:
        raise ShapeError(f"{_name(node)}: {what} is {zp.dtype}, its tensor {v.dtype}")


def _conv_int_infer(node, ins):
    x, w = ins[0], ins[1]
    xz = ins[2] if len(ins) > 2 else None
    wz = ins[3] if len(ins) > 3 else None
    _check_int8(node, x, w, xz, wz)
    _same_dtype(node, xz, x, "x_zero_point")
    _same_dtype(node, wz, w, "w_zero_point")
    _, win = conv_parts(node, x.shape, w.shape)
    _scalar_only(node, xz, "x_zero_point")
    _per_channel(node, wz, w.shape[0], "w_zero_point")
    return [(I32, (x.shape[0], w.shape[0], *win.out))]


# ConvInteger and QLinearConv compile as an int32 Conv (and QLinearConv's requantization after
# it): aotc/passes/decompose.py builds those nodes; these entries check types and shapes
register("ConvInteger", how="decomposed: an int32 Conv of the inputs less their zero points, or an integer Gemm "
         "of them (aotc.ConvInteger) where outputs sum over 258 products")(_conv_int_infer)


def _qlconv_infer(node, ins):
    ins = list(ins) + [None] * (9 - len(ins))
    x, xs, xz, w, ws, wz, ys, yz, bias = ins[:9]
    if any(v is None for v in (xs, xz, ws, wz, ys, yz)):
        raise ShapeError(f"{_name(node)}: the scales and zero points of x, w and y are required")
    _check_int8(node, x, w, xz, wz, yz)
    _same_dtype(node, xz, x, "x_zero_point")
    _same_dtype(node, wz, w, "w_zero_point")
    _, win = conv_parts(node, x.shape, w.shape)
    M = w.shape[0]
    for s, what in ((xs, "x_scale"), (ws, "w_scale"), (ys, "y_scale")):
        if s.dtype != dtypes.FLOAT32:
            raise UnsupportedError([f"{_name(node)}: {what} of {s.dtype} (float32 only)"])
    for v, what in ((xs, "x_scale"), (xz, "x_zero_point"), (ys, "y_scale"), (yz, "y_zero_point")):
        _scalar_only(node, v, what)
    _per_channel(node, ws, M, "w_scale")
    _per_channel(node, wz, M, "w_zero_point")
    if bias is not None:
        if bias.dtype != I32:
            raise UnsupportedError([f"{_name(node)}: bias of {bias.dtype} (int32 only)"])
        if tuple(bias.shape) != (M,):
            raise ShapeError(f"{_name(node)}: bias of shape {tuple(bias.shape)}, not ({M},)")
    return [(yz.dtype, (x.shape[0], M, *win.out))]


register("QLinearConv", how="decomposed as ConvInteger (an int32 Conv or an integer Gemm), then requantized in its "
         "epilogue")(_qlconv_infer)


# ----------------------------------------------------------------------------- aotc.ConvInteger
def _conv_i8_infer(node, ins):
    """aotc.ConvInteger(x, w, x_zero_point, bias?): the int32 convolution of x less its zero
    point (a scalar) and w (8-bit, no zero point), plus an int32 bias per output channel. What
    ConvInteger and QLinearConv decompose into (passes/decompose.py) where each output sums many
    products: an integer Gemm, which the schedule runs as an 8-bit GEMM or as loops."""
    x, w, xz = ins[0], ins[1], ins[2]
    _check_int8(node, x, w, xz)
    _same_dtype(node, xz, x, "x_zero_point")
    _scalar_only(node, xz, "x_zero_point")
    group, win = conv_parts(node, x.shape, w.shape)
    if x.shape[1] // group == 1 and group > 1:
        raise UnsupportedError([f"{_name(node)}: a depthwise convolution (decomposed otherwise)"])
    if len(ins) > 3 and ins[3] is not None and (ins[3].dtype != I32 or tuple(ins[3].shape) != (w.shape[0],)):
        raise ShapeError(f"{_name(node)}: bias {ins[3].dtype} {tuple(ins[3].shape)} (int32, one per output channel)")
    return [(I32, (x.shape[0], w.shape[0], *win.out))]


def _lower_conv_i8(node, ctx):
    X, W, XZ = ctx.ins[:3]
    Bias = ctx.ins[3] if len(ctx.ins) > 3 else None
    group, win = conv_parts(node, X.shape, W.shape)
    ctx.b.comment(f"integer convolution: {'1x1' if prod(win.kernel) == 1 else 'im2col'} + an integer GEMM per group")
    conv_gemms(ctx, X, W, Bias, ctx.outs[0], group, win, x_zero=cast(Load(XZ, const(0)), I32))


register(CONV_INTEGER, lower=_lower_conv_i8, how="an integer Gemm (8-bit operands, int32 sums)")(_conv_i8_infer)
