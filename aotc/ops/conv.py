"""Conv and ConvTranspose, in any number of spatial dims (NC[D]HW).

Conv lowering, float32:
  * 1x1, stride 1, no padding: one GEMM per (batch, group) straight on the input.
  * depthwise (one input channel per group): a loop nest (ops/conv_direct.py).
  * everything else: im2col of one (batch, group) into ctx.scratch, then a GEMM. The GEMM's B
    also says what the im2col matrix is in terms of the input (Matrix.direct), so a schedule
    whose GEMM can read that (the CPU's packer, the GPU's tile staging) drops the scratch and
    its loops.
The weights are the GEMM's A operand, the output positions its columns; the bias is what the
GEMM makes of each element (its epilogue, applied to each tile as it is finished), and the
activations and residual adds that fusion puts after the Conv follow there too. The schedule
decides the rest (weights packed into panels, the product computed transposed when that
fits the tiles better, threads). Other dtypes use the direct loop nest (ops/conv_direct.py).
"""
from __future__ import annotations

from dataclasses import replace


from ..errors import UnsupportedError
from ..ir import dtypes
from ..kernel.ir import ORDERED, SPATIAL, ConvWindow, Expr, GemmDest, Matrix, binop, cast, const, matrix, wrap
from .common import prod, shape_error
from .conv_direct import conv_direct
from .registry import register
from .window import IfElse, Window, all_of, conv_parts, dot, each_tap, inside_input, plus, row_major_strides, span_loop


def _conv_infer(node, ins):
    x, w = ins[0], ins[1]
    _, win = conv_parts(node, x.shape, w.shape)
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (w.shape[0],):
        raise shape_error(node, f"bias shape {ins[2].shape} is not ({w.shape[0]},)")
    return [(x.dtype, (x.shape[0], w.shape[0], *win.out))]


def _lower_conv(node, ctx):
    X, W = ctx.ins[0], ctx.ins[1]
    Bias = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    group, win = conv_parts(node, X.shape, W.shape)
    Cg = X.shape[1] // group
    if X.dtype != dtypes.FLOAT32 or (Cg == 1 and group > 1):
        ctx.b.comment(f"direct convolution: {group} group(s) of {Cg} input channel(s)")
        conv_direct(ctx, X, W, Bias, Y, win, group)
        return
    conv_gemms(ctx, X, W, Bias, Y, group, win)


def conv_gemms(ctx, X, W, Bias, Y, group: int, win: Window, x_zero: Expr | None = None,
               x_last: bool = False, y_last: bool = False) -> None:
    """The convolution as a GEMM per (batch entry, group): output channels x output positions
    = weights x the im2col matrix of the input (the input itself for a 1x1 convolution).
    x_zero: 8-bit X and W (aotc.ConvInteger), an integer Gemm of (X - x_zero) . W, whose
    padding reads x_zero (so that it adds nothing). x_last / y_last: a 1x1 convolution whose
    input / output is channels-last, (N, spatial..., C) (aotc.ChannelsLastConv,
    ops/channels_last.py): B reads the input, C lands in the output, by their strides."""
    b = ctx.b
    N, C, S = X.shape[0], X.shape[-1 if x_last else 1], list(X.shape[1:-1] if x_last else X.shape[2:])
    M, O = W.shape[0], list(Y.shape[1:-1] if y_last else Y.shape[2:])
    Cg, Mg = C // group, M // group
    KK, SL, OL = prod(win.kernel), prod(S), prod(O)
    pointwise = all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides) \
        and not any(win.pads_begin) and not any(win.pads_end)
    integer = X.dtype != dtypes.FLOAT32
    assert pointwise or not (x_last or y_last), "channels-last: 1x1 convolutions only"
    if pointwise:
        last = " and ".join(w for w, on in (("input", x_last), ("output", y_last)) if on)
        b.comment("1x1 convolution: one GEMM per group on the input itself" + (f" ({last} channels-last)" if last else ""))
    else:
        b.comment(f"im2col ({Cg * KK} x {OL}) + GEMM per group")
        col = ctx.scratch((Cg * KK, OL), X.dtype, "col")
    K = Cg * KK
    r = len(S)
    # batch entries and groups are independent but for the im2col scratch, which each fills and
    # then reads: a schedule runs them one at a time, or gives each its own copy
    with b.loops([N, group], ["n", "g"], role=SPATIAL, private=() if pointwise else (col,)) as (n, g):
        if pointwise and x_last:
            src = matrix(X, n * SL * C + g * Cg, 1, C)          # B(k, j): channel k at position j
        elif pointwise:
            src = matrix(X, (n * C + g * Cg) * SL, SL, 1)
        elif integer:
            _im2col(b, X, col, n, g * Cg, Cg, S, O, win, pad=cast(x_zero, X.dtype))
            src = matrix(col, 0, OL, 1)
        else:
            _im2col(b, X, col, n, g * Cg, Cg, S, O, win)
            src = replace(matrix(col, 0, OL, 1), direct=_im2col_direct(X, n, g * Cg, S, O, win))
        # C(i, j): output channel g*Mg + i at output position j
        if y_last:
            dest = GemmDest(Y, (n,) + (0,) * r + (g * Mg,), (r + 1,), tuple(range(1, 1 + r)))
        else:
            dest = GemmDest(Y, (n, g * Mg) + (0,) * r, (1,), tuple(range(2, 2 + r)))
        b.gemm(Mg, OL, K, matrix(W, g * (Mg * K), K, 1), src, dest,
               result=(lambda v, i, j: v + Bias[g * Mg + i]) if Bias is not None else None, b_zero=x_zero)


def _im2col(b, X, col, n, c0, Cg, S, O, win: Window, pad: Expr | None = None):
    """col[(c, k...), (o...)] = X[n, c0 + c, o*s - pb + k*d] (`pad`, default 0, outside the
    input)."""
    r = len(S)
    C = X.shape[1]
    SL, OL, OLast = prod(S), prod(O), O[-1]
    xst, ost, kst = row_major_strides(S), row_major_strides(O), row_major_strides(win.kernel)
    s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]
    zero = const(0, col.dtype) if pad is None else pad
    with b.loops([Cg, *win.kernel[:-1]], ["c"] + [f"k{i}" for i in range(r - 1)], role=SPATIAL) as idx:
        c, ko = idx[0], idx[1:]

        def tap(k_l, lo, hi):
            row = (c * prod(win.kernel) + dot(list(ko) + [k_l], kst)) * OL
            with b.loops(O[:-1], [f"o{i}" for i in range(r - 1)], role=SPATIAL) as oo:
                pos = [o * win.strides[i] - win.pads_begin[i] + ko[i] * win.dilations[i] for i, o in enumerate(oo)]
                dst = row + dot(oo, ost[:-1])
                src = plus((n * C + c0 + c) * SL + dot(pos, xst[:-1]), k_l * d_l - pb_l)

                def fill(start, end, value=None):
                    lp = span_loop(b, start, end)
                    if lp is not None:
                        with lp as p:
                            b.store(col, dst + p, zero if value is None else value(p))

                def copy_row():
                    fill(const(0), lo)
                    fill(lo, hi, lambda p: X[src + p * s_l])
                    fill(hi, wrap(OLast))

                inside = inside_input(pos, S, win)
                if inside is None:
                    copy_row()
                else:
                    with IfElse(b, inside) as (then, orelse):
                        with then:
                            copy_row()
                        with orelse:
                            fill(const(0), wrap(OLast))

        each_tap(b, win, S[-1], OLast, tap)


def _im2col_direct(X, n, c0, S, O, win: Window) -> Matrix | None:
    """The im2col matrix of a 1-D or 2-D convolution as its input holds it (Matrix.direct),
    for a GEMM that packs B from the input itself; None for more spatial dims."""
    if len(S) > 2:
        return None
    pad = [1] * (2 - len(S))              # a 1-D convolution is a 2-D one of height 1
    w = ConvWindow(size=(*pad, *S), kernel=(*pad, *win.kernel), strides=(*pad, *win.strides),
                   dilations=(*pad, *win.dilations), pads=(*[0] * len(pad), *win.pads_begin),
                   out=(*pad, *O))
    return Matrix(X, (n * X.shape[1] + c0) * prod(S), 0, 0, "im2col", window=w)


# a depthwise 2-D kernel with at most this many taps computes its interior output rows in one
# pass (every tap of every kernel row into a register), the rows and columns at the padding as
# the other direct convolutions do
register("Conv", lower=_lower_conv, run_time_dims=True)(_conv_infer)


# ----------------------------------------------------------------------------- ConvTranspose
def _convt_parts(node, xs, ws):
    if len(xs) < 3 or len(ws) != len(xs):
        raise shape_error(node, f"input {tuple(xs)} and weight {tuple(ws)} must be N-C-spatial of equal rank")
    group = int(node.attr("group", 1))
    C = xs[1]
    if group < 1 or C % group or ws[0] != C:
        raise shape_error(node, f"{C} input channels, weight {tuple(ws)} and group={group} do not fit")
    M = ws[1] * group
    r = len(xs) - 2
    S = list(xs[2:])
    ks = node.attr("kernel_shape", None)
    kernel = list(ws[2:]) if ks is None else [int(k) for k in ks]
    if kernel != list(ws[2:]):
        raise shape_error(node, f"kernel_shape {kernel} differs from the weight's {tuple(ws[2:])}")
    strides = [int(s) for s in node.attr("strides", [1] * r)]
    dil = [int(d) for d in node.attr("dilations", [1] * r)]
    opad = [int(p) for p in node.attr("output_padding", [0] * r)]
    if len(strides) != r or len(dil) != r or len(opad) != r:
        raise shape_error(node, f"strides {strides} / dilations {dil} / output_padding {opad} must have "
                         f"one value per spatial dim ({r})")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        raise shape_error(node, "strides and dilations must be positive")
    if any(k < 1 for k in kernel):
        raise shape_error(node, f"kernel_shape {kernel} must be positive")
    if any(not 0 <= op < max(st, d) for op, st, d in zip(opad, strides, dil)):
        raise shape_error(node, f"output_padding {opad} must be >= 0 and less than max(stride, dilation)")
    full = [st * (s - 1) + op + (k - 1) * d + 1 for s, st, op, k, d in zip(S, strides, opad, kernel, dil)]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise shape_error(node, f"unknown auto_pad {auto_pad!r}")
    out_shape = node.attr("output_shape", None)
    if out_shape is not None:
        if len(out_shape) not in (r, r + 2):
            raise shape_error(node, f"output_shape {list(out_shape)} must give the {r} spatial dims")
        out_shape = [int(v) for v in out_shape][-r:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [s * st for s, st in zip(S, strides)]
    if out_shape is not None:
        total = [f - o for f, o in zip(full, out_shape)]
        if any(t < 0 for t in total):
            raise UnsupportedError([f"ConvTranspose node {node.name!r}: output_shape {out_shape} needs "
                                    f"negative padding"])
        if auto_pad == "SAME_UPPER":
            pb = [t // 2 for t in total]
        else:
            pb = [t - t // 2 for t in total]
        pe = [t - p for t, p in zip(total, pb)]
    elif auto_pad == "VALID":
        pb, pe = [0] * r, [0] * r
    else:
        pads = [int(p) for p in node.attr("pads", [0] * (2 * r))]
        if len(pads) != 2 * r or any(p < 0 for p in pads):
            raise shape_error(node, f"pads {pads} must be {2 * r} values >= 0 (begin and end of each spatial dim)")
        pb, pe = pads[:r], pads[r:]
    out = [f - b_ - e for f, b_, e in zip(full, pb, pe)]
    if any(o <= 0 for o in out):
        raise shape_error(node, f"output spatial shape {out} is empty")
    return group, M, Window(kernel, strides, dil, pb, pe, out)


def _convt_infer(node, ins):
    x, w = ins[0], ins[1]
    _, M, win = _convt_parts(node, x.shape, w.shape)
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (M,):
        raise shape_error(node, f"bias shape {ins[2].shape} is not ({M},)")
    return [(x.dtype, (x.shape[0], M, *win.out))]


def _lower_convt(node, ctx):
    X, W = ctx.ins[0], ctx.ins[1]
    Bias = ctx.ins[2] if len(ctx.ins) > 2 else None
    Y = ctx.outs[0]
    if X.dtype != dtypes.FLOAT32:
        raise UnsupportedError([f"ConvTranspose node {node.name!r} on {X.dtype} (float32 only)"])
    group, M, win = _convt_parts(node, X.shape, W.shape)
    N, C, S = X.shape[0], X.shape[1], list(X.shape[2:])
    O = list(Y.shape[2:])
    Cg, Mg = C // group, M // group
    r = len(S)
    KK, SL, OL, SLast = prod(win.kernel), prod(S), prod(O), S[-1]
    b = ctx.b
    b.comment(f"GEMM (weights^T x input) into columns, then col2im; {group} group(s)")
    col = ctx.scratch((Mg * KK, SL), X.dtype, "col")
    ost, sst, kst = row_major_strides(O), row_major_strides(S), row_major_strides(win.kernel)
    with b.loops([N], ["n"], role=ORDERED) as (n,):
        with b.loops([M, OL], ["m", "p"], role=SPATIAL) as (m, p):
            b.store(Y, (n * M + m) * OL + p, Bias[m] if Bias is not None else const(0, Y.dtype))
        with b.loops([group], ["g"], role=ORDERED) as (g,):
            # A = W^T of the group: element ((m, k...), c) at W[g*Cg + c, m, k...]
            b.gemm(Mg * KK, SL, Cg, matrix(W, g * (Cg * Mg * KK), 1, Mg * KK),
                   matrix(X, (n * C + g * Cg) * SL, SL, 1), GemmDest(col, (0, 0), (0,), (1,)))
            # col2im: Y[n, g*Mg + m, i*s - pb + k*d] += col[(m, k), i]; taps of one m overlap
            with b.loops([Mg], ["m"], role=SPATIAL) as (m,), \
                    b.loops(win.kernel[:-1], [f"k{i}" for i in range(r - 1)], role=ORDERED) as ko:
                s_l, d_l, pb_l = win.strides[-1], win.dilations[-1], win.pads_begin[-1]

                def tap(k_l, lo, hi):
                    row = (m * KK + dot(list(ko) + [k_l], kst)) * SL
                    with b.loops(S[:-1], [f"i{q}" for q in range(r - 1)], role=SPATIAL) as ii:
                        pos = [i * win.strides[q] - win.pads_begin[q] + ko[q] * win.dilations[q]
                               for q, i in enumerate(ii)]
                        dst = plus((n * M + g * Mg + m) * OL + dot(pos, ost[:-1]), k_l * d_l - pb_l)
                        src = row + dot(ii, sst[:-1])
                        inside = all_of(binop("&&", q >= 0, q < O[k]) for k, q in enumerate(pos))
                        lp = span_loop(b, lo, hi)
                        if lp is None:
                            return
                        if inside is not None:
                            with b.if_(inside):
                                with lp as p:
                                    b.store(Y, dst + p * s_l, Y[dst + p * s_l] + col[src + p])
                        else:
                            with lp as p:
                                b.store(Y, dst + p * s_l, Y[dst + p * s_l] + col[src + p])

                each_tap(b, win, O[-1], SLast, tap)


register("ConvTranspose", lower=_lower_convt, run_time_dims=True)(_convt_infer)


