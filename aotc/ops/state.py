"""Operators of autoregressive decoding that carry state from one step to the next: the
cache (or state) comes in as an input and its next value goes out as an output.

TensorScatter (opset 24): `update` written into a copy of `past_cache` along the sequence
axis, from write_indices[batch] (0 without it); 'linear' mode needs the whole window inside
the cache, 'circular' wraps it around. One pass over the output: every element is either the
update's (its position minus the batch's write index, modulo the cache length when circular,
falls inside the update) or the past's; a negative write index, or a linear window past the
cache's end, fails the run with AOTC_ERR_INDEX_OUT_OF_RANGE (ONNX Runtime fails there too).

CausalConvWithState (opset 27): a depthwise 1-D convolution over [past_state, input] along
the length (zeros without past_state), each output position seeing itself and the k - 1
before it, plus the optional bias and SiLU; present_state is the last k - 1 positions of that
concatenation.

LinearAttention (opset 27): the recurrent form of linear attention over [batch, time,
heads * dim] inputs. Per batch and key/value head, the state S [d_k, d_v] (past_state, else
zeros) lives in present_state and goes through the time steps in order: gated rules first
scale S's rows by exp(decay) (per key dim, or one per head); delta rules then replace v by
beta (v - S^T k); every rule adds k v^T; each query head of the group reads
scale q^T S. A column of S at a time: its retrieval, its update and the outputs that read it."""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..ir.dims import RunTimeDim, decide
from ..ir.internal import IN_PLACE, ONE_ARRAY
from ..kernel.ir import I64, ORDERED, REDUCTION, SPATIAL, BufPtr, Load, binop, call, cast, const, select, wrap
from .common import prod
from .registry import register


# ----------------------------------------------------------------------------- TensorScatter
def _scatter_geometry(node, ins):
    """(axis, prefix size, batch, max length, update length, inner size)."""
    past, upd = ins[0], ins[1]
    widx = ins[2] if len(ins) > 2 else None
    name = f"TensorScatter node {node.name!r}"
    rank = len(past.shape)
    axis = int(node.attr("axis", -2))
    axis = axis + rank if axis < 0 else axis
    if rank < 2 or not 1 <= axis < rank:
        raise ShapeError(f"{name}: axis {node.attr('axis', -2)} must name a dim after the batch of a "
                         f"cache of rank {rank}")
    if upd.dtype != past.dtype:
        raise ShapeError(f"{name}: update is {upd.dtype}, the cache {past.dtype}")
    if len(upd.shape) != rank or any(u != p for k, (u, p) in enumerate(zip(upd.shape, past.shape)) if k != axis):
        raise ShapeError(f"{name}: update {tuple(upd.shape)} must match the cache {tuple(past.shape)} "
                         f"in every dim but the sequence axis {axis}")
    fits = decide(upd.shape[axis], "<=", past.shape[axis])
    if fits is False:
        raise ShapeError(f"{name}: the update's {upd.shape[axis]} positions do not fit the cache's "
                         f"{past.shape[axis]}")
    if fits is None:
        raise RunTimeDim(f"{name}: whether the update's {upd.shape[axis]} positions fit the cache's "
                         f"{past.shape[axis]} depends on the run-time sizes")
    if widx is not None:
        if widx.dtype.kind != "i":
            raise ShapeError(f"{name}: write_indices must be integers, not {widx.dtype}")
        if tuple(widx.shape) != (past.shape[0],):
            raise ShapeError(f"{name}: write_indices {tuple(widx.shape)} must be [batch] = ({past.shape[0]},)")
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise UnsupportedError([f"{name} with mode {mode!r} (linear and circular)"])
    return axis, prod(past.shape[1:axis]), past.shape[0], past.shape[axis], upd.shape[axis], \
        prod(past.shape[axis + 1:]), mode


def _lower_scatter(node, ctx):
    P, U, Y = ctx.ins[0], ctx.ins[1], ctx.outs[0]
    W = ctx.ins[2] if len(ctx.ins) > 2 else None
    axis, prefix, batch, cap, seq, inner, mode = _scatter_geometry(node, [P, U] + ([W] if W is not None else []))
    b = ctx.b
    in_place = (0, 0) in node.attrs.get(IN_PLACE, ())
    b.comment(f"TensorScatter ({mode}): {seq} of {cap} positions along axis {axis} written from each "
              "batch's write index" + (" (in place where the cache and the result are one array)"
                                       if in_place else ""))
    if in_place and not node.attrs.get(ONE_ARRAY):
        # the caller's one array for both (passes/caches.py): only the update's positions move
        b.call("aotc_copy_unless_same", BufPtr(Y), BufPtr(P), wrap(prod(P.shape) * P.dtype.itemsize))
    with b.loop(batch, "n", role=SPATIAL) as n:
        w = b.local("w", cast(Load(W, n), I64) if W is not None else const(0, I64))
        bad = w < 0 if mode == "circular" else binop("||", w < 0, w > cap - seq)
        with b.if_(bad):
            b.fail("AOTC_ERR_INDEX_OUT_OF_RANGE",
                   "a write index is negative" if mode == "circular" else
                   f"a write index is outside [0, {cap - seq}] (the update's {seq} positions must fit "
                   f"the cache's {cap})")
        if in_place:
            _write_window(b, U, Y, n, w, prefix, cap, seq, inner, mode)
        else:
            _write_all(b, P, U, Y, n, w, prefix, cap, seq, inner, mode)


def _write_window(b, U, Y, n, w, prefix, cap, seq, inner, mode) -> None:
    """Batch n's update into its positions w, w + 1, ... (modulo cap when circular)."""
    with b.loops([prefix, seq], ["p", "u"], role=SPATIAL) as (p, u):
        s = w + u
        if mode == "circular":
            s = b.local("s", s % cap)
        with b.loop(inner, "k", role=SPATIAL) as k:
            b.store(Y, ((n * prefix + p) * cap + s) * inner + k, Load(U, ((n * prefix + p) * seq + u) * inner + k))


def _write_all(b, P, U, Y, n, w, prefix, cap, seq, inner, mode) -> None:
    """Batch n's whole result: each position the update's where it falls in it, else the past's."""
    with b.loops([prefix, cap], ["p", "s"], role=SPATIAL) as (p, s):
        u = s - w
        if mode == "circular":
            u = b.local("u", u % cap)
            u = b.local("u", select(u < 0, u + cap, u))
        else:
            u = b.local("u", u)
        row = (n * prefix + p) * cap + s
        urow = (n * prefix + p) * seq + u
        mine = binop("&&", u >= 0, u < seq)
        with b.loop(inner, "k", role=SPATIAL) as k:
            b.store(Y, row * inner + k, select(mine, Load(U, urow * inner + k), Load(P, row * inner + k)))


@register("TensorScatter", lower=_lower_scatter, accepts_epilogue=False, run_time_dims=True)
def _scatter_infer(node, ins):
    _scatter_geometry(node, ins)
    return [(ins[0].dtype, tuple(ins[0].shape))]


# ----------------------------------------------------------------------------- CausalConvWithState
def _conv_geometry(node, ins):
    """(batch, channels, length, kernel size, activation)."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    past = ins[3] if len(ins) > 3 else None
    name = f"CausalConvWithState node {node.name!r}"
    if x.dtype.kind != "f":
        raise UnsupportedError([f"{name} on element type {x.dtype} (floating point only)"])
    if len(x.shape) != 3:
        raise ShapeError(f"{name}: input {tuple(x.shape)} must be (batch, channels, length)")
    n, c, length = (int(d) for d in x.shape)
    if len(w.shape) != 3 or w.shape[0] != c or w.shape[1] != 1 or w.shape[2] < 1:
        raise ShapeError(f"{name}: weight {tuple(w.shape)} must be (channels, 1, k) = ({c}, 1, k)")
    k = int(w.shape[2])
    for v, what, want in ((w, "weight", None), (bias, "bias", (c,)), (past, "past_state", (n, c, k - 1))):
        if v is None:
            continue
        if v.dtype != x.dtype:
            raise ShapeError(f"{name}: {what} is {v.dtype}, the input {x.dtype}")
        if want is not None and tuple(v.shape) != want:
            raise ShapeError(f"{name}: {what} {tuple(v.shape)} must be {want}")
    act = node.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise UnsupportedError([f"{name} with activation {act!r} (none, silu, swish)"])
    return n, c, length, k, act


def _lower_conv(node, ctx):
    X, Wt = ctx.ins[0], ctx.ins[1]
    B = ctx.ins[2] if len(ctx.ins) > 2 else None
    S = ctx.ins[3] if len(ctx.ins) > 3 else None
    Y = ctx.outs[0]
    St = ctx.outs[1] if len(ctx.outs) > 1 else None
    n, c, length, k, act = _conv_geometry(node, [X, Wt, B, S])
    zero = const(0, X.dtype)
    b = ctx.b
    b.comment(f"causal depthwise conv: {c} channels, kernel {k}, over the {k - 1} past positions and "
              f"{length} new ones" + (f", then {act}" if act != "none" else ""))

    def padded(row, t):
        """Position t (in [0, k - 1 + length)) of [past, input] along one (batch, channel) row
        (row = batch * channels + channel); both reads stay inside their buffers whichever
        side the select takes."""
        if k == 1:
            return Load(X, row * length + t)
        early = t < k - 1
        inp = Load(X, row * length + select(early, const(0), t - (k - 1)))
        old = Load(S, row * (k - 1) + select(early, t, const(0))) if S is not None else zero
        return select(early, old, inp)

    with b.loops([n, c], ["b", "ch"], role=SPATIAL) as (bi, ch):
        row = b.local("row", bi * c + ch)
        with b.loop(length, "t", role=SPATIAL) as t:
            acc = b.accumulator("acc", Load(B, ch) if B is not None else zero)
            with b.loop(k, "j") as j:
                b.assign(acc, acc + Load(Wt, ch * k + j) * padded(row, t + j))
            b.store(Y, row * length + t, acc * call("sigmoid", acc) if act != "none" else acc)
        if St is not None and k > 1:
            with b.loop(k - 1, "q", role=SPATIAL) as q:
                b.store(St, row * (k - 1) + q, padded(row, q + length))


@register("CausalConvWithState", lower=_lower_conv, accepts_epilogue=False)
def _conv_infer(node, ins):
    n, c, length, k, _ = _conv_geometry(node, ins)
    return [(ins[0].dtype, (n, c, length)), (ins[0].dtype, (n, c, k - 1))]


# ----------------------------------------------------------------------------- LinearAttention
_RULES = ("linear", "gated", "delta", "gated_delta")


def _attn_geometry(node, ins):
    """(batch, steps, q heads, kv heads, d_k, d_v, rule, decay per key dim, beta per head, scale)."""
    q, k, v = ins[0], ins[1], ins[2]
    past = ins[3] if len(ins) > 3 else None
    decay = ins[4] if len(ins) > 4 else None
    beta = ins[5] if len(ins) > 5 else None
    name = f"LinearAttention node {node.name!r}"
    rule = node.attr("update_rule", "gated_delta")
    if rule not in _RULES:
        raise UnsupportedError([f"{name} with update_rule {rule!r} ({', '.join(_RULES)})"])
    hq, hkv = int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0))
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ShapeError(f"{name}: q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    for x, what in ((q, "query"), (k, "key"), (v, "value"), (decay, "decay"), (beta, "beta")):
        if x is None:
            continue
        if x.dtype.kind != "f" or x.dtype != q.dtype:
            raise UnsupportedError([f"{name}: {what} of element type {x.dtype} (one floating-point type)"])
        if len(x.shape) != 3:
            raise ShapeError(f"{name}: {what} {tuple(x.shape)} must be (batch, time, heads * dim)")
    n, t = int(q.shape[0]), int(q.shape[1])
    if q.shape[2] % hq or v.shape[2] % hkv:
        raise ShapeError(f"{name}: query's last dim {q.shape[2]} must divide into {hq} heads and value's "
                         f"{v.shape[2]} into {hkv}")
    dk, dv = int(q.shape[2]) // hq, int(v.shape[2]) // hkv
    for x, what, want in ((k, "key", (n, t, hkv * dk)), (v, "value", (n, t, hkv * dv))):
        if tuple(x.shape) != want:
            raise ShapeError(f"{name}: {what} {tuple(x.shape)} must be {want}")
    if past is not None:
        if past.dtype != q.dtype:
            raise UnsupportedError([f"{name}: past_state of element type {past.dtype} with {q.dtype} inputs"])
        if tuple(past.shape) != (n, hkv, dk, dv):
            raise ShapeError(f"{name}: past_state {tuple(past.shape)} must be {(n, hkv, dk, dv)}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise ShapeError(f"{name}: update_rule {rule!r} " + ("needs" if gated else "takes no") + " decay and "
                         + ("needs" if delta else "takes no") + " beta")
    per_dim = False
    if decay is not None:
        if tuple(decay.shape) not in ((n, t, hkv), (n, t, hkv * dk)):
            raise ShapeError(f"{name}: decay {tuple(decay.shape)} must be {(n, t, hkv)} or {(n, t, hkv * dk)}")
        per_dim = decay.shape[2] == hkv * dk and dk != 1
    beta_heads = 1
    if beta is not None:
        if tuple(beta.shape) not in ((n, t, hkv), (n, t, 1)):
            raise ShapeError(f"{name}: beta {tuple(beta.shape)} must be {(n, t, hkv)} or {(n, t, 1)}")
        beta_heads = int(beta.shape[2])
    scale = float(node.attr("scale", 0.0)) or 1.0 / dk ** 0.5
    return n, t, hq, hkv, dk, dv, rule, per_dim, beta_heads, scale


def _lower_attn(node, ctx):
    Q, K, V = ctx.ins[0], ctx.ins[1], ctx.ins[2]
    past = ctx.ins[3] if len(ctx.ins) > 3 else None
    decay = ctx.ins[4] if len(ctx.ins) > 4 else None
    beta = ctx.ins[5] if len(ctx.ins) > 5 else None
    O, S = ctx.outs[0], ctx.outs[1]
    n, t, hq, hkv, dk, dv, rule, per_dim, beta_heads, scale = _attn_geometry(node, [Q, K, V, past, decay, beta])
    group = hq // hkv
    dt = Q.dtype
    b = ctx.b
    b.comment(f"linear attention ({rule}): {hq} query heads over {hkv} states of {dk} x {dv}, "
              f"{t} step(s) in order")
    with b.loops([n, hkv], ["bi", "h"], role=SPATIAL) as (bi, h):
        base = b.local("base", (bi * hkv + h) * (dk * dv))        # this state in present_state
        with b.loop(dk * dv, "e", role=SPATIAL) as e:
            b.store(S, base + e, Load(past, base + e) if past is not None else const(0, dt))
        with b.loop(t, "s", role=ORDERED) as s:                    # each step updates the state
            row = bi * t + s                                       # (batch, time) row of the inputs
            if decay is not None:
                if per_dim:
                    with b.loop(dk, "i", role=SPATIAL) as i:
                        g = b.local("g", call("exp", Load(decay, (row * hkv + h) * dk + i)))
                        with b.loop(dv, "j", role=SPATIAL) as j:
                            b.store(S, base + i * dv + j, g * Load(S, base + i * dv + j))
                else:
                    g = b.local("g", call("exp", Load(decay, row * hkv + h)))
                    with b.loop(dk * dv, "e", role=SPATIAL) as e:
                        b.store(S, base + e, g * Load(S, base + e))
            kv = (row * hkv + h)
            with b.loop(dv, "j", role=SPATIAL) as j:               # one column of the state
                vj = b.local("vj", Load(V, kv * dv + j))
                if beta is not None:
                    got = b.accumulator("got", const(0, dt))        # (S^T k)[j]
                    with b.loop(dk, "i", role=REDUCTION) as i:
                        b.assign(got, got + Load(S, base + i * dv + j) * Load(K, kv * dk + i))
                    bt = Load(beta, row * beta_heads + (h if beta_heads > 1 else 0))
                    b.assign(vj, bt * (vj - got))
                outs = [b.accumulator(f"o{g}", const(0, dt)) for g in range(group)]
                with b.loop(dk, "i", role=ORDERED) as i:           # (writes S, then reads it)
                    at = base + i * dv + j
                    new = b.local("snew", Load(S, at) + Load(K, kv * dk + i) * vj)
                    b.store(S, at, new)
                    for g, o in enumerate(outs):
                        qh = h * group + g
                        b.assign(o, o + Load(Q, (row * hq + qh) * dk + i) * new)
                for g, o in enumerate(outs):
                    b.store(O, (row * hq + h * group + g) * dv + j, o * const(scale, dt))


@register("LinearAttention", lower=_lower_attn, accepts_epilogue=False)
def _attn_infer(node, ins):
    n, t, hq, hkv, dk, dv, *_ = _attn_geometry(node, ins)
    return [(ins[0].dtype, (n, t, hq * dv)), (ins[0].dtype, (n, hkv, dk, dv))]
