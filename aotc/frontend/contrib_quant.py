"""ONNX Runtime's quantized contrib operators (the QOperator format its quantize_static writes,
and the ones quantize_dynamic writes) as graphs of ai.onnx operators, computing what its CPU
kernels compute: frontend/contrib.py's companion, joined into its table.

    QLinearAdd, QLinearMul           (a - za)(sa / sc) + (b - zb)(sb / sc), resp. (a - za)(b - zb)(sa sb / sc),
                                     rounded to even, + zc, saturated (MLAS's formulas)
    QLinearSigmoid, QLinearLeakyRelu DequantizeLinear -> the op -> QuantizeLinear (ORT's lookup table
                                     holds those values)
    QLinearConcat, QLinearWhere      each input requantized to the output's scale and zero point
    QLinearAveragePool, QLinearGlobalAveragePool   DequantizeLinear -> the float pool -> QuantizeLinear
    QLinearSoftmax                   ORT's own algorithm: its exp table (built from x_scale in double
                                     precision), the row's sum, y = round(e * floor(1 / y_scale) / sum) + zp,
                                     saturated
    QGemm                            MatMulInteger (+ the int32 C), times alpha sa sb (/ y_scale), requantized
    QAttention                       per part, MatMulInteger * (input_scale weight_scale) + bias; then as Attention
    QEmbedLayerNormalization         its tables dequantized (folded at compile time), then as EmbedLayerNormalization
    DynamicQuantizeMatMul            DynamicQuantizeLinear of A, then as MatMulIntegerToFloat
    MatMulIntegerToFloat             MatMulInteger * (a_scale b_scale) (+ bias)
    DynamicQuantizeLSTM              aotc.DynamicQuantizeLSTM: the LSTM kernel with ORT's quantized
                                     products (X and each step's H to uint8, integer Gemms; ops/rnn.py)

The scales are the model's (constants in what the quantizers write; then their ratios fold at
compile time, in float32 as ORT computes them).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ..errors import ModelError, ShapeError
from ..ir.internal import OPSET_ATTR, PACKED_ATTR, QUANTIZED_LSTM
from .contrib import _ATTENTION_ATTRS, _declared, _known, _reject_attrs, after_inputs, attention_core, embed_core
from .emit import EMIT_OPSET, Emit, text

MS = "com.microsoft"

_RANGE = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127)}


def _in(e: Emit, k: int) -> str | None:
    ins = e.node.input
    return ins[k] if len(ins) > k and ins[k] else None


def _qtype(e: Emit, x: str) -> int:
    t = e.elem_type(x)
    if t not in _RANGE:
        e.refuse(f"input {x!r} of element type {TensorProto.DataType.Name(t) if t else 'unknown'} "
                 "(8-bit integers only)")
    return t


def _zp(e: Emit, zp: str | None, t: int) -> str:
    """A zero point as float32 (0 where the model leaves it out)."""
    if zp is None:
        return e.const(np.float32(0))
    return e.op("Cast", [zp], to=TensorProto.FLOAT)


def _centred(e: Emit, x: str, zp: str | None, t: int) -> str:
    """float(x - zero point): exact in float32 for 8-bit values."""
    return e.op("Sub", [e.op("Cast", [x], to=TensorProto.FLOAT), _zp(e, zp, t)])


def _saturate(e: Emit, v: str, zp: str | None, t: int, out: str) -> str:
    """round-half-even(v) + zero point, saturated to t's range, as t: MLAS's requantization."""
    lo, hi = _RANGE[t]
    r = e.op("Add", [e.op("Round", [v]), _zp(e, zp, t)])
    r = e.op("Clip", [r, e.const(np.float32(lo)), e.const(np.float32(hi))])
    return e.op("Cast", [r], out=out, to=t)


def _quantize_zp_first(e: Emit, v: str, scale: str, zp: str | None, t: int, out: str) -> str:
    """round-half-even(v / scale + zero point), saturated: ORT's pooling kernels' quantization,
    which adds the zero point before rounding (a tie then rounds to an even sum, not to an even
    quotient: quantized inputs make ties common)."""
    lo, hi = _RANGE[t]
    r = e.op("Round", [e.op("Add", [e.op("Div", [v, scale]), _zp(e, zp, t)])])
    return e.op("Cast", [e.op("Clip", [r, e.const(np.float32(lo)), e.const(np.float32(hi))])], out=out, to=t)


def _dq(e: Emit, x: str, scale: str, zp: str | None) -> str:
    return e.op("DequantizeLinear", [x, scale] + ([zp] if zp else []))


def _q(e: Emit, x: str, scale: str, zp: str | None, t: int, out: str) -> str:
    zero = zp or e.const(np.zeros((), np.uint8 if t == TensorProto.UINT8 else np.int8))
    return e.op("QuantizeLinear", [x, scale, zero], out=out)


def _qlinear_binary(e: Emit, a: dict):
    if a:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(a))} are not defined for it")
    A, sa, za, B, sb, zb, sc, zc = (_in(e, k) for k in range(8))
    if A is None or B is None or sa is None or sb is None or sc is None:
        raise ModelError(f"{e.label}: A, A_scale, B, B_scale and C_scale are required")
    t = _qtype(e, A)
    if _qtype(e, B) != t:
        raise ModelError(f"{e.label}: A and B have different element types")
    ca, cb = _centred(e, A, za, t), _centred(e, B, zb, t)
    if e.node.op_type == "QLinearAdd":
        v = e.op("Add", [e.op("Mul", [ca, e.op("Div", [sa, sc])]), e.op("Mul", [cb, e.op("Div", [sb, sc])])])
    else:
        v = e.op("Mul", [e.op("Mul", [ca, cb]), e.op("Div", [e.op("Mul", [sa, sb]), sc])])
    _saturate(e, v, zc, t, e.node.output[0])


def _qlinear_unary(op: str, attrs: dict):
    def build(e: Emit, a: dict):
        extra = set(a) - set(attrs)
        if extra:
            raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(extra))} are not defined for it")
        x, sx, zx, sy, zy = (_in(e, k) for k in range(5))
        t = _qtype(e, x)
        kw = {k: float(a.get(k, d)) for k, d in attrs.items()}
        _q(e, e.op(op, [_dq(e, x, sx, zx)], **kw), sy, zy, t, e.node.output[0])
    return build


def _qlinear_concat(e: Emit, a: dict):
    if "axis" not in a or set(a) - {"axis"}:
        raise ModelError(f"{e.label}: takes one attribute, axis (required)")
    ins = list(e.node.input)
    if len(ins) < 5 or (len(ins) - 2) % 3:
        raise ModelError(f"{e.label}: inputs are Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples")
    sy, zy = ins[0], ins[1] or None
    t = _qtype(e, ins[2])
    parts = []
    for k in range(2, len(ins), 3):
        x, sx, zx = ins[k], ins[k + 1], ins[k + 2] or None
        if _qtype(e, x) != t:
            raise ModelError(f"{e.label}: inputs of different element types")
        parts.append(_q(e, _dq(e, x, sx, zx), sy, zy, t, e.name("requant")))
    e.op("Concat", parts, out=e.node.output[0], axis=int(a["axis"]))


def _qlinear_where(e: Emit, a: dict):
    if a:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(a))} are not defined for it")
    cond, x, sx, zx, y, sy, zy, sz, zz = (_in(e, k) for k in range(9))
    t = _qtype(e, x)
    xs = _q(e, _dq(e, x, sx, zx), sz, zz, t, e.name("x"))
    ys = _q(e, _dq(e, y, sy, zy), sz, zz, t, e.name("y"))
    e.op("Where", [cond, xs, ys], out=e.node.output[0])


_POOL_ATTRS = {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}


def _channels_first(e: Emit, x: str, r: int, last: int) -> tuple[str, list | None]:
    if not last:
        return x, None
    to = [0, r - 1] + list(range(1, r - 1))
    back = [0] + list(range(2, r)) + [1]
    return e.op("Transpose", [x], perm=to), back


def _qlinear_average_pool(e: Emit, a: dict):
    extra = set(a) - _POOL_ATTRS - {"channels_last"}
    if extra:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(extra))} are not defined for it")
    x, sx, zx, sy, zy = (_in(e, k) for k in range(5))
    t = _qtype(e, x)
    f, back = _channels_first(e, _dq(e, x, sx, zx), e.rank(x), int(a.get("channels_last", 0)))
    kw = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items() if k in _POOL_ATTRS}
    p = e.op("AveragePool", [f], **kw)
    if back:
        p = e.op("Transpose", [p], perm=back)
    _quantize_zp_first(e, p, sy, zy, t, e.node.output[0])


def _qlinear_global_average_pool(e: Emit, a: dict):
    if set(a) - {"channels_last"}:
        raise ModelError(f"{e.label}: takes one attribute, channels_last")
    x, sx, zx, sy, zy = (_in(e, k) for k in range(5))
    t = _qtype(e, x)
    f, back = _channels_first(e, _dq(e, x, sx, zx), e.rank(x), int(a.get("channels_last", 0)))
    p = e.op("GlobalAveragePool", [f])
    if back:
        p = e.op("Transpose", [p], perm=back)
    _q(e, p, sy, zy, t, e.node.output[0])


def _softmax_table(e: Emit, x_scale: str, d: int) -> str:
    """ORT's QLinearSoftmax table, indexed by x - max(row) + 255: exp((j - 255 + shift) x_scale)
    computed in double and stored as float, where shift = max(0, log(FLT_MAX / d) - 5) / x_scale
    keeps a row's sum of d such values within float's range (its log of a float: float32). A
    constant x_scale folds it at compile time."""
    bound = float(np.log(np.float32(np.finfo(np.float32).max) / np.float32(d)))
    xs = e.op("Cast", [e.op("Reshape", [x_scale, e.const(np.array([], np.int64))])], to=TensorProto.DOUBLE)
    shift = e.op("Div", [e.const(np.float64(max(0.0, bound - 5.0))), xs])
    j = e.const(np.arange(256, dtype=np.float64) - 255)
    return e.op("Cast", [e.op("Exp", [e.op("Mul", [e.op("Add", [j, shift]), xs])])], to=TensorProto.FLOAT)


def _qlinear_softmax(e: Emit, a: dict):
    if set(a) - {"axis", "opset"} or "opset" not in a:
        raise ModelError(f"{e.label}: takes attributes opset (required) and axis")
    opset = int(a["opset"])
    x, sx, zx, sy, zy = (_in(e, k) for k in range(5))
    t = _qtype(e, x)
    shape = _known(e, x, "X")
    r = len(shape)
    axis = int(a.get("axis", 1 if opset < 13 else -1))
    axis = axis + r if axis < 0 else axis
    if not 0 <= axis < r:
        raise ShapeError(f"{e.label}: axis {a.get('axis')} is outside a rank-{r} input")
    if opset < 13:            # (the opset-12 softmax: over the axes from `axis` on, flattened)
        d = int(np.prod(shape[axis:]))
        work = e.op("Reshape", [x, e.const(np.array([int(np.prod(shape[:axis])), d], np.int64))])
        red = 1
    else:
        d, work, red = shape[axis], x, axis
    table = _softmax_table(e, sx, d)
    xi = e.op("Cast", [work], to=TensorProto.INT32)
    idx = e.op("Add", [e.op("Sub", [xi, e.reduce("ReduceMax", xi, red)]), e.const(np.int32(255))])
    ex = e.op("Gather", [table, idx], axis=0)
    total = e.reduce("ReduceSum", ex, red)
    yf = e.op("Floor", [e.op("Div", [e.const(np.float32(1.0)), sy])])           # (ORT's integral "Y_scale")
    v = e.op("Add", [e.op("Round", [e.op("Div", [e.op("Mul", [ex, yf]), total])]), _zp(e, zy, t)])
    lo, hi = _RANGE[t]          # (ORT 1.32 saturates both types)
    out = e.op("Cast", [e.op("Clip", [v, e.const(np.float32(lo)), e.const(np.float32(hi))])], to=t)
    if opset < 13:
        out = e.op("Reshape", [out, e.const(np.array(shape, np.int64))])
    e.op("Identity", [out], out=e.node.output[0])


def _qgemm(e: Emit, a: dict):
    extra = set(a) - {"alpha", "transA", "transB"}
    if extra:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(extra))} are not defined for it")
    A, sa, za, B, sb, zb, C, sy, zy = (_in(e, k) for k in range(9))
    if (sy is None) != (zy is None):
        e.refuse("y_scale without y_zero_point or the reverse (ONNX Runtime's kernel reads them as a pair)")
    if C is not None and e.elem_type(C) != TensorProto.INT32:
        raise ModelError(f"{e.label}: C must be int32 (the bias in the product's scale)")
    ta = _qtype(e, A)
    _qtype(e, B)
    if int(a.get("transA", 0)):
        A = e.op("Transpose", [A], perm=[1, 0])
    if int(a.get("transB", 0)):
        B = e.op("Transpose", [B], perm=[1, 0])
    acc = e.op("MatMulInteger", [A, B] + [za or e.const(np.zeros((), _np(ta)))] + ([zb] if zb else []))
    if C is not None:
        acc = e.op("Add", [acc, C])
    # ORT's output scale: alpha * a_scale * b_scale (per column), then / y_scale, in float32
    m = e.op("Mul", [e.op("Mul", [e.const(np.float32(a.get("alpha", 1.0))), sa]), sb])
    if sy is not None:
        m = e.op("Div", [m, sy])
    v = e.op("Mul", [e.op("Cast", [acc], to=TensorProto.FLOAT), m])
    if sy is None:
        e.op("Identity", [v], out=e.node.output[0])
    else:
        _saturate(e, v, zy, e.elem_type(zy), e.node.output[0])


def _q_attention(e: Emit, a: dict):
    _reject_attrs(e, a, _ATTENTION_ATTRS)
    x, w, bias, sx, sw, mask, zx, zw, past = (_in(e, k) for k in range(9))
    if x is None or w is None or bias is None or sx is None or sw is None:
        raise ModelError(f"{e.label}: input, weight, bias, input_scale and weight_scale are required")
    _qtype(e, x)
    tw = _qtype(e, w)
    wsh = _known(e, w, "weight")

    def part(v, cols):
        """The part's columns of a scale or zero point given per tensor or per column (expanded
        to every column first: a constant one folds)."""
        full = e.op("Expand", [v, e.const(np.array([wsh[1]], np.int64))])
        return e.op("Slice", [full, cols[0], cols[1], e.const(np.array([0], np.int64))])

    def project(cols):
        wq = e.op("Slice", [w, *cols])
        acc = e.op("MatMulInteger", [x, wq, zx or e.const(np.zeros((), _np(_qtype(e, x))))]
                   + [part(zw, cols) if zw else e.const(np.zeros((), _np(tw)))])
        scale = e.op("Mul", [sx, part(sw, cols)])
        return e.op("Add", [e.op("Mul", [e.op("Cast", [acc], to=TensorProto.FLOAT), scale]),
                            e.op("Slice", [bias, cols[0], cols[1], e.const(np.array([0], np.int64))])])
    attention_core(e, a, x, wsh, project, mask=mask, past=past, attn_bias=None, past_len=None)


def _q_embed_layer_norm(e: Emit, a: dict):
    _reject_attrs(e, a, {"epsilon"})
    ins = [_in(e, k) for k in range(18)]
    ids, seg_ids, mask = ins[0], ins[1], ins[7]
    tables = []
    for q, s_, z in ((2, 8, 13), (3, 9, 14), (4, 10, 15), (5, 11, 16), (6, 12, 17)):
        if ins[q] is None:
            tables.append(None)
            continue
        if ins[s_] is None:
            raise ModelError(f"{e.label}: input {q} has no scale (input {s_})")
        tables.append(_dq(e, ins[q], ins[s_], ins[z]))
    words, pos, segs, gamma, beta = tables
    embed_core(e, a, ids, seg_ids, words, pos, segs, gamma, beta, mask, None)


def _dynamic_quantize_matmul(e: Emit, a: dict):
    if a:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(a))} are not defined for it")
    A, B, sb, zb, bias = (_in(e, k) for k in range(5))
    tb = _qtype(e, B)
    aq, sa, za = (e.name(n) for n in ("a_q", "a_scale", "a_zp"))
    e.nodes.append(helper.make_node("DynamicQuantizeLinear", [A], [aq, sa, za], **{OPSET_ATTR: EMIT_OPSET}))
    _integer_to_float(e, aq, B, sa, sb, za, zb or e.const(np.zeros((), _np(tb))), bias)


def _matmul_integer_to_float(e: Emit, a: dict):
    if a:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(sorted(a))} are not defined for it")
    A, B, sa, sb, za, zb, bias = (_in(e, k) for k in range(7))
    ta, tb = _qtype(e, A), _qtype(e, B)
    _integer_to_float(e, A, B, sa, sb, za or e.const(np.zeros((), _np(ta))), zb or e.const(np.zeros((), _np(tb))),
                      bias)


def _integer_to_float(e: Emit, A, B, sa, sb, za, zb, bias):
    """(A - za)(B - zb) * (sa * sb) (+ bias): ORT's multiplier a_scale * b_scale, per column where
    b_scale is."""
    acc = e.op("MatMulInteger", [A, B, za, zb])
    y = e.op("Mul", [e.op("Cast", [acc], to=TensorProto.FLOAT), e.op("Mul", [sa, sb])])
    if bias:
        y = e.op("Add", [y, bias])
    e.op("Identity", [y], out=e.node.output[0])


_LSTM_ATTRS = {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
               "input_forget"}


def _dynamic_quantize_lstm(e: Emit, a: dict):
    """aotc.DynamicQuantizeLSTM on the node's inputs: its W [D, input, 4H] and R [D, H, 4H] are
    the transposed form the LSTM's GEMMs read (PACKED_ATTR)."""
    _reject_attrs(e, a, _LSTM_ATTRS)
    ins = list(e.node.input) + [""] * (12 - len(e.node.input))
    if len(e.node.input) > 12:
        raise ModelError(f"{e.label}: {len(e.node.input)} inputs (12 at most)")
    for k in (1, 2):
        _qtype(e, ins[k])
    missing = [what for k, what in zip(range(8, 12), ("W_scale", "W_zero_point", "R_scale", "R_zero_point"))
               if not ins[k]]
    if missing:
        raise ModelError(f"{e.label}: {', '.join(missing)} missing (the operator requires them)")
    x, r = _declared(e, ins[0]), _declared(e, ins[2])
    if len(x) != 3 or len(r) != 3:
        raise ShapeError(f"{e.label}: X must be [seq, batch, input] and R [directions, hidden, 4 * hidden]")
    D = 2 if text(a.get("direction", "forward")) == "bidirectional" else 1
    H = int(a.get("hidden_size", 0)) or r[1]
    for o, shape in zip(e.node.output, ([x[0], D, x[1], H], [D, x[1], H], [D, x[1], H])):
        if o:
            e.declare(o, TensorProto.FLOAT, shape)
    e.nodes.append(helper.make_node(QUANTIZED_LSTM, ins, list(e.node.output), name=e.node.name,
                                    **a, **{PACKED_ATTR: 1}))


def _np(t: int):
    return np.uint8 if t == TensorProto.UINT8 else np.int8


QUANT_BUILDERS = {k: after_inputs(b) for k, b in {
    (MS, "QLinearAdd"): _qlinear_binary, (MS, "QLinearMul"): _qlinear_binary,
    (MS, "QLinearSigmoid"): _qlinear_unary("Sigmoid", {}),
    (MS, "QLinearLeakyRelu"): _qlinear_unary("LeakyRelu", {"alpha": 0.01}),
    (MS, "QLinearConcat"): _qlinear_concat, (MS, "QLinearWhere"): _qlinear_where,
    (MS, "QLinearAveragePool"): _qlinear_average_pool, (MS, "QLinearGlobalAveragePool"): _qlinear_global_average_pool,
    (MS, "QLinearSoftmax"): _qlinear_softmax, (MS, "QGemm"): _qgemm,
    (MS, "QAttention"): _q_attention, (MS, "QEmbedLayerNormalization"): _q_embed_layer_norm,
    (MS, "DynamicQuantizeMatMul"): _dynamic_quantize_matmul, (MS, "MatMulIntegerToFloat"): _matmul_integer_to_float,
    (MS, "DynamicQuantizeLSTM"): _dynamic_quantize_lstm,
}.items()}

QUANT_HOW = {
    "QLinearAdd": "Casts, Sub, Mul, Add, Round, Clip (MLAS's formula)",
    "QLinearMul": "Casts, Sub, Mul, Round, Clip (MLAS's formula)",
    "QLinearSigmoid": "DequantizeLinear, Sigmoid, QuantizeLinear",
    "QLinearLeakyRelu": "DequantizeLinear, LeakyRelu, QuantizeLinear",
    "QLinearConcat": "requantizing DequantizeLinear / QuantizeLinear, Concat",
    "QLinearWhere": "requantizing DequantizeLinear / QuantizeLinear, Where",
    "QLinearAveragePool": "DequantizeLinear, AveragePool, QuantizeLinear",
    "QLinearGlobalAveragePool": "DequantizeLinear, GlobalAveragePool, QuantizeLinear",
    "QLinearSoftmax": "ORT's exp table (Gather), ReduceMax, ReduceSum, Round",
    "QGemm": "MatMulInteger, Add, Mul, Round, Clip",
    "QAttention": "MatMulInteger per Q / K / V, Mul, Add, then as Attention",
    "QEmbedLayerNormalization": "DequantizeLinear of the tables, then as EmbedLayerNormalization",
    "DynamicQuantizeMatMul": "DynamicQuantizeLinear, MatMulInteger, Mul, Add",
    "MatMulIntegerToFloat": "MatMulInteger, Mul, Add",
    "DynamicQuantizeLSTM": "aotc.DynamicQuantizeLSTM: the LSTM kernel with ONNX Runtime's quantized products (X and "
                           "each step's H quantized to uint8 at run time, integer GEMMs, float scales)",
}

QUANT_REFUSED = {
    "QGemm": "y_scale without y_zero_point (or the reverse)",
    "QAttention": "as Attention's",
    "DynamicQuantizeLSTM": "per-column weight zero points that differ (int8: other than 0), as ONNX Runtime does",
}
