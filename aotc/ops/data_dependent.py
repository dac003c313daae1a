"""Ops whose outputs' sizes depend on their inputs' values: NonZero, Compress (on a run-time
condition; a constant one makes it a Gather, passes/control.py), NonMaxSuppression and Unique.

On constant inputs (initializers, folded values, inputs bound with --const) shape inference
computes them with the ONNX reference implementation and they become weights. On run-time
inputs they are kernels with outputs of run-time size (passes/bounded.py):
the output is allocated at its capacity (all elements selected), the kernel writes the
selected ones from the start, zeros after them, and the number selected into its count
output."""
from __future__ import annotations

import numpy as np

from ..errors import ModelError, ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.bounded import Bound, count_output, count_position, onnx_outputs, refuse
from ..ir.internal import CONCAT_ROWS, COUNT, COUNT_ATTR, RUN_TIME_CONCAT
from ..kernel.ir import ORDERED, SPATIAL, Load, binop, cast, const, maximum, minimum, select
from .common import norm_axis, prod
from .reference import evaluate
from .registry import register


def _known(ins) -> bool:
    return all(v is None or v.const is not None for v in ins)


def _reference(node, ins, types) -> list[np.ndarray]:
    return evaluate(node, [v.const if v is not None else None for v in ins], types)


# ----------------------------------------------------------------------------- NonZero
def _nonzero_types(node, ins):
    x = ins[0]
    if _known(ins):
        return [(r.dtype, tuple(r.shape)) for r in _reference(node, ins, [(dtypes.INT64, None)])]
    if not x.shape:
        raise ShapeError(f"NonZero node {node.name!r}: its input is a scalar", "NonZero takes a tensor of rank >= 1")
    return [(dtypes.INT64, (len(x.shape), prod(x.shape)))]


def _nonzero_fold(node, ins):
    return _reference(node, ins, [(dtypes.INT64, None)]) if _known(ins) else None


def _nonzero_bounds(g, node, ins, marks):
    if _known(ins):
        return [None]
    if marks[0] is not None:
        raise refuse(node, f"takes {node.inputs[0]!r}, whose size is known only at run time")
    return [Bound({1: count_output(g, node)}, zero=True), None]


def _lower_nonzero(node, ctx):
    """The coordinates of the nonzero elements in row-major order: column k of the output
    holds the k-th one's (as numpy.nonzero)."""
    X, Y, C = ctx.ins[0], ctx.outs[0], ctx.outs[count_position(node)]
    b, shape = ctx.b, X.shape
    n = prod(shape)
    b.comment(f"NonZero: up to {n} coordinates of rank {len(shape)}; the count goes to {C.name}")
    if n == 0:
        b.store(C, const(0), const(0))
        return
    with b.loop(len(shape) * n, "z", role=SPATIAL) as z:
        b.store(Y, z, const(0, Y.dtype))
    found = b.local("found", const(0))
    with b.loop(n, "i", role=ORDERED) as i:
        with b.if_(binop("!=", Load(X, i), const(0, X.value_dtype))):
            stride = n
            for d, size in enumerate(shape):
                stride //= size
                b.store(Y, found + d * n, (i // stride) % size if d else i // stride)
            b.assign(found, found + 1)
    b.store(C, const(0), found)


register("NonZero", fold=_nonzero_fold, lower=_lower_nonzero, bounded=_nonzero_bounds, accepts_epilogue=False,
         how="kernel; on a run-time input its output's column count is known only after a run "
             "(docs/DESIGN.md, \"Bounded dimensions\")")(_nonzero_types)


# ----------------------------------------------------------------------------- Compress
def _compress_dims(node, ins):
    """(axis or None (flattened), elements before it, its length, elements after it, condition
    length)."""
    x, cond = ins[0], ins[1] if len(ins) > 1 else None
    if cond is None:
        raise ShapeError(f"Compress node {node.name!r}: the condition input is required")
    if len(cond.shape) != 1:
        raise ShapeError(f"Compress node {node.name!r}: the condition must be 1-D, not of shape {cond.shape}")
    axis = node.attr("axis")
    if axis is None:
        pre, length, post = 1, prod(x.shape), 1
    else:
        axis = norm_axis(int(axis), len(x.shape), node)
        pre, length, post = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    if cond.shape[0] > length:
        raise ShapeError(f"Compress node {node.name!r}: the condition has {cond.shape[0]} values for {length} slices")
    return axis, pre, length, post, cond.shape[0]


def _compress_types(node, ins):
    """A constant condition never gets here (passes/control.py makes the node a Gather)."""
    axis, _, _, _, m = _compress_dims(node, ins)
    x = ins[0]
    shape = (m,) if axis is None else tuple(m if a == axis else d for a, d in enumerate(x.shape))
    return [(x.dtype, shape)]


def _compress_bounds(g, node, ins, marks):
    if any(marks):
        raise refuse(node, "takes a tensor whose size is known only at run time")
    axis = node.attr("axis")
    a = 0 if axis is None else norm_axis(int(axis), len(ins[0].shape), node)
    return [Bound({a: count_output(g, node)}, zero=True), None]


def _lower_compress(node, ctx):
    X, Cond, Y, C = ctx.ins[0], ctx.ins[1], ctx.outs[0], ctx.outs[count_position(node)]
    _, pre, length, post, m = _compress_dims(node, [ctx.value(0), ctx.value(1)])
    b = ctx.b
    b.comment(f"Compress: the slices whose condition is true, up to {m}; the count goes to {C.name}")
    with b.loop(pre * m * post, "z", role=SPATIAL) as z:
        b.store(Y, z, const(0, Y.dtype))
    kept = b.local("kept", const(0))
    with b.loop(m, "i", role=ORDERED) as i:
        with b.if_(binop("!=", Load(Cond, i), const(0, Cond.value_dtype))):
            with b.loops([pre, post], ["p", "q"], role=SPATIAL) as (p, q):
                b.store(Y, (p * m + kept) * post + q, Load(X, (p * length + i) * post + q))
            b.assign(kept, kept + 1)
    b.store(C, const(0), kept)


register("Compress", lower=_lower_compress, bounded=_compress_bounds, accepts_epilogue=False,
         how="a Gather when the condition is known at compile time; else a kernel whose output's size is "
             "known only after a run")(_compress_types)


# ----------------------------------------------------------------------------- sorting
def merge_sort(b, items, tmp, count, capacity: int, before) -> None:
    """Sort items[0:count] (count <= capacity) so that no item is placed after one it comes
    `before`, keeping the order of items neither comes before (a stable sort), bottom-up: runs
    of width 1, 2, 4... merged pairwise into tmp and copied back; O(count log count) steps in
    the kernel IR, so every printer prints it. `before(b, p, q)` may emit statements into b
    (a loop comparing two slices) and returns a bool Expr."""
    levels = int(np.ceil(np.log2(capacity))) if capacity > 1 else 0
    width = b.local("width", const(1))
    with b.loop(levels, "level"):
        with b.loop((count + 2 * width - 1) // (2 * width), "pair") as pr:
            lo = b.local("lo", pr * 2 * width)
            mid = b.local("mid", minimum(lo + width, count))
            hi = b.local("hi", minimum(lo + 2 * width, count))
            li, ri = b.local("left", lo), b.local("right", mid)
            with b.loop(hi, "k", start=lo) as k:
                # (read in range even when a run is used up: then the comparison does not count)
                right_first = before(b, Load(items, minimum(ri, hi - 1)), Load(items, minimum(li, mid - 1)))
                take = b.local("take_left", binop("&&", li < mid, binop(
                    "||", ri >= hi, binop("==", right_first, const(False, np.bool_)))))
                b.store(tmp, k, select(take, Load(items, li), Load(items, ri)))
                b.assign(li, li + cast(take, np.int64))
                b.assign(ri, ri + cast(binop("==", take, const(False, np.bool_)), np.int64))
        with b.loop(count, "k") as k:
            b.store(items, k, Load(tmp, k))
        b.assign(width, width * 2)


# ----------------------------------------------------------------------------- Unique
def _unique_dims(node, x):
    """(axis or None (flattened), elements before it, its length, elements after it)."""
    axis = node.attr("axis")
    if axis is None:
        return None, 1, prod(x.shape), 1
    axis = norm_axis(int(axis), len(x.shape), node)
    return axis, prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])


def _unique_types(node, ins):
    if int(node.attr("sorted", 1)) not in (0, 1):
        raise ModelError(f"Unique node {node.name!r}: sorted must be 0 or 1, not {node.attr('sorted')}")
    x = ins[0]
    n_out = len(onnx_outputs(node))
    if _known(ins):           # folded by the reference (passes/infer.py)
        types = [(dt, None) for dt in (x.dtype, dtypes.INT64, dtypes.INT64, dtypes.INT64)][:n_out]
        return [(r.dtype, tuple(r.shape)) for r in _reference(node, ins, types)]
    if not x.shape:
        raise ShapeError(f"Unique node {node.name!r}: its input is a scalar")
    axis, _, length, _ = _unique_dims(node, x)
    y = (length,) if axis is None else tuple(x.shape)
    return [(x.dtype, y), (dtypes.INT64, (length,)), (dtypes.INT64, (length,)), (dtypes.INT64, (length,))][:n_out]


def _unique_fold(node, ins):
    if not _known(ins):
        return None
    x = ins[0]
    types = [(dt, None) for dt in (x.dtype, dtypes.INT64, dtypes.INT64, dtypes.INT64)][:len(onnx_outputs(node))]
    return _reference(node, ins, types)


def _unique_bounds(g, node, ins, marks):
    outs = onnx_outputs(node)
    if _known(ins):
        return [None] * len(node.outputs)
    if marks[0] is not None:
        raise refuse(node, f"takes {node.inputs[0]!r}, whose size is known only at run time")
    axis, _, _, _ = _unique_dims(node, ins[0])
    bounded_axis = {0: 0 if axis is None else axis, 1: 0, 3: 0}       # output -> its run-time axis
    first = next((k for k in bounded_axis if k < len(outs) and outs[k]), None)
    if first is None:           # only inverse_indices: no output of run-time size
        return [None] * len(node.outputs)
    count = count_output(g, node, first)
    return [Bound({bounded_axis[k]: count}, zero=True) if k in bounded_axis and k < len(outs) and outs[k] else None
            for k in range(len(node.outputs))]


def _slice_order(b, X, pre: int, length: int, post: int):
    """compare(p, q, less): slice p < slice q in lexicographic order, or slice p != slice q, for
    the slices along the middle axis of X seen as [pre, length, post] (one element each when
    pre = post = 1)."""
    def compare(p, q, less: bool):
        """Slice p < slice q when `less`, else slice p != slice q."""
        if pre * post == 1:
            xp, xq = Load(X, p), Load(X, q)
            return xp < xq if less else binop("!=", xp, xq)
        differs = b.local("differs", const(False, np.bool_))
        lt = b.local("less", const(False, np.bool_)) if less else None
        with b.loops([pre, post], ["pp", "qq"]) as (pp, qq):
            with b.if_(binop("==", differs, const(False, np.bool_))):
                xp = b.local("xp", Load(X, (pp * length + p) * post + qq))
                xq = b.local("xq", Load(X, (pp * length + q) * post + qq))
                with b.if_(binop("!=", xp, xq)):
                    b.assign(differs, const(True, np.bool_))
                    if less:
                        b.assign(lt, xp < xq)
        return lt if less else differs
    return compare


def _lower_unique(node, ctx):
    """A stable merge sort of the slice numbers by their contents; each run of equal slices is
    one unique value, whose first slice (the lowest number) represents it. Ids go to the
    representatives in sorted order (sorted = 1) or in input order (sorted = 0)."""
    X = ctx.ins[0]
    n_out = len(onnx_outputs(node))
    Y, I, Inv, Cnt = (ctx.outs[:n_out] + [None] * 4)[:4]
    C = ctx.outs[count_position(node)] if COUNT_ATTR in node.attrs else None
    _, pre, length, post = _unique_dims(node, ctx.value(0))
    b = ctx.b
    b.comment(f"Unique: up to {length} distinct slices of {pre} x {post} elements; the count goes to "
              f"{C.name if C is not None else '(none)'}")
    for buf in (Y, I, Cnt):
        if buf is not None:
            with b.loop(buf.size, "z", role=SPATIAL) as z:
                b.store(buf, z, const(0, buf.dtype))
    order, tmp = ctx.scratch((length,), np.int64, "order"), ctx.scratch((length,), np.int64, "merged")
    rep, uid = ctx.scratch((length,), np.int64, "representative"), ctx.scratch((length,), np.int64, "unique_id")
    compare = _slice_order(b, X, pre, length, post)
    with b.loop(length, "i", role=SPATIAL) as i:
        b.store(order, i, i)
    merge_sort(b, order, tmp, const(length), length, lambda _, p, q: compare(p, q, True))
    r = b.local("rep", const(0))
    with b.loop(length, "t") as t:
        i = b.local("i", Load(order, t))
        if length > 1:
            differs = compare(Load(order, maximum(t - 1, const(0))), i, False)
            with b.if_(binop("||", t.eq(const(0)), differs)):
                b.assign(r, i)
        else:
            b.assign(r, i)
        b.store(rep, i, r)
    found = b.local("found", const(0))
    with b.loop(length, "t") as t:
        i = b.local("i", Load(order, t) if int(node.attr("sorted", 1)) else t)
        with b.if_(Load(rep, i).eq(i)):
            b.store(uid, i, found)
            if Y is not None:
                with b.loops([pre, post], ["pp", "qq"]) as (pp, qq):
                    b.store(Y, (pp * length + found) * post + qq, Load(X, (pp * length + i) * post + qq))
            if I is not None:
                b.store(I, found, i)
            b.assign(found, found + 1)
    if Inv is not None or Cnt is not None:
        with b.loop(length, "i") as i:
            u = b.local("u", Load(uid, Load(rep, i)))
            if Inv is not None:
                b.store(Inv, i, u)
            if Cnt is not None:
                b.store(Cnt, u, Load(Cnt, u) + 1)
    if C is not None:
        b.store(C, const(0), found)


register("Unique", fold=_unique_fold, lower=_lower_unique, bounded=_unique_bounds, accepts_epilogue=False,
         how="kernel (a merge sort of the slices); on a run-time input its outputs' length is known only after "
             "a run")(_unique_types)


# ----------------------------------------------------------------------------- NonMaxSuppression
def _nms_dims(node, ins):
    """(batches, classes, boxes, the most boxes kept per class): the last must be a constant,
    since it sets the output's capacity."""
    boxes, scores = ins[0], ins[1]
    if len(boxes.shape) != 3 or boxes.shape[2] != 4:
        raise ShapeError(f"NonMaxSuppression node {node.name!r}: boxes must be [batches, boxes, 4], not {boxes.shape}")
    if len(scores.shape) != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ShapeError(f"NonMaxSuppression node {node.name!r}: scores must be [batches, classes, boxes] = "
                         f"[{boxes.shape[0]}, C, {boxes.shape[1]}], not {scores.shape}")
    most = ins[2] if len(ins) > 2 else None
    if most is not None and most.const is None:
        raise UnsupportedError([f"NonMaxSuppression node {node.name!r} with max_output_boxes_per_class known only "
                                "at run time"], "it sets the most rows the output can hold: make it a constant "
                                "(or bind the input that feeds it with --const)")
    k = 0 if most is None or most.const.size == 0 else max(int(np.asarray(most.const).reshape(-1)[0]), 0)
    return boxes.shape[0], scores.shape[1], boxes.shape[1], min(k, boxes.shape[1])


def _nms_types(node, ins):
    if int(node.attr("center_point_box", 0)) not in (0, 1):
        raise ModelError(f"NonMaxSuppression node {node.name!r}: center_point_box must be 0 or 1, not "
                         f"{node.attr('center_point_box')}")
    nb, nc, _, k = _nms_dims(node, ins)
    if _known(ins):         # folded by the reference (passes/infer.py)
        return [(r.dtype, tuple(r.shape)) for r in _reference(node, ins, [(dtypes.INT64, None)])]
    return [(dtypes.INT64, (nb * nc * k, 3))]


def _nms_bounds(g, node, ins, marks):
    if _known(ins):
        return [None]
    if any(marks):
        raise refuse(node, "takes a tensor whose size is known only at run time")
    return [Bound({0: count_output(g, node)}, zero=True), None]


def _box_edges(b, boxes, at, center: bool, hint: str):
    """(x_min, x_max, y_min, y_max) of the box at element offset `at`, as ONNX's reference
    and ONNX Runtime compute them: corners [y1, x1, y2, x2] in either order, or a center
    [x, y, width, height]."""
    v = [b.local(f"{hint}{k}", Load(boxes, at + k)) for k in range(4)]
    if center:
        hw, hh = b.local(f"{hint}_hw", v[2] / const(2.0, v[2].dtype)), b.local(f"{hint}_hh", v[3] / const(2.0, v[3].dtype))
        return v[0] - hw, v[0] + hw, v[1] - hh, v[1] + hh
    lo_x, lo_y = v[1] >= v[3], v[0] >= v[2]          # ONNX Runtime's MaxMin: (min, max) so
    return select(lo_x, v[3], v[1]), select(lo_x, v[1], v[3]), select(lo_y, v[2], v[0]), select(lo_y, v[0], v[2])


def _larger(a, b):
    """std::max(a, b), as ONNX Runtime's IoU takes it (a compare and a select, no libm call)."""
    return select(a < b, b, a)


def _smaller(a, b):
    return select(b < a, b, a)


def sift_down(b, heap, start, size, capacity: int, before) -> None:
    """Restore the heap property of heap[0:size] (every parent comes `before` its children)
    below heap[start]: at most log2(capacity) + 1 swaps down; once it settles, the remaining
    steps of the (static) loop only test a flag."""
    pos = b.local("pos", start)
    moving = b.local("moving", const(True, np.bool_))
    with b.loop(max(int(np.ceil(np.log2(capacity + 1))), 1), "depth"):
        with b.if_(moving):
            left = b.local("child", 2 * pos + 1)
            best = b.local("best", pos)
            for child in (left, left + 1):
                with b.if_(binop("&&", child < size, before(Load(heap, child), Load(heap, best)))):
                    b.assign(best, child)
            b.assign(moving, binop("!=", best, pos))
            with b.if_(moving):
                held = b.local("held", Load(heap, pos))
                b.store(heap, pos, Load(heap, best))
                b.store(heap, best, held)
                b.assign(pos, best)


def _lower_nms(node, ctx):
    """Per batch and class (independent: a thread or work-item each): the boxes scoring above
    the threshold in a heap ordered by score (the lower index first on ties), taken from it
    best first unless one already taken overlaps it by more than iou_threshold, until the most
    per class are taken or none is left; only the boxes looked at leave the heap (as ONNX
    Runtime's priority queue). Each class writes its rows [batch, class, box] into its own
    block of the output, and one pass then moves the blocks' rows together in (batch, class)
    order; the count goes to the count output."""
    Boxes, Scores, Y, C = ctx.ins[0], ctx.ins[1], ctx.outs[0], ctx.outs[count_position(node)]
    nb, ncls, n, most = _nms_dims(node, [ctx.value(k) for k in range(len(node.inputs))])
    center = bool(int(node.attr("center_point_box", 0)))
    b = ctx.b
    b.comment(f"NonMaxSuppression: {nb} batch(es) x {ncls} class(es) x {n} boxes, at most {most} kept per class")
    if most == 0:
        b.store(C, const(0), const(0))
        return
    iou_t = Load(ctx.ins[3], const(0)) if ctx.has_input(3) and ctx.ins[3].size else const(0.0, Scores.value_dtype)
    iou_t = b.local("iou_threshold", iou_t)
    has_score_t = ctx.has_input(4) and ctx.ins[4].size > 0
    score_t = b.local("score_threshold", Load(ctx.ins[4], const(0))) if has_score_t else None
    heap = ctx.scratch((n,), np.int64, "candidates")
    kept = ctx.scratch((most, 5), Boxes.value_dtype, "kept")     # x_min, x_max, y_min, y_max, area
    per_class = ctx.scratch((nb * ncls,), np.int64, "kept_per_class")
    b.comment("each class apart (in parallel), its rows in its own block of the output")
    with b.loops([nb, ncls], ["bi", "ci"], role=SPATIAL, private=[heap, kept]) as (bi, ci):
        sbase = (bi * ncls + ci) * n
        block = (bi * ncls + ci) * most
        found = b.local("found", const(0))
        with b.loop(n, "i") as i:
            if score_t is None:
                b.store(heap, found, i)
                b.assign(found, found + 1)
            else:
                with b.if_(Load(Scores, sbase + i) > score_t):
                    b.store(heap, found, i)
                    b.assign(found, found + 1)

        def before(p, q):         # box p comes before box q: a higher score, or equal and a lower index
            sp, sq = Load(Scores, sbase + p), Load(Scores, sbase + q)
            return binop("||", sp > sq, binop("&&", sp.eq(sq), p < q))

        with b.loop(found // 2, "h") as h:
            sift_down(b, heap, found // 2 - 1 - h, found, n, before)
        left = b.local("left", found)
        taken = b.local("taken", const(0))
        with b.loop(found, "t"):
            with b.if_(taken < most):
                box = b.local("box", Load(heap, const(0)))
                b.assign(left, left - 1)
                b.store(heap, const(0), Load(heap, left))
                sift_down(b, heap, const(0), left, n, before)
                ax0, ax1, ay0, ay1 = (b.local(h, e) for h, e in zip(
                    ("ax0", "ax1", "ay0", "ay1"), _box_edges(b, Boxes, (bi * n + box) * 4, center, "a")))
                area = b.local("area", (ax1 - ax0) * (ay1 - ay0))
                keep = b.local("keep", const(True, np.bool_))
                # suppressed by a kept box overlapping it by more than the threshold (intersection
                # over union); never by a disjoint box or a box of no area, as the reference says
                with b.loop(taken, "s") as s:
                    k = [Load(kept, s * 5 + e) for e in range(5)]
                    ix0, ix1 = b.local("ix0", _larger(ax0, k[0])), b.local("ix1", _smaller(ax1, k[1]))
                    iy0, iy1 = b.local("iy0", _larger(ay0, k[2])), b.local("iy1", _smaller(ay1, k[3]))
                    with b.if_(binop("&&", keep, binop("&&", ix1 > ix0, iy1 > iy0))):
                        inter = b.local("inter", (ix1 - ix0) * (iy1 - iy0))
                        union = b.local("union_area", area + k[4] - inter)
                        zero = const(0.0, inter.dtype)
                        tests = [inter > zero, area > zero, k[4] > zero, union > zero, inter / union > iou_t]
                        overlaps = tests[0]
                        for t_ in tests[1:]:
                            overlaps = binop("&&", overlaps, t_)
                        with b.if_(overlaps):
                            b.assign(keep, const(False, np.bool_))
                with b.if_(keep):
                    for e, v in enumerate((ax0, ax1, ay0, ay1, area)):
                        b.store(kept, taken * 5 + e, v)
                    for e, v in enumerate((bi, ci, box)):
                        b.store(Y, (block + taken) * 3 + e, v)
                    b.assign(taken, taken + 1)
        b.store(per_class, bi * ncls + ci, taken)
    b.comment("the classes' rows together, in order (each row moves down or stays), zeros after them")
    rows = b.local("rows", const(0))
    with b.loop(nb * ncls, "cls") as cls:
        with b.loop(Load(per_class, cls), "r") as r:
            for e in range(3):
                b.store(Y, (rows + r) * 3 + e, Load(Y, (cls * most + r) * 3 + e))
        b.assign(rows, rows + Load(per_class, cls))
    with b.loop(nb * ncls * most * 3, "z", start=rows * 3) as z:
        b.store(Y, z, const(0, Y.dtype))
    b.store(C, const(0), rows)


register("NonMaxSuppression", lower=_lower_nms, bounded=_nms_bounds, accepts_epilogue=False,
         how="kernel (a heap per class, greedy selection from it); its output's row count is known only "
             "after a run")(_nms_types)


# ----------------------------------------------------------------------------- aotc.Count
def _lower_count(node, ctx):
    """A count computed from others (passes/bounded.py derive_count): rows start:end (start >=
    0, step 1) of a run-time axis, as a Python slice counts them (min(end, rows) - min(start,
    rows), end < 0 counting from rows); or the sum of the counts plus `add`."""
    b = ctx.b
    if node.attr("start") is None:
        total = const(int(node.attr("add", 0)))
        for buf in ctx.ins:
            total = total + Load(buf, const(0))
        b.store(ctx.outs[0], const(0), total)
        return
    rows = b.local("rows", Load(ctx.ins[0], const(0)))
    start, end = int(node.attr("start")), int(node.attr("end"))
    stop = minimum(const(end), rows) if end >= 0 else maximum(rows + end, const(0))
    b.store(ctx.outs[0], const(0), maximum(stop - minimum(const(start), rows), const(0)))


register(COUNT, lower=_lower_count, accepts_epilogue=False,
         how="a count of rows computed from others (passes/bounded.py derive_count)")(
    lambda node, ins: [(dtypes.INT64, (1,))])


# ----------------------------------------------------------------------------- aotc.ConcatRows
def _concat_rows_dims(node, ins):
    counted = node.attr(RUN_TIME_CONCAT)
    data = ins[:len(counted)]
    axis = norm_axis(int(node.attr("axis")), len(data[0].shape), node)
    return counted, data, axis


def _concat_rows_types(node, ins):
    _, data, axis = _concat_rows_dims(node, ins)
    shape = list(data[0].shape)
    shape[axis] = sum(v.shape[axis] for v in data)
    return [(data[0].dtype, tuple(shape))]


def _lower_concat_rows(node, ctx):
    """Concat along a run-time axis: each input's rows (all of its capacity, in the order of
    the inputs) start where the previous input's count ends, so a later input overwrites the
    earlier one's padding; zeros after the last."""
    counted, _, axis = _concat_rows_dims(node, [ctx.value(k) for k in range(len(node.inputs))])
    Y, b = ctx.outs[0], ctx.b
    data = ctx.ins[:len(counted)]
    counts = iter(ctx.ins[len(counted):])
    pre, total, post = prod(Y.shape[:axis]), Y.shape[axis], prod(Y.shape[axis + 1:])
    at = b.local("at", const(0))
    for X, c in zip(data, counted):
        cap = X.shape[axis]
        b.comment(f"{X.name}: its {'run-time count' if c else cap} rows from row `at`")
        with b.loops([pre, cap, post], ["p", "r", "q"]) as (p, r, q):
            b.store(Y, (p * total + at + r) * post + q, Load(X, (p * cap + r) * post + q))
        b.assign(at, at + (Load(next(counts), const(0)) if c else const(cap)))
    with b.loops([pre], ["p"]) as (p,):
        with b.loop(total * post, "z", start=at * post) as z:
            b.store(Y, p * total * post + z, const(0, Y.dtype))


register(CONCAT_ROWS, lower=_lower_concat_rows, accepts_epilogue=False, bounded_rule="concat",
         how="Concat along a run-time axis (passes/bounded.py)")(_concat_rows_types)
