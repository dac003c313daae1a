"""QDQ models as integer kernels, where the target says they pay.

A statically quantized model in the QDQ format (what ONNX Runtime's quantize_static writes by
default) keeps float operators between DequantizeLinear and QuantizeLinear nodes:

    DequantizeLinear(x_q) ─┐
    DequantizeLinear(w_q) ─┼─ Conv ── QuantizeLinear ── y_q
    DequantizeLinear(b_q) ─┘

Taken as written, that is a float32 convolution of dequantized 8-bit values. This pass
rewrites each such island into the integer operator it stands for, as ONNX Runtime does
before it runs a QDQ model:

- Conv with a constant int8 weight (per tensor, or per output channel) and an optional
  constant int32 bias whose scale is x_scale * w_scale: QLinearConv, which
  aotc/passes/decompose.py lowers to an 8-bit GEMM where outputs sum many products;
- MatMul by a constant 2-D int8 weight (per tensor or per column): QLinearMatMul;
- Gemm (alpha = beta = 1, A not transposed) by a constant int8 weight and such a bias:
  MatMulInteger, plus the bias, then requantized as QLinearConv is.

x must be uint8 (the operand kinds of the 8-bit GEMM: quantize_static's default), x's and y's
scales and zero points constant scalars, and the float value between the
operator and its QuantizeLinear must feed nothing else. The result is the integer one:
y = saturate(rint(acc * (x_scale * w_scale / y_scale)) + y_zero_point), acc the exact int32
sum. The float reading rounds each product and partial sum to float32 first and divides by
y_scale, so an output may differ from it by one step of y's scale where the value lies next to
a rounding boundary; ONNX Runtime's fused kernels compute the integer result.

The pass runs where the target has an 8-bit GEMM faster than its float32 one (`[gemm]
int8_tile = true`: c-avx512, runtime/aotc_igemm.h's AVX-512 tiles); `,qdq_float` keeps the
float reading there. Elsewhere integer Gemms run as plain C tiles (c, c-avx2) or loops (the
GPU targets), slower than the float32 GEMM, so the float reading is the fast one and the pass
does nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import dtypes
from ..ir.graph import Graph, Node, subgraph_reads
from .decompose import Nodes, requantize

_8BIT = (np.dtype(np.uint8), np.dtype(np.int8))
# how far a bias's scale may be from x_scale * w_scale (float32, relative) and still be read
# as that product: quantizers write the float32 product itself
_BIAS_SCALE_RTOL = 1e-6


def enabled(tgt) -> bool:
    """The target's 8-bit GEMM outruns its float32 one ([gemm] int8_tile) and `,qdq_float` is off."""
    return tgt.gemm.int8_tile and not tgt.numerics.qdq_float


@dataclass
class _Dq:
    """A DequantizeLinear: its 8-bit (or int32) input, constant scale and zero point (a
    zero-point name, "" when absent), and the axis its parameters run along (None: per tensor)."""
    node: Node
    x: str
    scale: np.ndarray
    scale_name: str
    zp: str
    axis: int | None


def _dq(g: Graph, prod: dict, name: str) -> _Dq | None:
    n = prod.get(name)
    if n is None or n.op_type != "DequantizeLinear" or n.domain not in ("", "ai.onnx"):
        return None
    if int(n.attr("block_size", 0)) or len(n.inputs) < 2:
        return None
    scale = g.const(n.inputs[1])
    zp = n.inputs[2] if len(n.inputs) > 2 else ""
    if scale is None or scale.dtype != dtypes.FLOAT32 or (zp and g.const(zp) is None):
        return None
    if scale.size == 1 and scale.ndim <= 1:
        axis = None
    elif scale.ndim == 1:
        axis = int(n.attr("axis", 1))
    else:
        return None
    return _Dq(n, n.inputs[0], scale, n.inputs[1], zp, axis)


def _activation(g: Graph, d: _Dq | None) -> bool:
    """Is d a per-tensor dequantization of a uint8 value with a constant zero point? (The 8-bit
    GEMM multiplies uint8 by int8: int8 activations times int8 weights would run as loops.)"""
    return d is not None and d.axis is None and bool(d.zp) and g.const(d.zp).dtype == np.uint8 \
        and g.const(d.zp).size == 1


def _weight(g: Graph, d: _Dq | None, axis: int) -> np.ndarray | None:
    """d's constant 8-bit weight, when its parameters are per tensor or along `axis`."""
    if d is None:
        return None
    w = g.const(d.x)
    if w is None or w.dtype != np.int8:
        return None
    if d.axis is not None:
        a = d.axis + w.ndim if d.axis < 0 else d.axis
        if a != axis or d.scale.shape != (w.shape[axis],):
            return None
    if d.zp and (g.const(d.zp).dtype != w.dtype or g.const(d.zp).shape != d.scale.shape):
        return None
    return w


def _weight_zp(g: Graph, d: _Dq, w: np.ndarray, hint: str) -> str:
    return d.zp or g.add_const(np.zeros(d.scale.shape, w.dtype), hint)


def _bias(g: Graph, d: _Dq | None, x_scale: np.ndarray, w_scale: np.ndarray, m: int) -> bool:
    """Is d a constant int32 bias of m values, zero point 0, scaled by x_scale * w_scale?"""
    if d is None:
        return False
    b = g.const(d.x)
    if b is None or b.dtype != np.int32 or b.shape != (m,) or d.axis not in (None, 0, -1):
        return False
    if d.zp and np.any(g.const(d.zp)):
        return False
    want = np.broadcast_to((x_scale.reshape(()) * w_scale).astype(np.float32), (m,))
    got = np.broadcast_to(d.scale.reshape(-1), (m,))
    return bool(np.all(np.abs(got - want) <= _BIAS_SCALE_RTOL * np.abs(want)))


def _quantize(g: Graph, n: Node, cons: dict) -> Node | None:
    """The QuantizeLinear that alone reads n's output, to 8 bits per tensor, else None."""
    out = n.outputs[0]
    readers = cons.get(out, [])
    if out in g.outputs or len(readers) != 1:
        return None
    q = readers[0]
    if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or q.inputs[0] != out:
        return None
    scale = g.const(q.inputs[1]) if len(q.inputs) > 1 else None
    zp = q.inputs[2] if len(q.inputs) > 2 else ""
    if scale is None or scale.dtype != dtypes.FLOAT32 or scale.size != 1 or scale.ndim > 1:
        return None
    if int(q.attr("block_size", 0)) or int(q.attr("output_dtype", 0)) or not int(q.attr("saturate", 1)):
        return None
    if zp and (g.const(zp) is None or g.const(zp).dtype not in _8BIT or g.const(zp).size != 1):
        return None
    return q


def _y_params(g: Graph, q: Node) -> tuple[str, str]:
    zp = q.inputs[2] if len(q.inputs) > 2 and q.inputs[2] else g.add_const(np.zeros((), np.uint8), "y_zero_point")
    return q.inputs[1], zp


def _conv(g: Graph, n: Node, prod: dict, cons: dict) -> list[Node] | None:
    if len(n.inputs) < 2:
        return None
    x, wd = _dq(g, prod, n.inputs[0]), _dq(g, prod, n.inputs[1])
    w = _weight(g, wd, 0)
    q = _quantize(g, n, cons)
    if not _activation(g, x) or w is None or w.ndim < 3 or q is None:
        return None
    bias = n.inputs[2] if len(n.inputs) > 2 else ""
    if bias:
        bd = _dq(g, prod, bias)
        if not _bias(g, bd, x.scale, wd.scale, w.shape[0]):
            return None
        bias = bd.x
    ys, yz = _y_params(g, q)
    ins = [x.x, x.scale_name, x.zp, wd.x, wd.scale_name, _weight_zp(g, wd, w, f"{n.name}_w_zero_point"), ys, yz]
    return [Node("QLinearConv", ins + ([bias] if bias else []), [q.outputs[0]], dict(n.attrs), f"{n.name}/qlinear")]


def _matmul(g: Graph, n: Node, prod: dict, cons: dict) -> list[Node] | None:
    a, wd = _dq(g, prod, n.inputs[0]), _dq(g, prod, n.inputs[1])
    w = _weight(g, wd, 1)
    q = _quantize(g, n, cons)
    if not _activation(g, a) or w is None or w.ndim != 2 or q is None:
        return None
    ys, yz = _y_params(g, q)
    ins = [a.x, a.scale_name, a.zp, wd.x, wd.scale_name, _weight_zp(g, wd, w, f"{n.name}_w_zero_point"), ys, yz]
    return [Node("QLinearMatMul", ins, [q.outputs[0]], {}, f"{n.name}/qlinear")]


def _gemm(g: Graph, n: Node, prod: dict, cons: dict) -> list[Node] | None:
    if float(n.attr("alpha", 1.0)) != 1.0 or float(n.attr("beta", 1.0)) != 1.0 or int(n.attr("transA", 0)):
        return None
    a, wd = _dq(g, prod, n.inputs[0]), _dq(g, prod, n.inputs[1])
    trans_b = bool(int(n.attr("transB", 0)))
    w = _weight(g, wd, 0 if trans_b else 1)
    q = _quantize(g, n, cons)
    if not _activation(g, a) or w is None or w.ndim != 2 or q is None:
        return None
    N = w.shape[0] if trans_b else w.shape[1]
    bias = n.inputs[2] if len(n.inputs) > 2 else ""
    if bias:
        bd = _dq(g, prod, bias)
        if not _bias(g, bd, a.scale, wd.scale, N):
            return None
        bias = bd.x
    b = Nodes(g, n)
    wq = b.const(np.ascontiguousarray(w.T) if trans_b else w, "w")
    acc = b.add("MatMulInteger", [a.x, wq, a.zp, _weight_zp(g, wd, w, f"{n.name}_w_zero_point")])
    if bias:
        acc = b.add("Add", [acc, bias])
    ys, yz = _y_params(g, q)
    requantize(g, b, acc, a.scale_name, wd.scale_name, ys, yz, q.outputs[0])
    return b.nodes


_REWRITES = {"Conv": _conv, "MatMul": _matmul, "Gemm": _gemm}


def integer_qdq(g: Graph, tgt) -> Graph:
    """Each DequantizeLinear -> Conv / MatMul / Gemm -> QuantizeLinear island the module's
    docstring lists, as its integer operator, when the target opts in (enabled)."""
    if not enabled(tgt):
        return g
    prod, cons = g.producers(), g.consumers()
    for n in g.nodes:                         # a control-flow node's branches read names too
        for name in subgraph_reads(n):
            cons.setdefault(name, []).append(n)
    out: list[Node] = []
    dropped: set[int] = set()                 # the QuantizeLinear nodes an integer operator replaces
    fed: list[Node] = []                      # the DequantizeLinear nodes that fed a rewritten operator
    for n in g.nodes:
        if id(n) in dropped:
            continue
        rewrite = _REWRITES.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        nodes = rewrite(g, n, prod, cons) if rewrite else None
        if nodes is None:
            out.append(n)
            continue
        q = cons[n.outputs[0]][0]
        dropped.add(id(q))
        fed += [prod[i] for i in n.inputs if i in prod and prod[i].op_type == "DequantizeLinear"]
        out.extend(nodes)
    g.nodes = out
    # those DequantizeLinear nodes go where nothing reads them now: no node, no graph output, no
    # subgraph of a control-flow node (whose reads of the scopes around it are not node inputs
    # yet: this runs before they are inlined, so no general dead-code pass may run here)
    read = {i for n in g.nodes for i in n.inputs if i} | set(g.outputs)
    for n in g.nodes:
        read |= subgraph_reads(n)
    unread = {id(d) for d in fed if d.outputs[0] not in read}
    g.nodes = [n for n in g.nodes if id(n) not in unread]
    return g
