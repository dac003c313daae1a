"""Convolutions as loop nests: depthwise ones, and any of another dtype than float32.

  * depthwise (one input channel per group) on a small plane: the plane copied into a
    zero-padded scratch (split by row and column phase when strided, so that every tap reads
    contiguous elements), then every output as one flat stencil over it (full vectors, no
    edge cases), or with many taps at stride 1 by groups of output rows that share their
    loads (`_stencil_rows`), its valid columns copied out.
  * depthwise over planes of run-time size (above that plane size): the next item's one-pass nest,
    its bounds min / max of the run's sizes, each edge output one sum of the taps inside the
    input (`_depthwise_guarded`).
  * other depthwise ones: a direct loop nest, one output row at a time,
    the innermost loop over output columns with start/end computed so that no index is
    ever out of range (no padded copy, no branch in the inner loop); the columns every tap of
    a kernel row reaches take all those taps in one pass, the edge columns tap by tap. In
    2-D, with a small kernel, the rows every kernel row reaches are one pass summing all taps
    from the bias (each output element written once).
Each output plane, once computed, is said to be final (Builder.finished), so that the
elementwise ops fused after the convolution (ReLU6, a residual add) run on it while it is in
cache instead of in a pass of their own over the whole output.
"""
from __future__ import annotations

from contextlib import nullcontext

from ..ir.dims import RANGE_POINTS, RunTimeDim, decide, is_dim, is_static, lower, range_points, upper
from ..kernel.ir import REDUCTION, SPATIAL, Const, Expr, as_dim, binop, const, maximum, minimum, select, wrap
from .common import prod
from .window import (UNROLL_TAPS, IfElse, Window, all_of, dot, each_tap, inside_input, pick_all, plus,
                     row_major_strides, span_loop, tap_range)


DEPTHWISE_ONE_PASS_TAPS = 49


def conv_direct(ctx, X, W, Bias, Y, win: Window, group: int):
    """Loop nest: for each output row, accumulate every (input channel, tap) into it; a
    depthwise 2-D convolution on a small plane goes through a zero-padded copy of it
    (`_depthwise_padded`), on a larger one computes the rows every kernel row reaches in one
    pass (`_depthwise_one_pass`)."""
    b = ctx.b
    M, O = W.shape[0], list(Y.shape[2:])
    planes, when = _padded_planes(ctx, X, win, group)

    def rows(n, m):
        if not _depthwise_one_pass(ctx, X, W, Bias, Y, win, group, n, m):
            with b.loops(O[:-1], [f"o{i}" for i in range(len(O) - 1)], role=SPATIAL) as oo:
                _direct_row(ctx, X, W, Bias, Y, win, group, n, m, oo)

    with b.loops([X.shape[0], M], ["n", "m"], role=SPATIAL, private=planes or ()) as (n, m):
        if planes and when is not None:
            # run-time planes: the padded copy for the sizes it pays at, row by row above them
            with IfElse(b, when) as (then, orelse):
                with then:
                    _depthwise_padded(ctx, X, W, Bias, Y, win, group, n, m, *planes)
                with orelse:
                    rows(n, m)
        elif planes:
            _depthwise_padded(ctx, X, W, Bias, Y, win, group, n, m, *planes)
        else:
            rows(n, m)
        # (the elementwise ops fused after the convolution run on the plane while it is in cache)
        b.finished(Y, (n, m), prod(O))


# a depthwise 2-D convolution whose zero-padded input plane and wide output take at most this
# many elements together goes through them (`_depthwise_padded`). Measured (1 thread, the
# native CPU target), at stride 1: 14 x 14 planes with 5 x 5 kernels 2.2x faster, 28 x 28
# with 3 x 3 1.15x; 56 x 56 with 3 x 3 (6,614 elements; a 4% edge) 1.27x slower, as the copy
# costs more than the edges it saves
PADDED_PLANE_MAX = 2048
# ... and at stride 2 or more, where the other paths load every tap with a stride and the
# phase planes load each input element so once, in the copy: that pays for itself from
# STRIDED_MIN_TAPS taps on. Measured (1 thread, native CPU target, one Conv + Relu):
# 5 x 5 at stride 2 1.5-2.1x faster on 14 x 14 to 112 x 112 planes, 7 x 7 1.9-2.5x; 3 x 3
# 0.62-0.89x (the one-pass nest's three strided loads a row cost less than the copy)
STRIDED_PLANE_MAX = 1 << 16
STRIDED_MIN_TAPS = 16


# The stencil of `_depthwise_padded` at stride 1 with ROW_MIN_TAPS taps or more, by output rows:
# each row's outputs over whole 64-byte lines (ROW_LINE_BYTES), at most ROW_WASTE more than the
# flat stencil's outputs, and groups of up to ROW_GROUP rows computed together, so that each
# input row's shifted loads serve every row of the group that reads it (5 rows a load at 5 x 5)
# instead of being loaded once per tap. Measured (1 thread, native CPU target, Intel Xeon, one
# Conv + HardSwish): 5 x 5 on 14 x 14 planes 57 -> 39 us for 256 channels (41 with groups of 7
# rows), on 28 x 28 87 -> 70 us for 120; 7 x 7 on 14 x 14 145 -> 61 us for 256. Not at 3 x 3
# (14 x 14 37 -> 39 us: the compiler folds each load into the multiply-adds that read it, as
# many loads as the flat stencil's) nor strided (5 x 5 at stride 2: 0.95-1.02x)
ROW_MIN_TAPS = 16
ROW_LINE_BYTES = 64
ROW_WASTE = 1.25
ROW_GROUP = 14


def _plane_geometry(X, win: Window):
    """(Hp, Wp, Hq, Wq, tail, pitch) of `_depthwise_padded`: the zero-padded plane, one phase
    plane of it, the elements the last taps read past the last phase plane, and the wide output
    rows' pitch when the stencil goes by rows (`ROW_GROUP`; None: one flat stencil, pitch Wq)."""
    (H, Wd), (sh, sw), (_, KW), (_, dw) = list(X.shape[2:]), win.strides, win.kernel, win.dilations
    Hp, Wp = H + win.pads_begin[0] + win.pads_end[0], Wd + win.pads_begin[1] + win.pads_end[1]
    Hq, Wq, tail = -(-Hp // sh), -(-Wp // sw), (KW - 1) * dw // sw
    OW, line = win.out[-1], max(1, ROW_LINE_BYTES // X.dtype.itemsize)
    pitch = None
    if is_static([Hp, Wp, OW]) and sh == sw == 1 and prod(win.kernel) >= ROW_MIN_TAPS:
        pitch = -(-OW // line) * line
        if pitch > ROW_WASTE * Wq:
            pitch = None
        else:
            tail += max(0, pitch - Wq)  # (a row's last lanes read past its phase row)
    return Hp, Wp, Hq, Wq, tail, pitch


def _padded_planes(ctx, X, win: Window, group: int):
    """((padded input planes, wide output plane) scratch for `_depthwise_padded`, or None where
    that does not apply: not a 2-D depthwise convolution with at most DEPTHWISE_ONE_PASS_TAPS
    taps, at stride 1 without padding (nothing to gain), strided with fewer than
    STRIDED_MIN_TAPS taps, or planes over PADDED_PLANE_MAX (STRIDED_PLANE_MAX when strided)
    elements; and the run-time condition for it, None where it applies at every size). Planes of
    run-time size take it where their smallest size is within the limit, the scratch planned for
    the largest, under the condition that the run's size is within it."""
    S = list(X.shape[2:])
    strided = any(s != 1 for s in win.strides)
    if len(S) != 2 or X.shape[1] // group != 1 or prod(win.kernel) > DEPTHWISE_ONE_PASS_TAPS \
            or not (strided or any(win.pads_begin + win.pads_end)):
        return None, None
    Hp, Wp, Hq, Wq, tail, pitch = _plane_geometry(X, win)
    padded, wide = prod(win.strides) * Hq * Wq + tail, win.out[0] * (pitch or Wq)
    limit = STRIDED_PLANE_MAX if strided else PADDED_PLANE_MAX
    if lower(padded + wide) > limit or (strided and prod(win.kernel) < STRIDED_MIN_TAPS):
        return None, None
    when = None if upper(padded + wide) <= limit else binop("<=", wrap(padded + wide), const(limit))
    return (ctx.scratch((padded,), X.dtype, "padded"), ctx.scratch((wide,), X.dtype, "wide")), when


def _depthwise_padded(ctx, X, W, Bias, Y, win: Window, group: int, n, m, padded, wide) -> None:
    """Plane (n, m) of a depthwise 2-D convolution through a zero-padded copy of its input, in
    which every tap is one shift.

    At stride 1 the copy is the plane Hp x Wp, and output (oh, ow) is the sum over taps of
    padded[(oh + kh*dh) * Wp + ow + kw*dw]: as a function of j = oh * Wp + ow, a 1-D stencil
    padded[j + kh*dh*Wp + kw*dw], computed over every j < OH * Wp in one flat loop (full
    vectors, no edge cases: the j with ow >= OW are wasted, and read at most (KW-1)*dw zeros
    past the plane), then the OW valid columns of each row copied out.

    At stride (sh, sw) the copy is split by row and column phase: phase plane (a, c), of
    Hq x Wq = ceil(Hp/sh) x ceil(Wp/sw), holds padded rows a, a + sh, ... and columns c, c + sw,
    ...; tap (kh, kw) of output (oh, ow) reads padded row oh*sh + kh*dh, which is row
    oh + (kh*dh) // sh of phase (kh*dh) % sh (columns alike), so with j = oh * Wq + ow the
    stencil is again 1-D over contiguous elements: phase[(kh*dh) % sh][(kw*dw) % sw]
    [j + ((kh*dh) // sh) * Wq + (kw*dw) // sw]. The input is read with a stride once, in the
    copy, instead of once per tap. Stride 1 is the one-phase case."""
    b = ctx.b
    C, (H, Wd), (OH, OW) = X.shape[1], list(X.shape[2:]), list(Y.shape[2:])
    (KH, KW), (dh, dw), (ph, pw), (sh, sw) = win.kernel, win.dilations, win.pads_begin, win.strides
    Hp, Wp, Hq, Wq, _, pitch = _plane_geometry(X, win)
    M = W.shape[0]
    x_plane = (n * C + m / (M // group)) * (H * Wd)
    zero = const(0, X.dtype)
    unit = sh == sw == 1

    def sized(*extents) -> bool:
        # a copy's iterations may run twice (Loop.rerun): said where the count is the run's,
        # which a schedule may walk in whole vectors (the compiler sees a constant count whole)
        return not is_static(extents)

    if unit:
        # the padding only: rows above and below the input (and the tail the last taps read);
        # the columns right of each row (and left of the next) are zeroed as the row is copied
        for start, end in ((0, ph * Wp + pw), ((ph + H) * Wp - win.pads_end[1], padded.size)):
            if decide(end, ">", start) is not False:      # (run-time planes: unless known empty)
                with b.loop(wrap(end), "e", role=SPATIAL, start=wrap(start), rerun=sized(start, end)) as e:
                    b.store(padded, e, zero)
    else:
        with b.loop(wrap(padded.size), "e", role=SPATIAL, rerun=sized(padded.size)) as e:
            b.store(padded, e, zero)
    def plane(a: int, c: int) -> int:
        return (a * sw + c) * (Hq * Wq)

    # input row r is padded row r + ph: row (r + ph) // sh of the phase planes (r + ph) % sh;
    # phase plane (a, c) holds the input rows r0, r0 + sh, ... from its row i0 on, and the
    # input columns q0, q0 + sw, ... from its column t0 on
    for a in range(sh):
        i0 = -(-(ph - a) // sh)
        r0, rows = i0 * sh + a - ph, -(-(H + ph - a) // sh) - i0
        for c in range(sw):
            t0 = -(-(pw - c) // sw)
            q0, cols = t0 * sw + c - pw, -(-(Wd + pw - c) // sw) - t0
            if decide(rows, "<=", 0) is True or decide(cols, "<=", 0) is True:
                continue         # (where the run's sizes decide, an empty phase's loops run no iteration)
            base = plane(a, c) + i0 * Wq + t0
            with b.loop(wrap(rows), "r", role=SPATIAL) as r:
                with b.loop(wrap(cols), "p", role=SPATIAL, rerun=sized(cols)) as q:
                    b.store(padded, base + r * Wq + q, X[x_plane + (r * sh + r0) * Wd + q * sw + q0])
                if unit and (pw or win.pads_end[1]):
                    with b.loop(const(pw + win.pads_end[1]), "e", role=SPATIAL) as e:
                        b.store(padded, base + r * Wq + Wd + e, zero)
    ws = [[b.local("w", W[m * (KH * KW) + k0 * KW + k1]) for k1 in range(KW)] for k0 in range(KH)]
    # tap (k0, k1): its phase plane's offset, and its row and column shift in that plane
    taps = {}
    for k0 in range(KH):
        for k1 in range(KW):
            (qh, ah), (qw, aw) = divmod(k0 * dh, sh), divmod(k1 * dw, sw)
            taps[k0, k1] = plane(ah, aw), qh, qw
    bias = Bias[m] if Bias is not None else zero
    if pitch is None:
        # (an iteration writes only its own element, from values the loop does not write: a
        # schedule may run one twice, so that OH * Wq outputs take whole vectors: Loop.rerun)
        with b.loop(wrap(OH * Wq), "j", role=SPATIAL, rerun=True) as j:
            acc: Expr = bias
            for k0 in range(KH):
                for k1 in range(KW):
                    at, qh, qw = taps[k0, k1]
                    acc = acc + ws[k0][k1] * padded[j + (at + qh * Wq + qw)]
            b.store(wide, j, acc)
    else:
        _stencil_rows(b, padded, wide, ws, taps, bias, OH, Wq, pitch)
    y_plane = (n * M + m) * (OH * OW)
    with b.loop(OH, "o0", role=SPATIAL) as o:
        with b.loop(OW, "p", role=SPATIAL, rerun=sized(OW)) as q:
            b.store(Y, y_plane + o * OW + q, wide[o * (pitch or Wq) + q])


def _stencil_rows(b, padded, wide, ws, taps, bias, OH: int, Wq: int, pitch: int) -> None:
    """The stencil of `_depthwise_padded` by groups of up to ROW_GROUP output rows (the last
    group moved back to end at OH: its rows computed twice, alike), each over `pitch` columns
    (whole lines; the columns past OW are wasted): output row o of the group reads phase row
    o + qh of its taps' planes, so the group goes through its phase rows in order, loading each
    shifted row once and adding it to every output row that reads it. Each output adds its taps
    in the flat stencil's order (k0, then k1), so both give the same sums."""
    groups = -(-OH // ROW_GROUP)
    G = -(-OH // groups)
    order = sorted(taps)                               # (k0, k1): the flat stencil's order
    with (b.loop(groups, "og", role=SPATIAL) if groups > 1 else nullcontext()) as og:
        o0 = b.local("o0", minimum(og * G, const(OH - G))) if groups > 1 else const(0)
        with b.loop(pitch, "t", role=SPATIAL) as t:
            accs = [b.local("a", bias) for _ in range(G)]
            for r in range(G + max(qh for _, qh, _ in taps.values())):
                loaded = {}
                for g in range(G):
                    for k in order:
                        at, qh, qw = taps[k]
                        if g + qh != r:
                            continue
                        if (at, qw) not in loaded:
                            loaded[at, qw] = b.local("s", padded[(o0 + r) * Wq + t + (at + qw)])
                        b.assign(accs[g], accs[g] + ws[k[0]][k[1]] * loaded[at, qw])
            for g in range(G):
                b.store(wide, (o0 + g) * pitch + t, accs[g])


def _direct_row(ctx, X, W, Bias, Y, win: Window, group: int, n, m, oo):
    """Output row (n, m, oo...): the bias, then every (input channel, outer taps) added to it,
    the row test hoisted above the last dim."""
    b = ctx.b
    C, S = X.shape[1], list(X.shape[2:])
    M, O = W.shape[0], list(Y.shape[2:])
    Cg, Mg = C // group, M // group
    r = len(S)
    SL, OL, OLast = prod(S), prod(O), O[-1]
    xst, ost, kst = row_major_strides(S), row_major_strides(O), row_major_strides(win.kernel)
    s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]
    cin0 = (m / Mg) * Cg if group > 1 else const(0)
    dst = (n * M + m) * OL + dot(oo, ost[:-1])
    with b.loop(OLast, "p", role=SPATIAL) as p:
        b.store(Y, dst + p, Bias[m] if Bias is not None else const(0, Y.dtype))
    with b.loops([Cg, *win.kernel[:-1]], ["c"] + [f"k{i}" for i in range(r - 1)], role=REDUCTION) as idx:
        c, ko = idx[0], idx[1:]
        pos = [o * win.strides[i] - win.pads_begin[i] + ko[i] * win.dilations[i] for i, o in enumerate(oo)]
        inside = inside_input(pos, S, win)
        src_row = (n * C + cin0 + c) * SL + dot(pos, xst[:-1])

        def weight(k_l):
            return b.local("w", W[(m * Cg + c) * prod(win.kernel) + dot(list(ko) + [k_l], kst)])

        def tap(k_l, lo, hi, w=None):
            lp = span_loop(b, lo, hi)
            if lp is None:
                return
            w = w if w is not None else weight(k_l)
            with lp as q:
                b.store(Y, dst + q, Y[dst + q] + w * X[plus(src_row, k_l * d_l - pb_l) + q * s_l])

        def taps():
            if win.kernel[-1] > UNROLL_TAPS or not is_static([S[-1], OLast]):     # (run-time sizes: tap by tap)
                each_tap(b, win, S[-1], OLast, tap)
                return
            # the positions every tap reaches take them all in one pass over the row
            # (in tap order, as the per-tap passes add them); the edges tap by tap
            ranges = [tap_range(k, s_l, d_l, pb_l, S[-1], OLast) for k in range(win.kernel[-1])]
            lo_all, hi_all = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
            if hi_all - lo_all < 2 or len(ranges) == 1:
                each_tap(b, win, S[-1], OLast, tap)
                return
            ws = [weight(const(k)) for k in range(len(ranges))]
            with b.loop(const(hi_all), "p", role=SPATIAL, start=const(lo_all)) as q:
                acc: Expr = Y[dst + q]
                for k, w in enumerate(ws):
                    acc = acc + w * X[plus(src_row, const(k * d_l - pb_l)) + q * s_l]
                b.store(Y, dst + q, acc)
            for k, (lo, hi) in enumerate(ranges):
                tap(const(k), const(lo), const(min(hi, lo_all)), ws[k])
                tap(const(k), const(max(lo, hi_all)), const(hi), ws[k])

        if inside is None:
            taps()
        else:
            with b.if_(inside):
                taps()


def _depthwise_one_pass(ctx, X, W, Bias, Y, win: Window, group: int, n, m) -> bool:
    """Plane (n, m) of a 2-D convolution with one input channel per group and a small kernel:
    the output rows every kernel row reaches, and in them the columns every tap reaches, are
    each one sum of all taps from the bias, written once (the per-row way reads and writes an
    output row once per kernel row); the other rows as _direct_row, the other columns tap by
    tap. False (nothing emitted) for any other convolution."""
    C, S, O = X.shape[1], list(X.shape[2:]), list(Y.shape[2:])
    if len(S) != 2 or C // group != 1 or prod(win.kernel) > DEPTHWISE_ONE_PASS_TAPS \
            or max(win.kernel) > UNROLL_TAPS:
        return False
    if not is_static(S + O):
        _depthwise_guarded(ctx, X, W, Bias, Y, win, group, n, m)
        return True
    (H, Wd), (OH, OW), (KH, KW) = S, O, win.kernel
    (sh, sw), (dh, dw), (ph, pw) = win.strides, win.dilations, win.pads_begin
    rows = [tap_range(k, sh, dh, ph, H, OH) for k in range(KH)]
    cols = [tap_range(k, sw, dw, pw, Wd, OW) for k in range(KW)]
    if not all(isinstance(x, int) or is_dim(x) for r in rows + cols for x in r):
        return False         # run-time planes whose tap ranges the sizes' ranges do not decide
    try:
        top, bottom = pick_all(max, [lo for lo, _ in rows]), pick_all(min, [hi for _, hi in rows])
        left, right = pick_all(max, [lo for lo, _ in cols]), pick_all(min, [hi for _, hi in cols])
        if decide(bottom - top, "<", 1) is not False or decide(right - left, "<", 2) is not False:
            return False
        edges = [[(pick_all(max, [lo, start]), pick_all(min, [hi, end])) for lo, hi in cols]
                 for start, end in ((0, left), (right, OW))]
    except RunTimeDim:
        return False
    b = ctx.b
    M = W.shape[0]
    x_plane = (n * C + m / (M // group)) * (H * Wd)
    y_plane = (n * M + m) * (OH * OW)
    bias = Bias[m] if Bias is not None else const(0, Y.dtype)

    def edge_rows(start: int, end: int):
        lp = span_loop(b, wrap(start), wrap(end), "o0")
        if lp is not None:
            with lp as o:
                _direct_row(ctx, X, W, Bias, Y, win, group, n, m, [o])

    edge_rows(0, top)
    ws = [[b.local("w", W[m * (KH * KW) + k0 * KW + k1]) for k1 in range(KW)] for k0 in range(KH)]
    with b.loop(wrap(bottom), "o0", role=SPATIAL, start=wrap(top)) as o:
        dst = y_plane + o * OW
        src = [x_plane + plus(o * sh, const(k0 * dh - ph)) * Wd for k0 in range(KH)]
        with b.loop(wrap(right), "p", role=SPATIAL, start=wrap(left)) as q:
            acc: Expr = bias
            for k0 in range(KH):
                for k1 in range(KW):
                    acc = acc + ws[k0][k1] * X[plus(src[k0], const(k1 * dw - pw)) + q * sw]
            b.store(Y, dst + q, acc)
        # the columns some tap misses: the bias, then each tap where it reaches
        for (start, end), spans in zip(((0, left), (right, OW)), edges):
            lp = span_loop(b, wrap(start), wrap(end))
            if lp is None:
                continue
            with lp as q:
                b.store(Y, dst + q, bias)
            for k0 in range(KH):
                for k1, (lo, hi) in enumerate(spans):
                    lp = span_loop(b, wrap(lo), wrap(hi))
                    if lp is not None:
                        with lp as q:
                            b.store(Y, dst + q, Y[dst + q] + ws[k0][k1] * X[plus(src[k0], const(k1 * dw - pw)) + q * sw])
    edge_rows(bottom, OH)
    return True


# the edge rows of _depthwise_guarded at least this wide take a pass per kernel row (vectorized,
# no select per tap): measured on a ranged 3 x 3 depthwise convolution of 48 channels at
# 56 x 56, its two edge rows of guarded sums took 15-20 of its 75 us (a fixed build: 55)
EDGE_ROW_PASSES_MIN = 16


def _depthwise_guarded(ctx, X, W, Bias, Y, win: Window, group: int, n, m) -> None:
    """`_depthwise_one_pass` over run-time planes: the output rows every kernel row reaches,
    and in them the columns every tap reaches, one sum of all taps from the bias, as there;
    every other element (the rows and columns along the edges, at most a few each) one sum of
    all taps too, each tap added where it falls inside the input (zero where it does not).
    Interior and edges are bounded by min / max of the run's sizes, so each may be empty at
    some sizes; no tap-by-tap pass over a row, whose loops of one or two elements and
    row-sized read-modify-writes cost more than the taps at small planes (a build fixed to a
    size unrolls those; a ranged one cannot)."""
    b = ctx.b
    C, S, O = X.shape[1], list(X.shape[2:]), list(Y.shape[2:])
    (H, Wd), (OH, OW), (KH, KW) = S, O, win.kernel
    (sh, sw), (dh, dw), (ph, pw) = win.strides, win.dilations, win.pads_begin
    M = W.shape[0]
    x_plane = (n * C + m / (M // group)) * (H * Wd)
    y_plane = (n * M + m) * (OH * OW)
    bias = Bias[m] if Bias is not None else const(0, Y.dtype)
    zero = const(0, Y.dtype)

    def bounds(ranges):
        """[first, last) of the positions every tap reaches, last >= first (an empty middle)."""
        first = last = None
        for lo, hi in ranges:
            first = wrap(lo) if first is None else maximum(first, wrap(lo))
            last = wrap(hi) if last is None else minimum(last, wrap(hi))
        return first, maximum(first, last)

    def named(hint: str, e: Expr) -> Expr:       # (a bound the sizes' ranges leave open: a local)
        return e if isinstance(e, Const) or as_dim(e) is not None else b.local(hint, e)

    top, bottom = (named(h, e) for h, e in zip(("top", "bottom"),
                                               bounds([tap_range(k, sh, dh, ph, H, OH) for k in range(KH)])))
    left, right = (named(h, e) for h, e in zip(("left", "right"),
                                               bounds([tap_range(k, sw, dw, pw, Wd, OW) for k in range(KW)])))
    ws = [[b.local("w", W[m * (KH * KW) + k0 * KW + k1]) for k1 in range(KW)] for k0 in range(KH)]

    def inside(pos: Expr, offset: int, size) -> Expr:
        """pos + offset in [0, size) (pos >= 0)."""
        at = plus(pos, const(offset))
        return all_of(([at >= 0] if offset < 0 else []) + [at < wrap(size)])

    def element(o: Expr, q: Expr, edge_row: bool):
        """Output (o, q): the bias and every tap that falls inside the input."""
        acc: Expr = bias
        for k0 in range(KH):
            row_ok = inside(o * sh, k0 * dh - ph, H) if edge_row else None
            for k1 in range(KW):
                col_ok = inside(q * sw, k1 * dw - pw, Wd)
                src = x_plane + plus(o * sh, const(k0 * dh - ph)) * Wd + plus(q * sw, const(k1 * dw - pw))
                ok = all_of([c for c in (row_ok, col_ok) if c is not None])
                tap = ws[k0][k1] * X[src]
                acc = acc + (tap if ok is None else select(ok, tap, zero))
        b.store(Y, y_plane + o * OW + q, acc)

    # rows at least EDGE_ROW_PASSES_MIN outputs wide in the middle of the range: the edge rows
    # a vectorized pass per kernel row that falls inside (_direct_row); narrower ones each
    # output one guarded sum. (Not both under a test of the run's width: inside it GCC finds
    # some tap loops' counts and refuses their vectorize annotation.)
    middle = range_points([OW])[len(RANGE_POINTS) // 2][0]

    def edge_rows(start: Expr, end: Expr):
        with b.loop(end, "o0", role=SPATIAL, start=start) as o:
            if middle >= EDGE_ROW_PASSES_MIN:
                _direct_row(ctx, X, W, Bias, Y, win, group, n, m, [o])
            else:
                with b.loop(wrap(OW), "p", role=SPATIAL, rerun=True) as q:
                    element(o, q, True)

    edge_rows(const(0), top)
    with b.loop(bottom, "o0", role=SPATIAL, start=top) as o:
        dst = y_plane + o * OW
        src = [x_plane + plus(o * sh, const(k0 * dh - ph)) * Wd for k0 in range(KH)]
        # (an iteration writes its own element from the input: it may run twice, Loop.rerun;
        # said at unit stride only: GCC cuts a run of strided loads into 4-lane pieces where it
        # gives a loop of unknown count full-width permutes, 48 channels at stride 2 from
        # 32 x 32 taking 18-19 us in runs, 13.7 without, from 112 x 112 171 against 158)
        with b.loop(right, "p", role=SPATIAL, start=left, rerun=sw == 1) as q:
            acc: Expr = bias
            for k0 in range(KH):
                for k1 in range(KW):
                    acc = acc + ws[k0][k1] * X[plus(src[k0], const(k1 * dw - pw)) + q * sw]
            b.store(Y, dst + q, acc)
        for start, end in ((const(0), left), (right, wrap(OW))):
            with b.loop(end, "p", role=SPATIAL, start=start) as q:
                element(o, q, False)
    edge_rows(bottom, wrap(OH))
