"""Pad: constant, reflect, edge and wrap modes, over any axes."""
from __future__ import annotations


import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir.dims import decide
from ..kernel.ir import SPATIAL, binop, const, maximum, minimum, select, wrap
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
    xst, yst = row_major_strides(X.shape), row_major_strides(out)
    srcs, valid, oo = [], [], []

    def source(i, o, inside=False):
        """The input index along axis i of output index o (and whether it is inside, for
        constant padding); `inside`: o is known to fall inside the input."""
        d = X.shape[i]
        s = o - pb[i]
        if inside:
            return s, None
        if mode == "constant":
            return s, binop("&&", s >= 0, s < d)
        if mode == "edge":
            return maximum(const(0), minimum(const(d - 1), s)), None
        if mode == "reflect":
            if d == 1:
                return const(0), None
            t = b.local(f"t{i}", select(s < 0, -s, s))
            return select(t >= d, (2 * (d - 1)) - t, t), None
        return ((s % d) + d) % d, None                     # wrap

    nest = Nest(b, SPATIAL)
    for i in range(r - 1):
        o = nest.loop(out[i], f"i{i}")
        oo.append(o)
        if pb[i] == 0 and pe[i] == 0:
            srcs.append(o)
            continue
        s, ok = source(i, o)
        if ok is not None:
            valid.append(ok)
        srcs.append(b.local(f"s{i}", s))

    def store(o, s, ok_last) -> None:
        idx = dot(srcs + [s], xst)
        ok = all_of(valid + ([ok_last] if ok_last is not None else []))
        b.store(Y, dot(oo + [o], yst), X[idx] if ok is None else select(ok, X[idx], fill))

    last = r - 1
    if r == 0:
        store(const(0), const(0), None)      # (a scalar: nothing to pad)
    elif pb[last] == 0 and pe[last] == 0:
        o = nest.loop(out[last], f"i{last}")
        store(o, o, None)
    else:
        # the last axis in three runs: the padding before the input, the input's span (a plain
        # copy: a vector loop with no per-element index arithmetic or gather), the padding after
        # (negative pads crop: the span starts at 0, or ends at the output's end)
        lo, hi = max(pb[last], 0), pb[last] + X.shape[last] + min(pe[last], 0)
        for start, end, inside in ((0, lo, False), (lo, hi, True), (hi, out[last], False)):
            if decide(end, ">", start) is False:
                continue
            with b.loop(wrap(end), f"i{last}", role=SPATIAL, start=wrap(start)) as o:
                s, ok = source(last, o, inside)
                store(o, s, ok)
    nest.close()


register("Pad", lower=_lower_pad, run_time_dims=True)(_pad_infer)


