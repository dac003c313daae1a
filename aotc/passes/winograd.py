"""3 x 3 convolutions by Winograd's minimal filtering (aotc/ops/winograd.py), where the target
allows it and it pays.

A target opts in with `[numerics] winograd = true` (the CPU targets): F(2x2, 3x3), whose
float32 errors are close to a direct sum's (tests/test_winograd.py: within 1.5x on wide
convolutions). `,winograd4` on the target name allows F(4x4, 3x3) too: about 1.5x faster again
on large planes, with errors 10-25x a direct sum's (about 1e-5 of the output's scale), so
it is a choice the user makes, like TF32 on CUDA. `,direct_conv` turns Winograd off, and so does
`,bf16`: on AMX tiles the direct product's multiply-adds are cheap and Winograd's transforms are
not (ResNet-50 at 224, one thread, Intel Xeon: 34.3 ms with Winograd, 31.3 without). Where the
bf16 products are AVX512-BF16 dot products instead (no AMX: about 2x float32's rate) they still
pay, and `,bf16_winograd` keeps them (AMD EPYC Zen 4: 50.6 ms against 57.8); `native,bf16` adds
it on such a CPU (targets.py). The pass
runs after the graph passes, as it depends on the target: a Conv with constant 3 x 3 weights,
stride 1, dilation 1, one group and a float32 N-C-H-W input becomes aotc.WinogradConv with the
weights transformed at compile time, when the estimated cost of the cheapest allowed form is
below the direct convolution's by MIN_GAIN. The elementwise ops after it (bias, activation, residual
add) still fuse into its kernel, as after a Conv.

Cost, in multiply-adds of a GEMM:
    direct:      9 M C  per output position
    Winograd:    a² T (M C + TRANSFORM_COST (C + M))   for T tiles of m x m, a = m + 2
TRANSFORM_COST is what transforming one value in or out of the a x a tile domain costs,
counting that value's packing by the GEMM, relative to one multiply-add in the GEMM
(calibrated with tools/winograd_bench.py, see docs/PERFORMANCE.md)."""
from __future__ import annotations

from ..ir import dtypes
from ..ir.dims import RunTimeDim, is_static, lower, upper
from ..ir.graph import Graph, Node
from ..ir.internal import WINOGRAD_CONV
from ..ir.verify import verify
from ..ops.window import conv_parts
from ..ops.winograd import transform_weights
from ..targets import Target
from . import simplify

TRANSFORM_COST = 10.0
MIN_GAIN = 1.25
# F(4x4) only on planes of at least this many tiles a side: on fewer, its GEMMs (N = the tiles)
# are too narrow and its partial edge tiles too large a share, and F(2x2) measured faster
# (256 channels at 14 x 14: F(4x4) 1.7 ms, F(2x2) 1.36 ms; 28 x 28 and larger: F(4x4) faster)
MIN_SIDE_TILES_4 = 7


def choose_tile(N: int, C: int, M: int, OH: int, OW: int, tiles=(2,)) -> int | None:
    """The output tile size m (of `tiles`) of the cheapest Winograd form, or None when the
    direct convolution is estimated to be within MIN_GAIN of it."""
    direct = 9.0 * M * C * N * OH * OW
    costs = []
    for m in tiles:
        TH, TW = -(-OH // m), -(-OW // m)
        if m == 4 and min(TH, TW) < MIN_SIDE_TILES_4:
            continue
        a = m + 2
        costs.append((a * a * N * TH * TW * (M * C + TRANSFORM_COST * (C + M)), m))
    if not costs:
        return None
    cost, m = min(costs)
    return m if cost * MIN_GAIN <= direct else None


def allowed_tiles(target: Target) -> tuple[int, ...]:
    """The Winograd tile sizes the target's [numerics] allow: F(2x2) with `winograd`, F(4x4)
    too with `winograd4`; none with `direct_conv`, or with `bf16` unless `bf16_winograd`."""
    num = target.numerics
    if not num.winograd or num.direct_conv or (num.bf16 and not num.bf16_winograd):
        return ()
    return (2, 4) if num.winograd4 else (2,)


def winograd_convs(g: Graph, target: Target) -> Graph:
    """Every eligible Conv of g whose Winograd form pays, replaced by aotc.WinogradConv."""
    tiles = allowed_tiles(target)
    if not tiles:
        return g
    block_bytes = target.winograd.block_bytes
    changed = False
    nodes = []
    for n in g.nodes:
        rewritten = _rewrite(g, n, tiles, block_bytes)
        changed |= rewritten is not n
        nodes.append(rewritten)
    if not changed:
        return g
    g.nodes = nodes
    g = simplify.eliminate_dead_code(g)
    verify(g, "winograd_convs")
    return g


def _rewrite(g: Graph, n: Node, tiles, block_bytes: int) -> Node:
    if n.op_type != "Conv" or len(n.inputs) < 2 or not n.inputs[1]:
        return n
    x, w = g.values[n.inputs[0]], g.const(n.inputs[1])
    if w is None or x.dtype != dtypes.FLOAT32 or len(x.shape) != 4 or w.shape[2:] != (3, 3):
        return n
    group, win = conv_parts(n, x.shape, w.shape)
    if group != 1 or win.strides != [1, 1] or win.dilations != [1, 1]:
        return n
    N, C = x.shape[:2]
    M, (OH, OW) = w.shape[0], win.out
    rows = None
    if is_static(x.shape[2:]):
        m = choose_tile(N if is_static(x.shape) else 1, C, M, OH, OW, tiles)   # (the batch scales both costs alike)
    else:
        m, rows = _run_time_tile(C, M, OH, OW, tiles, block_bytes)
    if m is None:
        return n
    u = g.add_const(transform_weights(w, m), f"{n.inputs[1]}_winograd{m}")
    inputs = [n.inputs[0], u] + ([n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else [])
    pads = [win.pads_begin[0], win.pads_begin[1], win.pads_end[0], win.pads_end[1]]
    if rows is None:
        TH, TW = -(-OH // m), -(-OW // m)
        rows = block_rows(C, M, m, TH, TW, block_bytes)
    attrs = {"tile": m, "pads": pads, "block_rows": rows}
    return Node(WINOGRAD_CONV, inputs, list(n.outputs), attrs, n.name)


def _run_time_tile(C: int, M: int, OH, OW, tiles, block_bytes: int):
    """(tile, block rows) for planes of run-time size, or (None, None): the cost model's choice
    at the smallest planes (the least gain: tiles and their edges weigh most there), among the
    tiles that divide the output's sides at every size (its kernel has no partial tiles of
    run-time size), in one block of the whole plane where the largest planes fit in one
    (WHOLE_PLANE: the small ResNet-50's 3 x 3 convolution of 64 channels on planes of 2 to 8 sides),
    else in blocks of as many rows of tiles as the largest planes take and as divide
    the rows of tiles at every size; not where that is one row and the largest planes take more
    (GEMMs a row of tiles wide measured slower than the im2col GEMM: 801 vs 745 us on 64
    channels at 32 x 32)."""
    fits = [m for m in tiles if _divides(OH, m) and _divides(OW, m)]
    m = choose_tile(1, C, M, lower(OH), lower(OW), tuple(fits)) if fits else None
    if m is None:
        return None, None
    TH, TW = OH // m, OW // m
    most = block_rows(C, M, m, upper(TH), upper(TW), block_bytes)
    if most >= upper(TH):
        return m, WHOLE_PLANE          # (the largest plane is one block: so is every plane)
    rows = max(r for r in range(1, most + 1) if _divides(TH, r))
    return (m, rows) if rows > 1 or most == 1 else (None, None)


# block_rows of a WinogradConv whose block is the whole plane at every run-time size
WHOLE_PLANE = 0


def _divides(d, m: int) -> bool:
    try:
        return d % m == 0
    except RunTimeDim:
        return False


def block_rows(C: int, M: int, m: int, TH: int, TW: int, block_bytes: int) -> int:
    """Rows of tiles a block of the kernel takes: the most (a divisor of TH) whose transformed
    input and output tiles, (C + M) a² floats a tile, fit in block_bytes (the target's
    [winograd] block_bytes), and at least one; the whole plane when the transformed weights
    (a² M C floats, which every block's GEMMs read) do not fit in block_bytes themselves, or
    when block_bytes is 0. Measured (1 thread, A/B against the whole plane): 64 channels at
    56 x 56 in blocks of 2 rows 10% faster; 512 channels at 7 x 7 in 2 blocks 10-15% slower, its
    16 MB of weights read twice; 128 channels at 28 x 28 the same either way."""
    a = m + 2
    if block_bytes <= 0 or a * a * M * C * 4 > block_bytes:
        return TH
    per_row = (C + M) * (m + 2) ** 2 * TW * 4
    return max([r for r in range(1, TH + 1) if TH % r == 0 and r * per_row <= block_bytes], default=1)
