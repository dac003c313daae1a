"""Pad: constant, reflect, edge and wrap modes, over any axes."""
from __future__ import annotations


import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..kernel.ir import SPATIAL, binop, const, maximum, minimum, select
from .common import ints, shape_error
from .registry import register
from .window import Nest, all_of, dot, row_major_strides


def _pad_spec(node, ins):
    x = ins[0]
    r = len(x.shape)
    if len(ins) < 2 or ins[1] is None:
        raise shape_error(node, "pads input is required")
    if ins[1].const is None:
        raise ShapeError(f"Pad node {node.name!r}: pads must be known at compile time",
                         "bind the input that feeds it with --const")
    pads = ints(ins[1].const)
    axes = list(range(r))
    if len(ins) > 3 and ins[3] is not None:
        if ins[3].const is None:
            raise ShapeError(f"Pad node {node.name!r}: axes must be known at compile time")
        axes = [a + r if a < 0 else a for a in ints(ins[3].const)]
    if len(pads) != 2 * len(axes):
        raise shape_error(node, f"{len(pads)} pads for {len(axes)} axes")
    pb, pe = [0] * r, [0] * r
    for k, a in enumerate(axes):
        pb[a], pe[a] = pads[k], pads[k + len(axes)]
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise UnsupportedError([f"Pad node {node.name!r} with mode {mode!r}"])
    out = [d + b_ + e for d, b_, e in zip(x.shape, pb, pe)]
    if any(o < 0 for o in out):
        raise shape_error(node, f"pads {pads} remove more than the input {x.shape}")
    if mode != "constant" and any(d == 0 for d in x.shape):
        raise shape_error(node, f"mode {mode} needs a non-empty input")
    if mode == "reflect" and any((b_ > d - 1 or e > d - 1) and (b_ > 0 or e > 0)
                                  for d, b_, e in zip(x.shape, pb, pe)):
        raise UnsupportedError([f"Pad node {node.name!r}: reflect padding wider than the input"])
    return pb, pe, out, mode


def _pad_infer(node, ins):
    _, _, out, _ = _pad_spec(node, [ins[0]] + list(ins[1:]))
    return [(ins[0].dtype, tuple(out))]


def _lower_pad(node, ctx):
    X, Y = ctx.ins[0], ctx.outs[0]
    ins = [ctx.value(i) for i in range(len(node.inputs))]
    pb, pe, out, mode = _pad_spec(node, ins)
    b = ctx.b
    r = len(X.shape)
    if mode == "constant":
        cv = ctx.const(2) if ctx.has_input(2) else None
        if cv is not None:
            fill = const(np.asarray(cv).reshape(-1)[0].item() if np.asarray(cv).size else 0, X.dtype)
        elif ctx.has_input(2):
            fill = ctx.ins[2][const(0)]        # read where it is used: no padding, no read
        else:
            fill = const(0, X.dtype)
    xst = row_major_strides(X.shape)
    srcs, valid, oo = [], [], []
    nest = Nest(b, SPATIAL)
    for i in range(r):
        o = nest.loop(out[i], f"i{i}")
        oo.append(o)
        d = X.shape[i]
        if pb[i] == 0 and pe[i] == 0:
            srcs.append(o)
            continue
        s = o - pb[i]
        if mode == "constant":
            valid.append(binop("&&", s >= 0, s < d))
        elif mode == "edge":
            s = maximum(const(0), minimum(const(d - 1), s))
        elif mode == "reflect":
            if d > 1:
                t = b.local(f"t{i}", select(s < 0, -s, s))
                s = select(t >= d, (2 * (d - 1)) - t, t)
            else:
                s = const(0)
        elif mode == "wrap":
            s = ((s % d) + d) % d
        srcs.append(b.local(f"s{i}", s) if i < r - 1 else s)
    idx = dot(srcs, xst)
    ok = all_of(valid)
    at = dot(oo, row_major_strides(out))
    b.store(Y, at, X[idx] if ok is None else select(ok, X[idx], fill))
    nest.close()


register("Pad", lower=_lower_pad, run_time_dims=True)(_pad_infer)


