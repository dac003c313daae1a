"""Ops compiled as a composition of others, built once shape inference knows their inputs.

ConvInteger and QLinearConv are an int32 convolution: x and w cast to int32 less their zero
points (w's per output channel reshaped onto its first dim), then Conv:
- aotc.ConvInteger (ops/quant.py: an integer Gemm of the 8-bit operands themselves, which a
  CPU schedule runs as an 8-bit GEMM) where w has no zero point (a constant zero), the
  convolution is not depthwise, and either the target has an 8-bit GEMM faster than its
  float32 one (`int8_gemm`, from the pass context: passes/manager.py) and x is uint8 and w
  int8 (its operand kinds), or outputs sum more than EXACT_FLOAT_TERMS products;
- else in float32 (the im2col GEMM) where every output sums few enough products for float32
  to hold every partial sum exactly (at most EXACT_FLOAT_TERMS, 258);
- else in int32 by the direct loop nest.
A padding tap
reads 0, as the spec's padding with x's zero point gives. The weight's cast and subtraction fold at compile time. QLinearConv
then requantizes in the elementwise chain the Conv runs after it:
y = saturate(rint(float(acc) * (x_scale * w_scale / y_scale)) + y_zero_point), the multiplier
computed in float32 (folded at compile time when the scales are constants), as ONNX Runtime
computes it. The op registry keeps their type and shape checks (aotc/ops/quant.py), which run
first.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes
from ..ir.graph import Graph, Node
from ..ir.internal import CONV_INTEGER
from ..ops import registry

DECOMPOSED = ("ConvInteger", "QLinearConv")

_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


class Nodes:
    """Nodes being built for one decomposed node, with fresh value names."""

    def __init__(self, g: Graph, n: Node):
        self.g, self.n, self.nodes = g, n, []

    def add(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.g.fresh_name(f"{self.n.name}/{op.lower()}")
        self.nodes.append(Node(op, inputs, [out], attrs, f"{self.n.name}/{op.lower()}{len(self.nodes)}"))
        return out

    def const(self, arr, hint: str) -> str:
        return self.g.add_const(np.asarray(arr), f"{self.n.name}/{hint}")

    def int32(self, name: str) -> str:
        return self.add("Cast", [name], to=int(dtypes.to_onnx(dtypes.INT32)))

    def less_zero_point(self, x: str, zp: str, shape: list[int] | None = None) -> str:
        """int32(x) - int32(zp), zp reshaped to `shape` first when given (per channel)."""
        xi = self.int32(x)
        if not zp:
            return xi
        z = self.int32(zp)
        if shape is not None and self.g.values[zp].size > 1:
            z = self.add("Reshape", [z, self.const(np.array(shape, np.int64), "zp_shape")])
        return self.add("Sub", [xi, z])


# the most products of two values of at most 255 in magnitude (8-bit values less their zero
# points) a float32 sum holds exactly: every partial sum stays an integer below 2^24
EXACT_FLOAT_TERMS = (1 << 24) // (255 * 255)


def _int32_conv(g: Graph, b: Nodes, x: str, xz: str, w: str, wz: str, bias: str, attrs: dict, int8_gemm: bool,
                out: str | None = None) -> str:
    """The int32 convolution of x and w less their zero points (plus an int32 bias), into
    `out` (a fresh name by default): an integer Gemm where the module's docstring says. Else, when
    each output sums at most EXACT_FLOAT_TERMS products, the convolution runs in float32 (the im2col GEMM), which is then exact, and is cast to int32;
    else in int32 (the direct loop nest)."""
    xv, wv = g.values[x], g.values[w]
    rank = len(wv.shape)
    terms = int(np.prod(wv.shape[1:]))                # input channels of a group x taps
    depthwise = wv.shape[1] == 1 and int(attrs.get("group", 1)) > 1
    wz_value = g.const(wz) if wz else None
    # (the target's fast 8-bit GEMM multiplies uint8 by int8)
    fast = int8_gemm and xv.dtype == np.uint8 and wv.dtype == np.int8
    integer_gemm = fast or terms > EXACT_FLOAT_TERMS
    if integer_gemm and not depthwise and (not wz or (wz_value is not None and not np.any(wz_value))):
        # the 8-bit operands as they are: an integer Gemm (aotc.ConvInteger)
        zero = xz or b.const(np.zeros((), xv.dtype), "x_zero_point")
        return b.add(CONV_INTEGER, [x, w, zero] + ([bias] if bias else []), out, **attrs)
    xs = b.less_zero_point(x, xz)
    ws = b.less_zero_point(w, wz, [-1] + [1] * (rank - 1))
    if terms > EXACT_FLOAT_TERMS:
        return b.add("Conv", [xs, ws] + ([bias] if bias else []), out, **attrs)
    f32, i32 = int(dtypes.to_onnx(dtypes.FLOAT32)), int(dtypes.to_onnx(dtypes.INT32))
    accf = b.add("Conv", [b.add("Cast", [xs], to=f32), b.add("Cast", [ws], to=f32)], **attrs)
    if not bias:
        return b.add("Cast", [accf], out, to=i32)
    shape = b.const(np.array([1, -1] + [1] * (len(xv.shape) - 2), np.int64), "bias_shape")
    return b.add("Add", [b.add("Cast", [accf], to=i32), b.add("Reshape", [bias, shape])], out)


def _input(n: Node, k: int) -> str:
    return n.inputs[k] if len(n.inputs) > k else ""


def expand(g: Graph, n: Node, int8_gemm: bool = False) -> list[Node]:
    """ConvInteger or QLinearConv n as the nodes the module's docstring says; `int8_gemm`: the
    target's 8-bit GEMM outruns its float32 one."""
    ins = [g.values[i] if i else None for i in n.inputs]
    registry.get(n.op_type).infer(n, ins)          # its own checks of types and shapes first
    b = Nodes(g, n)
    conv_attrs = {k: v for k, v in n.attrs.items() if k in _CONV_ATTRS}
    if n.op_type == "ConvInteger":
        x, w, xz, wz = (_input(n, k) for k in range(4))
        _int32_conv(g, b, x, xz, w, wz, "", conv_attrs, int8_gemm, n.outputs[0])
        return b.nodes
    x, x_scale, xz, w, w_scale, wz, y_scale, yz = (_input(n, k) for k in range(8))
    rank = len(g.values[w].shape)
    per_channel = [1, -1] + [1] * (rank - 2)         # an output channel's value along dim 1 of y
    acc = _int32_conv(g, b, x, xz, w, wz, _input(n, 8), conv_attrs, int8_gemm)
    requantize(g, b, acc, x_scale, w_scale, y_scale, yz, n.outputs[0], per_channel)
    return b.nodes


def requantize(g: Graph, b: Nodes, acc: str, x_scale: str, w_scale: str, y_scale: str, yz: str, out: str,
               scale_shape: list[int] | None = None) -> None:
    """out = saturate(rint(float(acc) * (x_scale * w_scale / y_scale)) + y_zero_point): int32
    sums requantized, the multiplier computed in float32 as ONNX Runtime computes it; one per
    channel (w_scale's) reshaped to scale_shape first (None: as it is, along the last dim).

    Where the scales are constants whose multipliers are at most 1/2 in magnitude (as a
    quantized layer's are: x_scale * w_scale is far below y_scale), rint(float(acc) * m) is at
    most 2^30 in magnitude, so it converts to int32 exactly and the zero point and the clamp
    are added in int32: the same numbers, and the clamps vectorize as integer max / min, where
    GCC makes float ones compares and blends (the requantization of a 256 x 3136 output, the
    whole-tile epilogue of a quantized 1x1 convolution: 0.23 -> 0.09 ms; docs/PERFORMANCE.md).
    Otherwise the zero point and the clamp are added in float32."""
    mult = b.add("Div", [b.add("Mul", [x_scale, w_scale]), y_scale])
    small = _multipliers_below_half(g, x_scale, w_scale, y_scale)
    if scale_shape is not None and g.values[w_scale].size > 1:
        mult = b.add("Reshape", [mult, b.const(np.array(scale_shape, np.int64), "scale_shape")])
    f32 = int(dtypes.to_onnx(dtypes.FLOAT32))
    q = b.add("Round", [b.add("Mul", [b.add("Cast", [acc], to=f32), mult])])
    out_dt = g.values[yz].dtype
    info = np.iinfo(out_dt)
    if small:
        i32 = int(dtypes.to_onnx(dtypes.INT32))
        q = b.add("Add", [b.add("Cast", [q], to=i32), b.add("Cast", [yz], to=i32)])
        lo, hi = np.int32(info.min), np.int32(info.max)
    else:
        q = b.add("Add", [q, b.add("Cast", [yz], to=f32)])
        lo, hi = np.float32(info.min), np.float32(info.max)
    q = b.add("Clip", [q, b.const(lo, "lo"), b.const(hi, "hi")])
    b.add("Cast", [q], out, to=int(dtypes.to_onnx(out_dt)))


def _multipliers_below_half(g: Graph, x_scale: str, w_scale: str, y_scale: str) -> bool:
    """Are the scales constants whose float32 multipliers x_scale * w_scale / y_scale are all at
    most 1/2 in magnitude (and finite)?"""
    arrays = [g.values[n].const for n in (x_scale, w_scale, y_scale)]
    if any(a is None for a in arrays):
        return False
    x, w, y = (np.asarray(a, np.float32) for a in arrays)
    with np.errstate(all="ignore"):
        m = (x * w / y).astype(np.float32)
    return bool(m.size) and bool(np.all(np.isfinite(m))) and float(np.max(np.abs(m))) <= 0.5
