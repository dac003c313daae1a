"""Attention (ONNX opset 23-25): Y = softmax(softcap(Q.Kᵀ * scale) + bias) . V, per head, in one kernel.

Q, K and V come as 4-D (batch, heads, sequence, head size) or 3-D (batch, sequence, heads *
head size) tensors; each is read through its own strides, so neither layout is copied. Grouped
queries (q_num_heads a multiple of kv_num_heads) read key/value head h * kv / q. A past key /
value is joined with the new one in the present outputs (or scratch), which the products read.

Lowering, for every (batch, query head), with a scratch S of (q_len x kv_len) scores private to
the iteration:
  1. S = Q . Kᵀ, a Gemm whose epilogue makes each score: scale, soft cap, then the bias (the
     float mask added; a bool mask, the causal frontier, the sliding window and the padding
     length add 0 or -inf), and stores the 4th output for qk_matmul_output_mode 0-2;
  2. softmax of every row of S in place (mode 3 stores the probabilities);
  3. Y = S . V, a Gemm landing in Y's layout.
The schedule decides the rest: on CPUs the (batch, head) loop runs in parallel with a scores
scratch per thread where the heads divide among the threads (or are many; otherwise the heads
run in turn, each product split among the threads); GPUs run each step for every head at once.

Fully masked rows follow the spec: a row whose bias is -inf everywhere gives zeros (and so
does a row whose scores are all -inf), never NaN.

passes/attention.py rewrites the MatMul -> (scale, mask) -> Softmax -> MatMul chain that
exporters write into this op, with two annotations of aotc's own that keep that chain's exact
meaning: PLAIN_SOFTMAX (the softmax of ONNX's Softmax op: no fully-masked-row rule) and MASK_FILL
(a bool mask selects between the score and this value, as Where does, instead of adding -inf).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.dims import upper
from ..ir.internal import IN_PLACE, MASK_FILL, ONE_ARRAY, PLAIN_SOFTMAX, SOFTMAX_ROWS
from ..kernel.ir import (I64, REDUCTION, SPATIAL, Builder, BufPtr, Expr, GemmDest, Load, Store, binop, call, const, matrix,
                         select, wrap)
from .common import broadcast
from .reduce import softmax_row
from .registry import register
from .tensor import _bstrides, contiguous_strides, strided_copy

F32 = dtypes.FLOAT32
NEG_INF = float("-inf")
# softmax_precision values computed at float32 or better (FLOAT, DOUBLE); float16 / bfloat16
# rounding of the scores is not implemented
_PRECISIONS = {1, 11}
ATTENTION_OPSET = 25      # the newest Attention; 23 and 24 compute the same
_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")


@dataclass(frozen=True)
class Layout:
    """Where element (b, h, s, d) of a Q / K / V / Y tensor is: strides of batch, head,
    sequence position and head-size index."""
    sb: int
    sh: int
    ss: int
    sd: int = 1

    def at(self, b, h, s, d) -> Expr:
        return const(0) + b * self.sb + h * self.sh + s * self.ss + d * self.sd

    @staticmethod
    def of(shape: tuple, heads: int, rank3: bool) -> "Layout":
        if rank3:
            B, S, hidden = shape
            return Layout(S * hidden, hidden // heads, hidden)
        B, H, S, D = shape
        return Layout(H * S * D, S * D, D)


@dataclass(frozen=True)
class Dims:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Skv: int
    P: int          # past sequence length
    D: int
    Dv: int
    rank3: bool

    @property
    def St(self) -> int:
        return self.P + self.Skv


def _input(ins, k):
    return ins[k] if len(ins) > k else None


def _dims(node, ins) -> Dims:
    Q, K, V = ins[0], ins[1], ins[2]
    where = f"Attention node {node.name!r}"
    ranks = {len(Q.shape), len(K.shape), len(V.shape)}
    if len(ranks) != 1 or ranks.pop() not in (3, 4):
        raise ShapeError(f"{where}: Q, K and V must all be 3-D or all 4-D, got shapes "
                         f"{tuple(Q.shape)}, {tuple(K.shape)}, {tuple(V.shape)}")
    rank3 = len(Q.shape) == 3
    qh, kvh = node.attr("q_num_heads", None), node.attr("kv_num_heads", None)
    if rank3:
        if qh is None or kvh is None:
            raise ShapeError(f"{where}: 3-D inputs need the q_num_heads and kv_num_heads attributes")
        Hq, Hkv = int(qh), int(kvh)
        if Hq <= 0 or Hkv <= 0:
            raise ShapeError(f"{where}: q_num_heads {Hq} and kv_num_heads {Hkv} must be positive")
        B, Sq, hq = Q.shape
        Bk, Skv, hk = K.shape
        Bv, Sv, hv = V.shape
        for name, hidden, heads in (("Q", hq, Hq), ("K", hk, Hkv), ("V", hv, Hkv)):
            if hidden % heads:
                raise ShapeError(f"{where}: {name}'s hidden size {hidden} is not a multiple of its {heads} heads")
        D, Dk, Dv = hq // Hq, hk // Hkv, hv // Hkv
        heads_k = heads_v = Hkv
    else:
        B, Hq, Sq, D = Q.shape
        Bk, heads_k, Skv, Dk = K.shape
        Bv, heads_v, Sv, Dv = V.shape
        Hkv = heads_k
        for name, given, actual in (("q_num_heads", qh, Hq), ("kv_num_heads", kvh, Hkv)):
            if given is not None and int(given) != actual:
                raise ShapeError(f"{where}: {name}={int(given)} but the 4-D inputs have {actual} heads")
    if not (B == Bk == Bv):
        raise ShapeError(f"{where}: Q, K and V have batch sizes {B}, {Bk}, {Bv}")
    if heads_k != heads_v or Skv != Sv:
        raise ShapeError(f"{where}: K and V disagree on heads or sequence length: "
                         f"{tuple(K.shape)} vs {tuple(V.shape)}")
    if Dk != D:
        raise ShapeError(f"{where}: Q's head size {D} differs from K's {Dk}")
    if Hq % Hkv:
        raise ShapeError(f"{where}: {Hq} query heads is not a multiple of {Hkv} key/value heads")
    past_k, past_v = _input(ins, 4), _input(ins, 5)
    if (past_k is None) != (past_v is None):
        raise ShapeError(f"{where}: past_key and past_value must be given together")
    P = 0
    if past_k is not None:
        if len(past_k.shape) != 4 or tuple(past_k.shape[:2]) != (B, Hkv) or past_k.shape[3] != D:
            raise ShapeError(f"{where}: past_key shape {tuple(past_k.shape)} is not ({B}, {Hkv}, past, {D})")
        P = past_k.shape[2]
        if tuple(past_v.shape) != (B, Hkv, P, Dv):
            raise ShapeError(f"{where}: past_value shape {tuple(past_v.shape)} is not ({B}, {Hkv}, {P}, {Dv})")
    return Dims(B, Hq, Hkv, Sq, Skv, P, D, Dv, rank3)


def _attention_infer(node, ins):
    where = f"Attention node {node.name!r}"
    Q = ins[0]
    for k, v in enumerate(ins[:6]):
        if v is not None and k != 3 and v.dtype != F32:
            raise UnsupportedError([f"{where}: {_INPUTS[k]} of element type {dtypes.name(v.dtype)} "
                                    "(attention is compiled for float32 tensors)"])
    d = _dims(node, ins)
    mask, nonpad = _input(ins, 3), _input(ins, 6)
    if mask is not None:
        if mask.dtype not in (F32, dtypes.BOOL):
            raise UnsupportedError([f"{where}: attn_mask of element type {dtypes.name(mask.dtype)} "
                                    "(a float32 or bool mask is compiled)"])
        if len(mask.shape) == 0 or len(mask.shape) > 4 or mask.shape[-1] > d.St:
            raise ShapeError(f"{where}: attn_mask shape {tuple(mask.shape)} does not fit scores of "
                             f"({d.B}, {d.Hq}, {d.Sq}, {d.St})")
        broadcast(tuple(mask.shape[:-1]) + (d.St,), (d.B, d.Hq, d.Sq, d.St), node=node)
    if nonpad is not None:
        if nonpad.dtype != dtypes.INT64 or tuple(nonpad.shape) != (d.B,):
            raise ShapeError(f"{where}: nonpad_kv_seqlen must be int64 of shape ({d.B},), got "
                             f"{dtypes.name(nonpad.dtype)} {tuple(nonpad.shape)}")
        if d.P:
            raise ShapeError(f"{where}: nonpad_kv_seqlen cannot be used with past_key / past_value")
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ShapeError(f"{where}: qk_matmul_output_mode {mode} is not 0, 1, 2 or 3")
    for w in ("left_window_size", "right_window_size"):
        if int(node.attr(w, -1)) < -1:
            raise ShapeError(f"{where}: {w} {int(node.attr(w, -1))} must be -1 or nonnegative")
    prec = node.attr("softmax_precision", None)
    if prec is not None and int(prec) not in _PRECISIONS:
        raise UnsupportedError([f"{where}: softmax_precision {int(prec)} (the softmax is computed in float32 "
                                "or better; rounding the scores to float16 / bfloat16 is not implemented)"])
    y = (d.B, d.Sq, d.Hq * d.Dv) if d.rank3 else (d.B, d.Hq, d.Sq, d.Dv)
    return [(Q.dtype, y), (Q.dtype, (d.B, d.Hkv, d.St, d.D)), (Q.dtype, (d.B, d.Hkv, d.St, d.Dv)),
            (Q.dtype, (d.B, d.Hq, d.Sq, d.St))]


def _present(ctx, pos: int, new, past, d: Dims, head: int, hint: str):
    """The key (pos 1) or value (pos 2) the products read, as (buffer, layout): the input
    itself, or, with a past or a present output, the present tensor [B, Hkv, St, head] filled
    here: the past, then the new positions copied from the input's layout."""
    b = ctx.b
    out = ctx.outs[pos] if len(ctx.outs) > pos else None
    if past is None and out is None:
        return new, Layout.of(tuple(new.shape), d.Hkv, d.rank3)
    if out is None:
        out = ctx.scratch((d.B, d.Hkv, d.St, head), F32, hint)
    src = Layout.of(tuple(new.shape), d.Hkv, d.rank3)
    if (pos, pos + 3) in ctx.node.attrs.get(IN_PLACE, ()):
        return _present_in_place(b, out, new, past, src, d, head, bool(ctx.node.attrs.get(ONE_ARRAY)))
    pst = contiguous_strides(out.shape)
    if past is not None:
        strided_copy(b, out, past, past.shape, pst, contiguous_strides(past.shape))
    strided_copy(b, out, new, (d.B, d.Hkv, d.Skv, head), pst, (src.sb, src.sh, src.ss, src.sd),
                 dst_off=d.P * pst[2])
    return out, Layout.of(tuple(out.shape), d.Hkv, False)


def _present_in_place(b: Builder, out, new, past, src: Layout, d: Dims, head: int, one_array: bool):
    """The present filled over the past where the caller passed one array for both (IN_PLACE,
    passes/caches.py): that array is laid out at the present's largest shape, each (batch, head)
    row `cap` positions apart, the past's positions at the start of their rows already, so only
    the new ones are written. Given two arrays, both are dense at the run's sizes (rows P and
    P + S positions apart) and the past is copied first, as without IN_PLACE. `one_array` (a GPU
    target's device arrays, ONE_ARRAY): always one array, nothing tested."""
    cap = upper(d.St)
    b.comment(f"the cache in place where present and past are one array: rows of {cap} positions")
    if one_array:
        rows = const(cap, I64)
    else:
        differ = BufPtr(out).ne(BufPtr(past))
        rows = b.local("rows", select(differ, wrap(d.St), const(cap, I64)))
        with b.if_(differ):
            strided_copy(b, out, past, past.shape, contiguous_strides(out.shape), contiguous_strides(past.shape))
    with b.loops([d.B, d.Hkv, d.Skv, head], ["n", "h", "s", "k"], role=SPATIAL) as (n, h, s, k):
        b.store(out, ((n * d.Hkv + h) * rows + d.P + s) * head + k, Load(new, src.at(n, h, s, k)))
    return out, Layout(d.Hkv * rows * head, rows * head, head)


class _Bias:
    """The bias of score (b, h, i, j): the float mask's value plus 0 or -inf from the bool mask,
    causal frontier, sliding window and padding length, as an expression; None when there is
    none (every bias is 0)."""

    def __init__(self, ctx, d: Dims, fill: Optional[float]):
        node = ctx.node
        self.d = d
        self.mask = ctx.ins[3] if len(ctx.ins) > 3 else None
        self.nonpad = ctx.ins[6] if len(ctx.ins) > 6 else None
        self.causal = bool(int(node.attr("is_causal", 0)))
        self.left = int(node.attr("left_window_size", -1))
        self.right = int(node.attr("right_window_size", -1))
        self.fill = fill        # a bool mask selects the score or this (Where), instead of a -inf bias
        self.limited = self.mask is not None or self.nonpad is not None or self.causal \
            or self.left >= 0 or self.right >= 0

    def offset(self, b: Expr) -> Expr:
        """Keys that precede the query block: the past's length, or (an external cache) the
        batch entry's valid keys minus the queries."""
        if self.nonpad is not None:
            return Load(self.nonpad, b) - self.d.Sq
        return const(self.d.P)

    def _mask_at(self, b, h, i, j) -> Expr:
        m = self.mask
        lm = m.shape[-1]
        idx = (b, h, i, j if lm == self.d.St else binop("min", j, const(lm - 1)))
        off: Expr = const(0)
        for x, st in zip(idx, _bstrides(m.shape, (self.d.B, self.d.Hq, self.d.Sq, lm))):
            if st:
                off = off + x * st
        return Load(m, off)

    def allowed(self, b, h, i, j) -> Optional[Expr]:
        """Whether the bool conditions let query i see key j (None: always)."""
        conds = []
        m = self.mask
        if m is not None and m.shape[-1] < self.d.St:
            conds.append(j < m.shape[-1])
        if m is not None and m.dtype == dtypes.BOOL and self.fill is None:
            conds.append(self._mask_at(b, h, i, j))
        if self.causal or self.left >= 0 or self.right >= 0:
            pos = i + self.offset(b)             # the query's absolute position
            if self.causal:
                conds.append(j <= pos)
            if self.left >= 0:
                conds.append(pos - j <= self.left)
            if self.right >= 0:
                conds.append(j - pos <= self.right)
        if self.nonpad is not None:
            conds.append(j < Load(self.nonpad, b))
        if not conds:
            return None
        out = conds[0]
        for c in conds[1:]:
            out = binop("&&", out, c)
        return out

    def value(self, b, h, i, j) -> Optional[Expr]:
        """The additive bias (None: 0)."""
        m = self.mask
        extra = self._mask_at(b, h, i, j) if m is not None and m.dtype == F32 else None
        ok = self.allowed(b, h, i, j)
        if ok is None:
            return extra
        gate = select(ok, const(0.0, F32), const(NEG_INF, F32))
        return gate if extra is None else extra + gate

    def apply(self, x: Expr, b, h, i, j) -> Expr:
        """The score x with the bias (or, with a fill value, the bool mask's Where) applied."""
        if self.fill is not None and self.mask is not None and self.mask.dtype == dtypes.BOOL:
            x = select(self._mask_at(b, h, i, j), x, const(self.fill, F32))
        v = self.value(b, h, i, j)
        return x if v is None else x + v


def _lower_attention(node, ctx):
    d = _dims(node, [ctx.value(k) for k in range(len(node.inputs))])
    Qb, Kb, Vb = ctx.ins[0], ctx.ins[1], ctx.ins[2]
    Y = ctx.outs[0]
    b_ = ctx.b
    plain = bool(int(node.attr(PLAIN_SOFTMAX, 0)))
    fill = node.attr(MASK_FILL, None)
    scale = node.attr("scale", None)
    scale = float(np.float32(1.0 / np.sqrt(d.D))) if scale is None else float(scale)
    softcap = float(node.attr("softcap", 0.0))
    mode = int(node.attr("qk_matmul_output_mode", 0))
    qk_out = ctx.outs[3] if len(ctx.outs) > 3 and ctx.outs[3] is not None else None
    past_k = ctx.ins[4] if len(ctx.ins) > 4 else None
    past_v = ctx.ins[5] if len(ctx.ins) > 5 else None
    Kt, kl = _present(ctx, 1, Kb, past_k, d, d.D, "present_key")
    Vt, vl = _present(ctx, 2, Vb, past_v, d, d.Dv, "present_value")
    ql = Layout.of(tuple(Qb.shape), d.Hq, d.rank3)
    bias = _Bias(ctx, d, None if fill is None else float(fill))
    guard = bias.limited and not plain       # the fully-masked-row rule needs the bias per row
    St, group = d.St, d.Hq // d.Hkv
    S = ctx.scratch((d.Sq, St), F32, "scores")
    qk_at = (lambda bb, h, i, j: ((bb * d.Hq + h) * d.Sq + i) * St + j) if qk_out is not None else None

    b_.comment(f"attention: {d.B} x {d.Hq} heads of softmax(Q[{d.Sq}, {d.D}] . K[{St}, {d.D}]^T) . "
               f"V[{St}, {d.Dv}]" + (f", {group} query heads per key/value head" if group > 1 else ""))
    with b_.loops((d.B, d.Hq), ["b", "h"], role=SPATIAL, private=[S]) as (bb, h):
        hk = h / group if group > 1 else h
        g1 = b_.gemm(d.Sq, St, d.D, matrix(Qb, ql.at(bb, h, 0, 0), ql.ss, ql.sd),
                     matrix(Kt, kl.at(bb, hk, 0, 0), kl.sd, kl.ss), GemmDest(S, (0, 0), (0,), (1,)))
        ep = Builder()
        ep.names = b_.names
        i, j = g1.i, g1.j
        x = ep.local("x", g1.value * const(scale, F32))
        if mode == 0 and qk_out is not None:
            ep.store(qk_out, qk_at(bb, h, i, j), x)
        if softcap > 0:
            x = ep.local("capped", const(softcap, F32) * call("tanh", x / const(softcap, F32)))
        if mode == 1 and qk_out is not None:
            ep.store(qk_out, qk_at(bb, h, i, j), x)
        score = ep.local("score", bias.apply(x, bb, h, i, j))
        if mode == 2 and qk_out is not None:
            ep.store(qk_out, qk_at(bb, h, i, j), score)
        ep.store(S, i * St + j, score)
        g1.epilogue = ep.body
        with b_.loop(d.Sq, "i", role=SPATIAL) as i:
            def on_prob(bld, j, p):
                if mode == 3 and qk_out is not None:
                    bld.store(qk_out, qk_at(bb, h, i, j), p)
            dead = None
            if guard:
                # a row every key is masked from (its bias -inf everywhere) gives zeros
                live = b_.local("live", const(NEG_INF, F32))
                with b_.loop(St, "j", role=REDUCTION) as j:
                    v = b_.local("bias", bias.value(bb, h, i, j))
                    b_.assign(live, select(v > live, v, live))
                dead = live.eq(const(NEG_INF, F32))
            # (the runtime's row where no probability is stored as the 4th output)
            row = (BufPtr(S, i * St), BufPtr(S, i * St)) \
                if node.attr(SOFTMAX_ROWS, 0) and (mode != 3 or qk_out is None) else None
            softmax_row(b_, lambda k: Load(S, i * St + k), lambda k, v: Store(S, i * St + k, v), St, F32,
                        guarded=not plain, dead=dead, on_prob=on_prob, row=row)
        b_.gemm(d.Sq, d.Dv, St, matrix(S, 0, St, 1), matrix(Vt, vl.at(bb, hk, 0, 0), vl.ss, vl.sd),
                GemmDest(Y, (bb, 0, h * d.Dv), (1,), (2,)) if d.rank3 else GemmDest(Y, (bb, h, 0, 0), (2,), (3,)))


def _attention_fold(node, ins):
    """All of Q, K, V (and whatever else is given) constant: the reference implementation, at an
    opset that has Attention."""
    if any(v is not None and v.const is None for v in ins) or any(k.startswith("_") for k in node.attrs):
        return None
    from .reference import evaluate
    return evaluate(node, [v.const if v is not None else None for v in ins], _attention_infer(node, ins),
                    opset=ATTENTION_OPSET)


register("Attention", lower=_lower_attention, fold=_attention_fold, accepts_epilogue=True,
         run_time_dims=True)(_attention_infer)

__all__ = ["Layout", "Dims"]
