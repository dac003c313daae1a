"""Convolutions over channels-last tensors (N, H, W, C): aotc.ChannelsLastConv, which
passes/layout.py writes for the depthwise convolutions of a mobile network's blocks and the
1x1 convolutions on either side of them.

A depthwise convolution on planes of channels (N, C, H, W) takes its taps along a row of one
plane: rows of 7 to 56 outputs, short vectors with ragged ends, edges on every row. Channels
last, the same output is a vector of consecutive channels at one position, and every tap one
more vector of consecutive channels: full vectors whatever the plane's size, each tap's weights
the same for every position of the row (a compiler keeps them in registers over the row).

Attributes: the Conv's own (kernel_shape, strides, pads, dilations, group, auto_pad), and
`x_last` / `y_last` (1: the input / output is channels-last, (N, H, W, C); 0: as Conv's).
    * group 1 (a 1x1 convolution, stride 1, no padding): weights (M, C, 1, 1) as Conv's; one
      GEMM per batch entry whose B reads a channels-last input by its strides and whose C lands
      in a channels-last output by its strides (ops/conv.py conv_gemms).
    * group = C (depthwise, one weight per channel and tap): input and output channels-last,
      weights (KH, KW, C), taps-major: `depthwise_channels_last`.
"""
from __future__ import annotations

from ..ir.internal import CHANNELS_LAST_CONV
from ..kernel.ir import SPATIAL, const
from .common import shape_error
from .conv import conv_gemms
from .registry import register
from .window import IfElse, all_of, conv_parts, tap_range

# the channels one vector loop of the depthwise kernel walks: a 64-byte line of float32 (one
# vector of the widest CPU target, two of the next); the tail of C past a multiple of it is a
# loop of its own
CHANNEL_BLOCK = 16
# output positions of a row computed together at stride 1, their sums interleaved: one
# position's taps are a chain of dependent multiply-adds (4 cycles each), which positions side
# by side overlap. Measured (1 thread, AMD EPYC Zen 4, PP-LCNet and MobileNetV2 layers): 5 x 5
# taps on 14 x 14 planes of 256 channels 66 -> 55 -> 42 us by 1, 2, 4 positions; 3 x 3 on 56 x
# 56 of 144 161 -> 144 -> 146 us; at stride 2 one at a time was as fast or faster (32 channels
# from 112 x 112: 45 us, 60 by 2)
POSITIONS_TOGETHER = {9: 2, 49: 4}


def positions_together(taps: int, stride: int) -> int:
    """How many output positions `depthwise_channels_last` computes together."""
    if stride != 1 or taps <= 1:
        return 1
    return next((n for most, n in sorted(POSITIONS_TOGETHER.items()) if taps <= most), 4)


def _layouts(node) -> tuple[bool, bool]:
    return bool(node.attr("x_last", 0)), bool(node.attr("y_last", 0))


def nchw_shapes(node, xs, ws) -> tuple[tuple, tuple]:
    """The (input, weight) shapes as Conv would see them: the input's channels moved back
    second, a depthwise weight (KH, KW, C) as (C, 1, KH, KW)."""
    x_last, _ = _layouts(node)
    xs = tuple(xs)
    if x_last:
        xs = (xs[0], xs[-1], *xs[1:-1])
    if int(node.attr("group", 1)) > 1:
        if len(ws) != len(xs) - 1:
            raise shape_error(node, f"depthwise weights {tuple(ws)} must be (kernel..., channels)")
        ws = (ws[-1], 1, *ws[:-1])
    return xs, tuple(ws)


def _infer(node, ins):
    x, w = ins[0], ins[1]
    xs, ws = nchw_shapes(node, x.shape, w.shape)
    _, win = conv_parts(node, xs, ws)
    _, y_last = _layouts(node)
    M = ws[0]
    return [(x.dtype, (xs[0], *win.out, M) if y_last else (xs[0], M, *win.out))]


def _lower(node, ctx):
    X, W = ctx.ins[0], ctx.ins[1]
    Bias = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    x_last, y_last = _layouts(node)
    xs, ws = nchw_shapes(node, X.shape, W.shape)
    group, win = conv_parts(node, xs, ws)
    if group == 1:
        conv_gemms(ctx, X, W, Bias, Y, 1, win, x_last=x_last, y_last=y_last)
        return
    if not (x_last and y_last) or group != xs[1] or len(xs) != 4:
        raise shape_error(node, "a channels-last depthwise convolution is 2-D with input and output channels-last")
    ctx.b.comment(f"depthwise convolution, channels last: {group} channels, {CHANNEL_BLOCK} at a time")
    depthwise_channels_last(ctx, X, W, Bias, Y, win)


def segments(kernel: int, stride: int, dil: int, pad: int, size: int, n_out: int) -> list[tuple[int, int, list[int]]]:
    """The output positions [0, n_out) cut where the set of taps inside the input changes:
    (start, end, the taps k whose input position o*stride - pad + k*dil is inside [0, size)
    for every o in [start, end)), the non-empty ones in order."""
    ranges = [tap_range(k, stride, dil, pad, size, n_out) for k in range(kernel)]
    cuts = sorted({0, n_out, *(x for r in ranges for x in r)})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        if a < b:
            out.append((a, b, [k for k, (lo, hi) in enumerate(ranges) if lo <= a and b <= hi]))
    return out


def depthwise_channels_last(ctx, X, Wt, Bias, Y, win) -> None:
    """Y (N, OH, OW, C) = the depthwise convolution of X (N, H, W, C) by Wt (KH, KW, C) (+ Bias).

    Output rows, then blocks of CHANNEL_BLOCK channels, then the row's positions, then the
    block's channels (the vector loop): each output vector is its bias plus one multiply-add a
    tap, the tap's weights the same vector over the whole row. Rows and columns are cut where
    the taps inside the input change (`segments`), so that each part sums exactly its taps:
    no padded copy, no test inside a loop. Each output row, once done, is final
    (Builder.finished): the elementwise ops fused after it run on it while it is in cache."""
    b = ctx.b
    N, H, Wd, C = X.shape
    _, OH, OW, _ = Y.shape
    (KH, KW), (sh, sw), (dh, dw), (ph, pw) = win.kernel, win.strides, win.dilations, win.pads_begin
    rows = segments(KH, sh, dh, ph, H, OH)
    cols = segments(KW, sw, dw, pw, Wd, OW)
    blocks, tail = divmod(C, CHANNEL_BLOCK)

    def outputs(n, oh, khs, kws, base, offsets: list[int], c0, lanes: int):
        """Outputs (oh, base + offset) for each of `offsets`, channels c0 + [0, lanes): their
        sums interleaved tap by tap, each in its own order (bias, then the taps row by row)."""
        with b.loop(const(lanes), "c", role=SPATIAL) as c:
            ch = c0 + c
            bias = Bias[ch] if Bias is not None else const(0, Y.dtype)
            accs = [b.local("a", bias) for _ in offsets]
            for kh in khs:
                ih = oh * sh + (kh * dh - ph)
                for kw in kws:
                    w = Wt[(kh * KW + kw) * C + ch]
                    for acc, off in zip(accs, offsets):
                        iw = base * sw + (off * sw + kw * dw - pw)
                        b.assign(acc, acc + w * X[((n * H + ih) * Wd + iw) * C + ch])
            for acc, off in zip(accs, offsets):
                b.store(Y, ((n * OH + oh) * OW + (base + off)) * C + ch, acc)

    def positions(n, oh, khs, c0, lanes: int):
        """Every position of output row oh for the channels c0 + [0, lanes), a few at a time
        (positions_together; the rest one by one)."""
        for start, end, kws in cols:
            together = positions_together(len(khs) * len(kws), sw)
            runs, rest = divmod(end - start, together)
            if runs:
                with b.loop(const(runs), "ow", role=SPATIAL) as r:
                    outputs(n, oh, khs, kws, r * together, [start + u for u in range(together)], c0, lanes)
            for u in range(rest):
                outputs(n, oh, khs, kws, const(0), [start + runs * together + u], c0, lanes)

    def row(n, oh, khs):
        if blocks:
            with b.loop(blocks, "cb", role=SPATIAL) as cb:
                positions(n, oh, khs, cb * CHANNEL_BLOCK, CHANNEL_BLOCK)
        if tail:
            positions(n, oh, khs, const(blocks * CHANNEL_BLOCK), tail)

    def row_parts(n, oh, parts):
        """Output row oh, in whichever of `parts` (row segments) it is: the middle one (the
        most rows) tested first."""
        (start, end, khs), rest = parts[0], parts[1:]
        if not rest:
            row(n, oh, khs)
            return
        inside = ([oh >= start] if start > 0 else []) + ([oh < end] if end < OH else [])
        with IfElse(b, all_of(inside)) as (then, orelse):
            with then:
                row(n, oh, khs)
            with orelse:
                row_parts(n, oh, rest)

    # one loop over the rows (the threads split it: 7 rows take 4 and 3, where a loop per row
    # segment would split the 5 middle rows 3 and 2 and the edge rows' channels apart)
    with b.loop(N, "n", role=SPATIAL) as n:
        with b.loop(OH, "oh", role=SPATIAL) as oh:
            row_parts(n, oh, sorted(rows, key=lambda r: r[0] - r[1]))
            b.finished(Y, (n, oh), OW * C)


register(CHANNELS_LAST_CONV, lower=_lower, how="channels-last 1x1 GEMMs and depthwise loop nests "
         "(passes/layout.py)")(_infer)
