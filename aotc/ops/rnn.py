"""Recurrent ops: LSTM, GRU and RNN, with ONNX semantics (opset 14+: `layout`).

Lowering, per direction, inside one kernel:
  1. the products below want Wᵀ [I, G*H] and Rᵀ [H, G*H] (GEMMs whose columns are the G*H
     gate units). Constant weights were transposed at compile time by passes/recurrent.py
     (the node then carries PACKED_ATTR and W/R shapes [D, in, G*H]); weights that are graph
     inputs are read transposed through strides. Either way they are strided GEMM operands,
     which the schedule may pack;
  2. XG = X · Wᵀ for every time step at once (one GEMM over S*B rows), biases added;
  3. per time step: GR = H · Rᵀ (one GEMM over the batch), then the gate math for every
     (batch, unit) element, which updates the state H (and C) in scratch and writes Y.
The two directions of a bidirectional node are independent: when they use the same
activations they are one spatial loop over d (each with its own scratch), so a schedule can run
them at once; the reverse one walks the time steps backwards.
GRU with linear_before_reset=0 needs (r ⊙ H) · Rₕᵀ, so it does a second, smaller GEMM
after the z/r gates of the step.

`sequence_lens` is honoured with masks: a batch entry stops updating its state after its
length, its Y rows past the length are zero, and the reverse direction starts at its own
last valid step. When the lengths are a constant equal to the full sequence, none of that
code is generated.

aotc.DynamicQuantizeLSTM (ONNX Runtime's DynamicQuantizeLSTM, ir/internal.py QUANTIZED_LSTM) is
the LSTM with 8-bit W and R and ONNX Runtime's numerics: X's first max(sequence_lens) steps are
quantized to uint8 once, with the scale and zero point of their range (ops/quant.py
quantize_dynamic_u8), each step's H likewise; both products are integer Gemms, scaled by
a_scale x w_scale (per tensor or per column) into float. The biases come after the two
products and the peepholes, as ONNX Runtime adds them. Its H range at a step counts the rows
whose previous step ran: ONNX Runtime reads the previous H from Y when the node has a Y output,
where a finished row is zeros, else from Y_h, where it is the row's last H.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..errors import ModelError, ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.dims import is_dim
from ..ir.internal import PACKED_ATTR, QUANTIZED_LSTM
from ..kernel.ir import ORDERED, SPATIAL, Builder, Const, GemmDest, Load, call, cast, const, matrix, select
from .quant import quantize_dynamic_u8
from .registry import register

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1, QUANTIZED_LSTM: 4}
_N_ACT = {"LSTM": 3, "GRU": 2, "RNN": 1, QUANTIZED_LSTM: 3}
_DEFAULT_ACT = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"],
                QUANTIZED_LSTM: ["Sigmoid", "Tanh", "Tanh"]}

# activation name -> (uses alpha, uses beta, default alpha, default beta)
_ACT_PARAMS = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0), "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0),
}


def _activation(name: str, alpha: float, beta: float):
    f32 = dtypes.FLOAT32

    def c(v):
        return const(v, f32)

    fns = {
        "relu": lambda x: select(x > c(0), x, c(0)),
        "tanh": lambda x: call("tanh", x),
        "sigmoid": lambda x: call("sigmoid", x),
        "softsign": lambda x: x / (c(1) + call("abs", x)),
        "softplus": lambda x: call("log1p", call("exp", x)),
        "affine": lambda x: c(alpha) * x + c(beta),
        "leakyrelu": lambda x: select(x >= c(0), x, x * c(alpha)),
        "thresholdedrelu": lambda x: select(x > c(alpha), x, c(0)),
        "scaledtanh": lambda x: c(alpha) * call("tanh", c(beta) * x),
        "hardsigmoid": lambda x: select(c(alpha) * x + c(beta) > c(0),
                                        select(c(alpha) * x + c(beta) < c(1), c(alpha) * x + c(beta), c(1)),
                                        c(0)),
        "elu": lambda x: select(x >= c(0), x, c(alpha) * (call("exp", x) - c(1))),
    }
    return fns[name]


def _activations(node, n_dir: int):
    """The activation functions per direction, [[f, g, h] for each direction], and what they are
    ([(name, alpha, beta), ...] per direction)."""
    k = _N_ACT[node.op_type]
    names = list(node.attr("activations", None) or _DEFAULT_ACT[node.op_type] * n_dir)
    if len(names) == k and n_dir == 2:
        names = names * 2
    if len(names) != k * n_dir:
        raise ShapeError(f"{node.op_type} node {node.name!r}: {len(names)} activations given, "
                         f"{k * n_dir} expected")
    alphas = list(node.attr("activation_alpha", None) or [])
    betas = list(node.attr("activation_beta", None) or [])
    fns, specs = [], []
    for nm in names:
        key = nm.lower()
        if key not in _ACT_PARAMS:
            raise UnsupportedError([f"{node.op_type} node {node.name!r}: activation {nm!r}"],
                                   hint="supported: " + ", ".join(sorted(_ACT_PARAMS)))
        ua, ub, da, db = _ACT_PARAMS[key]
        a = alphas.pop(0) if ua and alphas else da
        bb = betas.pop(0) if ub and betas else db
        fns.append(_activation(key, float(a), float(bb)))
        specs.append((key, float(a), float(bb)))
    return [fns[d * k:(d + 1) * k] for d in range(n_dir)], [specs[d * k:(d + 1) * k] for d in range(n_dir)]


def _dims(node, ins):
    """(S, B, I, D, H) from the inputs and attributes, validated."""
    X, W, R = ins[0], ins[1], ins[2]
    layout = int(node.attr("layout", 0))
    if len(X.shape) != 3:
        raise ShapeError(f"{node.op_type} node {node.name!r}: X must be 3-D, got {X.shape}")
    if layout:
        B, S, I = X.shape
    else:
        S, B, I = X.shape
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ShapeError(f"{node.op_type} node {node.name!r}: unknown direction {direction!r}")
    D = 2 if direction == "bidirectional" else 1
    H = int(node.attr("hidden_size", 0) or R.shape[-1])
    G = _GATES[node.op_type]
    if node.attr(PACKED_ATTR):
        ok = tuple(W.shape) == (D, I, G * H) and tuple(R.shape) == (D, H, G * H)
    else:
        ok = tuple(W.shape) == (D, G * H, I) and tuple(R.shape) == (D, G * H, H)
    if not ok:
        raise ShapeError(f"{node.op_type} node {node.name!r}: W {W.shape} / R {R.shape} do not match "
                         f"directions={D}, hidden_size={H}, input_size={I}")
    return S, B, I, D, H


def _rnn_infer(node, ins):
    S, B, _, D, H = _dims(node, ins)
    dt = ins[0].dtype
    if int(node.attr("layout", 0)):
        y, yh = (B, S, D, H), (B, D, H)
    else:
        y, yh = (S, D, B, H), (D, B, H)
    return [(dt, y), (dt, yh)] + ([(dt, yh)] if _GATES[node.op_type] == 4 else [])


def _rnn_fold(node, ins):
    """A packed node on constant inputs: evaluate the ONNX op on the unpacked weights."""
    if node.op_type == QUANTIZED_LSTM or not node.attr(PACKED_ATTR) \
            or any(v is not None and v.const is None for v in ins):
        return None
    from .reference import evaluate
    arrays = [v.const if v is not None else None for v in ins]
    arrays[1], arrays[2] = arrays[1].transpose(0, 2, 1), arrays[2].transpose(0, 2, 1)
    return evaluate(node, arrays, _rnn_infer(node, ins))


def _full_length(ctx, S) -> bool:
    """True when sequence_lens is absent or a constant equal to S everywhere."""
    if len(ctx.ins) <= 4 or ctx.ins[4] is None:
        return True
    lens = ctx.const(4)
    return lens is not None and bool(np.all(np.asarray(lens) == S))


def _lower_rnn(node, ctx):
    quantized = node.op_type == QUANTIZED_LSTM
    kind = "LSTM" if quantized else node.op_type
    G = _GATES[kind]
    ins = list(ctx.ins) + [None] * (12 - len(ctx.ins))
    X, W, R, Bias, seq, h0 = ins[:6]
    c0 = ins[6] if kind == "LSTM" else None
    P = ins[7] if kind == "LSTM" else None
    # outputs nothing reads (Y_c of a stacked LSTM, say) are not written at all
    consumers = ctx.graph.consumers()
    outs = [buf if buf is not None and (name in ctx.graph.outputs or consumers.get(name)) else None
            for name, buf in zip(node.outputs, ctx.outs)]
    outs += [None] * (3 - len(outs))
    Y, Yh, Yc = outs[0], outs[1], (outs[2] if kind == "LSTM" else None)
    if X.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"{kind} node {node.name!r}: dtype {X.dtype} (only float32 is compiled)"])
    S, B, I, D, H = _dims(node, [X, W, R])
    GH = G * H
    layout = int(node.attr("layout", 0))
    direction_name = node.attr("direction", "forward")
    clip = node.attr("clip", None)
    input_forget = int(node.attr("input_forget", 0)) if kind == "LSTM" else 0
    lbr = int(node.attr("linear_before_reset", 0)) if kind == "GRU" else 0
    acts, specs = _activations(node, D)
    one_loop = D == 2 and specs[0] == specs[1]
    masked = not _full_length(ctx, S)
    f32 = dtypes.FLOAT32
    b = ctx.b

    def clipped(x):
        if clip is None:
            return x
        lim = const(float(clip), f32)
        return select(x < -lim, -lim, select(x > lim, lim, x))

    def either(rev, forward, backward):
        """`forward` for a forward direction, `backward` for a reverse one (rev 0 / 1)."""
        if isinstance(rev, Const):
            return backward if rev.value else forward
        return forward + rev * (backward - forward)

    # index helpers (layout 0: [S, B, ...], layout 1: [B, S, ...])
    def x_row(t, bi):
        return bi * S + t if layout else t * B + bi

    def y_at(t, d, bi, j):
        return ((bi * S + t) * D + d) * H + j if layout else ((t * D + d) * B + bi) * H + j

    def state_at(d, bi, j):
        return (bi * D + d) * H + j if layout else (d * B + bi) * H + j

    transposed = bool(node.attr(PACKED_ATTR))     # W [D, I, GH] and R [D, H, GH]

    def weights_t(i, n_in, c0=0):
        """Direction d -> Wᵀ (i=1) or Rᵀ (i=2) from column c0 on, [n_in, GH] each, as a GEMM operand."""
        buf = ctx.ins[i]
        if transposed:
            return lambda d: matrix(buf, d * n_in * GH + c0, GH, 1)
        return lambda d: matrix(buf, (d * GH + c0) * n_in, 1, n_in)

    w_t = weights_t(1, I)
    if kind == "GRU" and not lbr:      # (r ⊙ H) · Rₕᵀ comes after the z and r gates
        r_t, rh_t = weights_t(2, H, 0), weights_t(2, H, 2 * H)
    else:
        r_t = weights_t(2, H)
    # scratch per direction when the directions run as one loop (a leading dim of 1 otherwise)
    nd = D if one_loop else 1
    XG = ctx.scratch((nd, S * B, GH), f32, "xg")
    GR = ctx.scratch((nd, B, GH), f32, "gr")
    Hs = ctx.scratch((nd, B, H), f32, "h")
    Cs = ctx.scratch((nd, B, H), f32, "c") if kind == "LSTM" else None
    RH = ctx.scratch((nd, B, H), f32, "rh") if kind == "GRU" and not lbr else None
    if quantized:
        q = _Quantized(ctx, node, S, B, I, H, nd, masked, h_from_y=bool(node.outputs and node.outputs[0]))

    if masked and Y is not None:
        b.comment("steps past a sequence's length output zeros")
        with b.loop(Y.size, "i", role=SPATIAL) as i:
            b.store(Y, i, const(0.0, f32))

    def direction(d, rev, act):
        """Direction d (rev = 1 when it runs backwards), on scratch row dd."""
        dd = d if one_loop else const(0)
        f_act = act[0]
        g_act = act[1] if len(act) > 1 else None
        h_act = act[2] if len(act) > 2 else None
        if quantized:
            q.input_projection(d, dd, w_t(d), XG)
        else:
            b.comment("input projection of every time step: XG = X . W^T (+ biases)")
            b.gemm(S * B, GH, I, matrix(X, 0, I, 1), w_t(d), GemmDest(XG, (dd, 0, 0), (1,), (2,)))
        if Bias is not None and not quantized:
            with b.loops((S * B, GH), ["r", "g"], role=SPATIAL) as (r, g):
                wb = Bias[d * 2 * GH + g]
                rb = Bias[d * 2 * GH + GH + g]
                if lbr:       # GRU: Rb of the h gate goes inside r * (...)
                    v = XG[dd, r, g] + wb + select(g < 2 * H, rb, const(0.0, f32))
                else:
                    v = XG[dd, r, g] + wb + rb
                b.store(XG, (dd, r, g), v)
        b.comment("initial state")
        with b.loops((B, H), ["bi", "j"], role=SPATIAL) as (bi, j):
            b.store(Hs, (dd, bi, j), h0[state_at(d, bi, j)] if h0 is not None else const(0.0, f32))
            if Cs is not None:
                b.store(Cs, (dd, bi, j), c0[state_at(d, bi, j)] if c0 is not None else const(0.0, f32))

        with b.loop(S, "s", role=ORDERED) as s:       # each step needs the state the last one made
            step_t = either(rev, s, (S - 1) - s)
            if quantized:
                q.recurrent_projection(d, dd, s, Hs, r_t(d), GR)
            else:
                b.gemm(B, 2 * H if kind == "GRU" and not lbr else GH, H, matrix(Hs, dd * (B * H), H, 1), r_t(d),
                       GemmDest(GR, (dd, 0, 0), (1,), (2,)))

            def elementwise(body):
                """Run body(bi, j, t) over the batch and units, masked by sequence length."""
                with contextlib.ExitStack() as scope:
                    bi = scope.enter_context(b.loop(B, "bi", role=SPATIAL)) if is_dim(B) or B > 1 else const(0)
                    t = step_t
                    if masked:
                        length = b.local("len", cast(seq[bi], dtypes.INT64))
                        scope.enter_context(b.if_(s < length))
                        t = b.local("t", either(rev, s, (length - 1) - s))
                    with b.loop(H, "j", role=SPATIAL) as j:
                        body(bi, j, t)

            if kind == "LSTM":
                def lstm_cell(bi, j, t):
                    row = x_row(t, bi)
                    c_prev = b.local("c_prev", Cs[dd, bi, j])
                    pre = lambda gi: XG[dd, row, gi * H + j] + GR[dd, bi, gi * H + j]   # noqa: E731
                    pi, po, pf, pc = pre(0), pre(1), pre(2), pre(3)
                    if P is not None:
                        pi = pi + P[d * 3 * H + j] * c_prev
                        pf = pf + P[d * 3 * H + 2 * H + j] * c_prev
                    if quantized and Bias is not None:
                        # (ONNX Runtime adds Wb + Rb after the products and the peepholes)
                        bias = lambda gi: Bias[d * 2 * GH + gi * H + j] + Bias[d * 2 * GH + GH + gi * H + j]  # noqa: E731
                        pi, pf, pc = pi + bias(0), pf + bias(2), pc + bias(3)
                    gi = b.local("i_g", f_act(clipped(pi)))
                    gf = b.local("f_g", const(1.0, f32) - gi if input_forget else f_act(clipped(pf)))
                    gc = b.local("c_g", g_act(clipped(pc)))
                    c_new = b.local("c_new", gf * c_prev + gi * gc)
                    if P is not None:
                        po = po + P[d * 3 * H + H + j] * c_new
                    if quantized and Bias is not None:
                        po = po + bias(1)
                    go = b.local("o_g", f_act(clipped(po)))
                    h_new = b.local("h_new", go * h_act(c_new))
                    b.store(Cs, (dd, bi, j), c_new)
                    b.store(Hs, (dd, bi, j), h_new)
                    if Y is not None:
                        b.store(Y, y_at(t, d, bi, j), h_new)
                elementwise(lstm_cell)
            elif kind == "RNN":
                def rnn_cell(bi, j, t):
                    h_new = b.local("h_new", f_act(clipped(XG[dd, x_row(t, bi), j] + GR[dd, bi, j])))
                    b.store(Hs, (dd, bi, j), h_new)
                    if Y is not None:
                        b.store(Y, y_at(t, d, bi, j), h_new)
                elementwise(rnn_cell)
            else:
                def gru_gates(bi, j, t):
                    row = x_row(t, bi)
                    z = f_act(clipped(XG[dd, row, j] + GR[dd, bi, j]))
                    r = b.local("r_g", f_act(clipped(XG[dd, row, H + j] + GR[dd, bi, H + j])))
                    b.store(GR, (dd, bi, j), z)          # keep z for the update below
                    if lbr:
                        b.store(GR, (dd, bi, H + j), r)
                    else:
                        b.store(RH, (dd, bi, j), r * Hs[dd, bi, j])

                def gru_update(bi, j, t):
                    row = x_row(t, bi)
                    z = GR[dd, bi, j]
                    if lbr:
                        rb = Bias[d * 2 * GH + GH + 2 * H + j] if Bias is not None else None
                        rec = GR[dd, bi, 2 * H + j] + rb if rb is not None else GR[dd, bi, 2 * H + j]
                        pre = XG[dd, row, 2 * H + j] + GR[dd, bi, H + j] * rec
                    else:
                        pre = XG[dd, row, 2 * H + j] + GR[dd, bi, 2 * H + j]
                    hh = b.local("h_g", g_act(clipped(pre)))
                    h_new = b.local("h_new", (const(1.0, f32) - z) * hh + z * Hs[dd, bi, j])
                    b.store(Hs, (dd, bi, j), h_new)
                    if Y is not None:
                        b.store(Y, y_at(t, d, bi, j), h_new)

                elementwise(gru_gates)
                if not lbr:
                    b.gemm(B, H, H, matrix(RH, dd * (B * H), H, 1), rh_t(d),
                           GemmDest(GR, (dd, 0, 2 * H), (1,), (2,)))
                elementwise(gru_update)

        if Yh is None and Yc is None:
            return
        b.comment("final state")
        with b.loops((B, H), ["bi", "j"], role=SPATIAL) as (bi, j):
            if Yh is not None:
                b.store(Yh, state_at(d, bi, j), Hs[dd, bi, j])
            if Yc is not None:
                b.store(Yc, state_at(d, bi, j), Cs[dd, bi, j])

    if one_loop:
        b.comment("both directions at once: d = 0 forward, d = 1 reverse, each with its own scratch")
        with b.loop(D, "d", role=SPATIAL) as d:
            direction(d, d, acts[0])
    else:
        for d in range(D):
            rev = direction_name == "reverse" or d == 1
            b.comment(f"direction {d} ({'reverse' if rev else 'forward'})")
            direction(const(d), const(int(rev)), acts[d])


class _Quantized:
    """The two products of aotc.DynamicQuantizeLSTM (see the module's doc): X quantized once,
    H per step, into uint8 scratch; the integer Gemms' sums scaled into float by their
    epilogues. The scales and zero points computed at run time live in scratch (an epilogue
    may run in another function, where the kernel's locals are not)."""

    def __init__(self, ctx, node, S, B, I, H, nd, masked, h_from_y):
        self.ctx, self.node, self.S, self.B, self.I, self.H = ctx, node, S, B, I, H
        self.masked, self.h_from_y = masked, h_from_y
        u8, f32, i32 = np.dtype(np.uint8), dtypes.FLOAT32, np.dtype(np.int32)
        self.ins = list(ctx.ins) + [None] * (12 - len(ctx.ins))
        for k, what in ((8, "W_scale"), (10, "R_scale")):
            if self.ins[k] is None or self.ins[k].dtype != f32:
                raise UnsupportedError([f"{QUANTIZED_LSTM} node {node.name!r}: {what} must be float32"])
        for k, what in ((9, "W_zero_point"), (11, "R_zero_point")):
            z = self.ins[k]
            if z is None or z.dtype not in (u8, np.dtype(np.int8)):
                raise UnsupportedError([f"{QUANTIZED_LSTM} node {node.name!r}: {what} must be int8 or uint8"])
            if len(z.shape) == 2:        # per column: ONNX Runtime takes one value, and checks it is
                c = ctx.const(k)
                if c is None:
                    raise UnsupportedError([f"{QUANTIZED_LSTM} node {node.name!r}: per-column {what} computed "
                                            "at run time"])
                if np.any(c != (0 if c.dtype == np.int8 else c.reshape(-1)[0])):
                    raise ModelError(f"{QUANTIZED_LSTM} node {node.name!r}: per-column {what} must be "
                                     + ("zero (int8 weights)" if c.dtype == np.int8 else "one value throughout"))
        GH = 4 * H
        self.XQ = ctx.scratch((S * B, I), u8, "xq")
        self.XP = ctx.scratch((2,), f32, "xp")          # X's scale and zero point
        self.XI = ctx.scratch((nd, S * B, GH), i32, "xi")
        self.HQ = ctx.scratch((nd, B, H), u8, "hq")
        self.HP = ctx.scratch((nd, 2), f32, "hp")       # this step's H scale and zero point
        self.HI = ctx.scratch((nd, B, GH), i32, "hi")
        b = ctx.b
        X, seq = self.ins[0], self.ins[4]
        counts = None
        if masked:
            # ONNX Runtime quantizes the steps up to the longest sequence
            longest = b.local("longest", const(0))
            with b.loop(B, "bi", role=ORDERED) as bi:
                n = cast(seq[bi], dtypes.INT64)
                b.assign(longest, select(n > longest, n, longest))
            counts = lambda i: i < longest * (B * I)  # noqa: E731
        quantize_dynamic_u8(b, S * B * I, lambda i: Load(X, i), lambda i, v: b.store(self.XQ, i, v),
                            lambda scale, zp: (b.store(self.XP, 0, scale), b.store(self.XP, 1, zp)), counts)

    def _weights_zero(self, k, d):
        """The weights' zero point of direction d as an int32 Expr (ONNX Runtime takes each
        direction's first), None where it is a constant 0."""
        z = self.ins[k]
        if z is None:
            return None
        per = self.ctx.const(k)
        if per is not None and not np.any(per):
            return None
        stride = 4 * self.H if len(z.shape) == 2 else 1
        return cast(Load(z, d * stride), np.dtype(np.int32))

    def _scaled(self, g, dest, at, a_scale, k, d):
        """g's epilogue: dest[at(i, j)] = float(sum) x (a_scale x the weights' scale at column j)."""
        ws = self.ins[k]
        per_column = len(ws.shape) == 2
        w_scale = Load(ws, d * (4 * self.H) + g.j if per_column else d)
        ep = Builder()
        ep.names = self.ctx.b.names
        ep.store(dest, at(g.i, g.j), cast(g.value, dtypes.FLOAT32) * (a_scale * w_scale))
        g.epilogue = ep.body

    def input_projection(self, d, dd, w, XG):
        b, S, B, I, GH = self.ctx.b, self.S, self.B, self.I, 4 * self.H
        b.comment("input projection of every time step: XG = (Xq - zp) . (W - zw)^T x scales")
        g = b.gemm(S * B, GH, I, matrix(self.XQ, 0, I, 1), w, GemmDest(self.XI, (dd, 0, 0), (1,), (2,)),
                   a_zero=cast(Load(self.XP, const(1)), np.dtype(np.int32)), b_zero=self._weights_zero(9, d))
        self._scaled(g, XG, lambda i, j: (dd, i, j), Load(self.XP, const(0)), 8, d)

    def recurrent_projection(self, d, dd, s, Hs, r, GR):
        b, B, H = self.ctx.b, self.B, self.H
        counts = None
        if self.masked and self.h_from_y:
            # a row whose previous step did not run reads zeros from Y in ONNX Runtime: no range
            seq = self.ins[4]
            counts = lambda i: s <= cast(seq[i // H], dtypes.INT64)  # noqa: E731
        at = dd * (B * H)           # this direction's rows of H and of its uint8 copy
        quantize_dynamic_u8(b, B * H, lambda i: Load(Hs, at + i), lambda i, v: b.store(self.HQ, at + i, v),
                            lambda scale, zp: (b.store(self.HP, (dd, 0), scale), b.store(self.HP, (dd, 1), zp)),
                            counts)
        g = b.gemm(B, 4 * H, H, matrix(self.HQ, dd * (B * H), H, 1), r, GemmDest(self.HI, (dd, 0, 0), (1,), (2,)),
                   a_zero=cast(self.HP[dd, 1], np.dtype(np.int32)), b_zero=self._weights_zero(11, d))
        self._scaled(g, GR, lambda i, j: (dd, i, j), self.HP[dd, 0], 10, d)


for _op in RECURRENT_OPS + (QUANTIZED_LSTM,):
    register(_op, lower=_lower_rnn, fold=_rnn_fold, accepts_epilogue=False, run_time_dims=True)(_rnn_infer)
