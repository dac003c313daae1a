"""RotaryEmbedding (opset 23): rotary position embedding of queries or keys.

The input is [batch, heads, seq, head] or [batch, seq, heads * head] (num_heads says how many
heads). In each head the first rotary_embedding_dim values (all of them by default) turn in
pairs by the angle of their position: (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), where
the pairs are the two halves of those values, or neighbours when interleaved; the rest are
copied. cos / sin come from caches [max_position, rot / 2] read at position_ids[batch, seq]
(a run-time input: a position outside [-max_position, max_position) fails the run, a negative
one counts from the end), or without position_ids from caches [batch, seq, rot / 2]."""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..kernel.ir import SPATIAL, Load, const
from .registry import register
from .tensor import _index


def _geometry(node, ins):
    """(batch, heads, seq, head, rot, layout) of the node, checked against its caches."""
    x, cos, sin = ins[0], ins[1], ins[2]
    pos = ins[3] if len(ins) > 3 else None
    name = f"RotaryEmbedding node {node.name!r}"
    if x.dtype.kind != "f":
        raise UnsupportedError([f"{name}: element type {x.dtype} (floating point only)"])
    heads_attr = int(node.attr("num_heads", 0))
    if len(x.shape) == 4:
        batch, heads, seq, head = x.shape
        if heads_attr and heads_attr != heads:
            raise ShapeError(f"{name}: num_heads {heads_attr} but the input {tuple(x.shape)} has {heads} heads")
    elif len(x.shape) == 3:
        batch, seq, hidden = x.shape
        if heads_attr <= 0 or hidden % heads_attr:
            raise ShapeError(f"{name}: a 3-D input {tuple(x.shape)} needs num_heads dividing its last dim "
                             f"(num_heads = {heads_attr})")
        heads, head = heads_attr, hidden // heads_attr
    else:
        raise ShapeError(f"{name}: input {tuple(x.shape)} must be 3-D or 4-D")
    rot = int(node.attr("rotary_embedding_dim", 0)) or head
    if rot % 2 or rot > head:
        raise ShapeError(f"{name}: rotary_embedding_dim {rot} must be even and at most the head size {head}")
    want = (cos.shape[0], rot // 2) if pos is not None else (batch, seq, rot // 2)
    for cache, what in ((cos, "cos_cache"), (sin, "sin_cache")):
        if tuple(cache.shape) != tuple(want) or len(cache.shape) != (2 if pos is not None else 3):
            raise ShapeError(f"{name}: {what} {tuple(cache.shape)} must be "
                             + ("[max_position, rot / 2]" if pos is not None else "[batch, seq, rot / 2]")
                             + f" = {want}")
    if pos is not None and tuple(pos.shape) != (batch, seq):
        raise ShapeError(f"{name}: position_ids {tuple(pos.shape)} must be [batch, seq] = {(batch, seq)}")
    return batch, heads, seq, head, rot, len(x.shape)


def _lower(node, ctx):
    X, COS, SIN, Y = ctx.ins[0], ctx.ins[1], ctx.ins[2], ctx.outs[0]
    POS = ctx.ins[3] if len(ctx.ins) > 3 else None
    batch, heads, seq, head, rot, rank = _geometry(node, [X, COS, SIN] + ([POS] if POS is not None else []))
    half = rot // 2
    interleaved = bool(int(node.attr("interleaved", 0)))
    b = ctx.b
    b.comment(f"rotary embedding: {heads} heads of {head}, the first {rot} turned in "
              + ("neighbouring pairs" if interleaved else "pairs of halves"))
    with b.loops([batch, seq], ["n", "s"], role=SPATIAL) as (n, s):
        if POS is not None:
            row = _index(b, Load(POS, n * seq + s), COS.shape[0], "pos") * half
        else:
            row = (n * seq + s) * half
        with b.loop(heads, "h", role=SPATIAL) as h:
            base = b.local("base", ((n * heads + h) * seq + s) * head if rank == 4 else ((n * seq + s) * heads + h) * head)
            with b.loop(half, "j", role=SPATIAL) as j:
                c = b.local("c", Load(COS, row + j))
                si = b.local("si", Load(SIN, row + j))
                i1, i2 = (base + j * 2, base + j * 2 + 1) if interleaved else (base + j, base + j + half)
                x1 = b.local("x1", Load(X, i1))
                x2 = b.local("x2", Load(X, i2))
                b.store(Y, i1, c * x1 - si * x2)
                b.store(Y, i2, si * x1 + c * x2)
            if rot < head:
                with b.loop(head - rot, "k", role=SPATIAL) as k:
                    b.store(Y, base + const(rot) + k, Load(X, base + const(rot) + k))


@register("RotaryEmbedding", lower=_lower, run_time_dims=True)
def _rotary(node, ins):
    _geometry(node, ins)
    return [(ins[0].dtype, tuple(ins[0].shape))]
