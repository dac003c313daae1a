"""Bounded dimensions: outputs whose size depends on run-time values (NonZero, Compress on a
run-time condition, NonMaxSuppression, Unique), within a static memory plan.

Such an op's output has a static *capacity* (the most it can hold: NonZero of n elements finds
at most n) and a run-time *count* along one axis. The op's kernel writes its rows from the
start of that axis, fills the rest with zeros ("padding"), and writes the count into a value
of its own, an extra int64[1] output of the node named `<output>.count` (the host program
reads it after the run, so the memory plan keeps it to the end: memory/planner.py).

Every later tensor computed from a bounded one is bounded too, along the axes its rows map to,
and is computed over its whole capacity: the kernels need no run-time loop bounds, and the
padding rows hold values made from the zeros, which nothing valid reads. At a graph output
the host program writes each bounded output's shape into the outputs struct and moves its
rows together (aotc_compact in runtime/aotc_runtime.h) where the capacity layout and the
dense layout of the run's shape differ. This is only right where the padding can never
reach a valid row, so an op that would mix rows (a reduction over the bounded axis, a
Concat along it, a Reshape that merges it with another) or could be failed by padding (an
integer division by it, an index taken from padding that is not zero) is refused with the
node's name. So is every op with no rule here: the set below is what detection and masking
graphs use after these ops (Gather of the selected indices, Slice of their columns, Cast,
elementwise arithmetic, views, Transpose, Concat of columns, MatMul of rows).

`analyze(g)` (the last pass) finds the bounded values of the final graph: g.bounded maps a
value to {axis: count value}; infer_shapes runs the same rules node by node, so that a Shape
of a bounded dimension is refused instead of folded to the capacity."""
from __future__ import annotations

from typing import Callable, Optional

from ..ir import dtypes
from ..ir.bounded import Bound, fresh_count_name, refuse
from ..ir.graph import Graph, Node, Value
from ..ir.internal import COERCE_2D, CONCAT_ROWS, COUNT, DERIVED_COUNTS, RUN_TIME_AXES, RUN_TIME_CONCAT
from ..ops import registry
from ..ops.common import norm_axis, prod




Rule = Callable[[Graph, Node, list, list], list]


def node_bounds(g: Graph, n: Node, bounds: dict[str, Bound]) -> list[Optional[Bound]]:
    """The Bound of each output of n given its inputs' (None: not bounded); raises Refusal
    for a use of a bounded value this module has no rule for."""
    ins = [g.values[i] if i else None for i in n.inputs]
    marks = [bounds.get(i) if i else None for i in n.inputs]
    op = registry.get(n.op_type)
    source = getattr(op, "bounded", None) if op is not None else None
    if source is not None:
        return source(g, n, ins, marks)
    if not any(marks) and RUN_TIME_AXES not in n.attrs:     # (an Expand's, see _expand)
        return [None] * len(n.outputs)
    shaped = [k for k, m in enumerate(marks) if m is not None and m.shape]
    if shaped and (n.op_type != "Expand" or shaped != [1]):
        raise refuse(n, f"computes with {n.inputs[shaped[0]]!r}, the shape of a tensor whose size is known only at "
                        "run time (aotc's shapes are compile-time constants)")
    kind = op.bounded_rule if op is not None else ""
    if not kind and op is not None:
        kind = "pointwise" if op.pointwise is not None else "view" if op.view else ""
    rule = BOUNDED_RULES.get(kind)
    if rule is None:
        b = next((i, m) for i, m in zip(n.inputs, marks) if m)
        raise refuse(n, f"reads {b[0]!r}, whose dimension(s) {sorted(b[1].axes)} are known only at run time")
    return rule(g, n, ins, marks)


def check_outputs(g: Graph, bounds: dict[str, Bound]) -> None:
    """A graph output may not be a shape with run-time entries (folded, it would be the capacity)."""
    for o in g.outputs:
        b = bounds.get(o)
        if b is not None and b.shape:
            p = g.producers().get(o)
            node = p if p is not None else Node("Shape", [], [o], name=o)
            raise refuse(node, f"outputs the shape {o!r} of a tensor whose size is known only at run time (aotc's "
                               "shapes are compile-time constants)")


def analyze(g: Graph) -> Graph:
    """g.bounded for the final graph (the last pass: it sees every node that will be lowered),
    and the aotc.Count nodes computing derived counts (derive_count) placed after their nodes."""
    bounds: dict[str, Bound] = {}
    made = {o for n in g.nodes if n.op_type == COUNT for o in n.outputs}
    nodes = []
    for n in g.nodes:
        nodes.append(n)
        for o, b in zip(n.outputs, node_bounds(g, n, bounds)):
            if o and b is not None and b.axes:
                bounds[o] = b
        for name, counts, params in n.attrs.get(DERIVED_COUNTS, ()):
            if name not in made:
                g.add_value(Value(name, dtypes.INT64, (1,)))
                nodes.append(Node(COUNT, list(counts), [name], dict(params), f"{n.name}/count"))
                made.add(name)
        if n.op_type == "Concat" and RUN_TIME_CONCAT in n.attrs:
            # its rows go to offsets known at run time: the counts become inputs of its kernel
            n.op_type = CONCAT_ROWS
            n.inputs = list(n.inputs) + [c for c in n.attrs[RUN_TIME_CONCAT] if c]
    g.nodes = nodes
    g.bounded = {v: dict(b.axes) for v, b in bounds.items() if not b.shape}
    return g


# ----------------------------------------------------------------------------- rules
def _out_shape(g: Graph, n: Node, k: int = 0) -> tuple:
    return tuple(g.values[n.outputs[k]].shape)


def _pointwise(g, n, ins, marks):
    """Broadcasting: an input's axis a is the output's axis a + (rank_out - rank_in)."""
    out = _out_shape(g, n)
    r = len(out)
    axes: dict[int, str] = {}
    for v, m in zip(ins, marks):
        if m is None:
            continue
        for a, c in m.axes.items():
            oa = a + r - len(v.shape)
            if v.shape[a] != out[oa]:
                raise refuse(n, f"broadcasts {v.name!r} along its run-time dimension {a}")
            if axes.setdefault(oa, c) != c:
                raise refuse(n, f"combines two run-time dimensions of different counts on axis {oa}")
    for v, m in zip(ins, marks):
        if v is None:
            continue
        off = r - len(v.shape)
        for oa, c in axes.items():
            a = oa - off
            if 0 <= a < len(v.shape) and v.shape[a] != 1 and (m is None or m.axes.get(a) != c):
                raise refuse(n, f"combines {v.name!r} (size {v.shape[a]} on axis {a}) with a dimension known "
                                "only at run time")
    if n.op_type in ("Div", "Mod") and marks[1] is not None and ins[1].dtype.kind in "iu":
        raise refuse(n, "divides integers by a tensor whose padding rows are zero")
    keeps = registry.get(n.op_type).keeps_zero
    keeps = keeps(n) if callable(keeps) else keeps
    zero = keeps and marks[0] is not None and marks[0].zero       # (unary ops)
    return [Bound(dict(axes), zero)] + [None] * (len(n.outputs) - 1)


def _view(g, n, ins, marks):
    """Reshape & co: a run-time axis must stay one axis, with the same elements before it."""
    src, m = ins[0], marks[0]
    out = _out_shape(g, n)
    axes = {}
    for a, c in m.axes.items():
        before = prod(src.shape[:a])
        hit = [b for b in range(len(out)) if out[b] == src.shape[a] and prod(out[:b]) == before]
        if not hit:
            raise refuse(n, f"merges or splits {src.name!r}'s run-time dimension {a}")
        axes[hit[0]] = c
    return [Bound(axes, m.zero)]


def _transpose(g, n, ins, marks):
    r = len(ins[0].shape)
    perm = [int(p) % r for p in n.attr("perm", list(range(r - 1, -1, -1)))]
    return [Bound({perm.index(a): c for a, c in marks[0].axes.items()}, marks[0].zero)]


def _slice(g, n, ins, marks):
    """Other axes as they are; a run-time axis whole, or rows start:end of it (start >= 0, step
    1: the first k detections), whose count is then min(end, count) - min(start, count) (end
    < 0 counting from the count), computed by an aotc.Count node after the Slice (derive_count).
    The copy itself runs over the capacity: its padding rows come from the input's."""
    from ..ops.tensor import _slice_args, _slice_plan
    from ..ops.common import const_ints
    if any(marks[1:]):
        raise refuse(n, "takes its starts, ends, axes or steps from a tensor known only at run time")
    x = ins[0]
    args = _slice_args(n, lambda p, w: const_ints(n, ins, p, w))
    plan = _slice_plan(n, x.shape, *args)
    starts, ends, axes_, steps = args
    axes_ = list(range(len(starts))) if axes_ is None else [norm_axis(a, len(x.shape), n) for a in axes_]
    out = dict(marks[0].axes)
    for a, c in marks[0].axes.items():
        if plan[a] == (0, 1, x.shape[a]):
            continue
        k = axes_.index(a)
        start, end, step = starts[k], ends[k], 1 if steps is None else steps[k]
        if step != 1 or start < 0:
            raise refuse(n, f"slices {x.name!r} along its run-time dimension {a} with a step other than 1 or a "
                            "start counted from the end")
        out[a] = derive_count(g, n, (c,), start=start, end=end)
    return [Bound(out, marks[0].zero)]


def derive_count(g: Graph, n: Node, counts: tuple, **params) -> str:
    """The name of a count computed from other counts after n by an aotc.Count node (analyze
    inserts it; `_derived_counts` on n lists them): rows start:end of one count (Slice), or the
    sum of several plus `add` (Concat along a run-time axis)."""
    key = (tuple(counts), tuple(sorted(params.items())))
    entries = n.attrs.get(DERIVED_COUNTS, ())
    for name, *rest in entries:
        if tuple(rest) == key:
            return name
    name = fresh_count_name(g, n.outputs[0], {e[0] for e in entries})
    n.attrs[DERIVED_COUNTS] = tuple(entries) + ((name, *key),)
    return name


def _gather(g, n, ins, marks):
    data, idx = ins[0], ins[1]
    axis = norm_axis(int(n.attr("axis", 0)), len(data.shape), n)
    axes = {}
    if marks[0] is not None:
        if axis in marks[0].axes:
            raise refuse(n, f"gathers along {data.name!r}'s run-time dimension {axis}")
        for a, c in marks[0].axes.items():
            axes[a if a < axis else a + len(idx.shape) - 1] = c
    if marks[1] is not None:
        _index_padding(n, idx, marks[1], data.shape[axis])
        axes.update({a + axis: c for a, c in marks[1].axes.items()})
    zero = marks[1] is None and marks[0] is not None and marks[0].zero
    return [Bound(axes, zero)]


def _index_padding(n, idx: Value, m: Bound, size: int) -> None:
    """Indices with padding rows are read there too: only zeros are safe (and only in a
    non-empty dimension), as the indices a source op writes are."""
    if not m.zero:
        raise refuse(n, f"takes indices from {idx.name!r}, which has run-time rows computed from padding "
                        "(only indices as NonZero, NonMaxSuppression or Unique write them, or Slices, Gathers "
                        "and Casts of those, can be used)")
    if size == 0:
        raise refuse(n, "takes run-time indices into an empty dimension")


def _gather_nd(g, n, ins, marks):
    data, idx = ins[0], ins[1]
    if marks[0] is not None:
        raise refuse(n, f"gathers from {data.name!r}, which has a run-time dimension")
    bd = int(n.attr("batch_dims", 0))
    m = marks[1]
    if bd or len(idx.shape) - 1 in m.axes:
        raise refuse(n, "has a run-time index depth or batch dimensions")
    depth = idx.shape[-1]
    _index_padding(n, idx, m, min(data.shape[:depth], default=1))
    return [Bound(dict(m.axes), False)]


def _concat(g, n, ins, marks):
    """Along another axis: the inputs share their run-time axes. Along a run-time axis: each
    input's rows follow the previous input's count (aotc.ConcatRows, which analyze makes of the
    node: `_run_time_concat` lists each input's count, "" for a static one), the total a derived
    count, zeros after it."""
    out = _out_shape(g, n)
    axis = norm_axis(int(n.attr("axis")), len(out), n)
    data = len(n.attrs.get(RUN_TIME_CONCAT, ())) or len(ins)     # (aotc.ConcatRows: counts after)
    ins, marks = ins[:data], marks[:data]
    others: Optional[dict] = None
    for v, m in zip(ins, marks):
        have = {a: c for a, c in (m.axes if m is not None else {}).items() if a != axis}
        if others is None:
            others = have
        elif others != have:
            raise refuse(n, "concatenates tensors that do not share the same run-time dimensions")
    along = [m.axes.get(axis) if m is not None else None for m in marks]
    if not any(along):
        return [Bound(others or {}, all(m is not None and m.zero for m in marks))]
    n.attrs[RUN_TIME_CONCAT] = tuple(c or "" for c in along)
    fixed = sum(v.shape[axis] for v, c in zip(ins, along) if c is None)
    total = derive_count(g, n, tuple(c for c in along if c), add=fixed)
    return [Bound({**(others or {}), axis: total}, True)]


def _matmul(g, n, ins, marks):
    a, bm = marks[0], marks[1]
    if bm is not None or a is None or len(ins[0].shape) < 2 or len(ins[1].shape) > len(ins[0].shape) \
            or len(ins[0].shape) - 1 in a.axes:
        raise refuse(n, "has a run-time dimension other than the rows (or batch) of its first input")
    return [Bound(dict(a.axes), False)]


def _shape(g, n, ins, marks):
    r = len(ins[0].shape)

    def clamp(x):
        x = int(x)
        return max(0, min(r, x + r if x < 0 else x))
    start, end = clamp(n.attr("start", 0)), clamp(n.attr("end", r))
    hit = {a - start: c for a, c in marks[0].axes.items() if start <= a < end}
    return [Bound(hit, shape=True) if hit else None]


def _size(g, n, ins, marks):
    raise refuse(n, f"asks for the size of {ins[0].name!r}, known only at run time")


def _along(n, ins, marks, reduced: set, keep: bool):
    """Ops that work along some axes of their first input (reductions, Softmax, ArgMax,
    TopK): the bounded axes must not be among them, except for a sum-like reduction of a
    zero-padded input (OpDef.zero_blind); the others keep their place, or close up over the
    reduced ones without keepdims."""
    m = marks[0]
    blind = registry.get(n.op_type).zero_blind
    if any(marks[1:]):
        raise refuse(n, "takes an axis, k or another parameter from a tensor known only at run time")
    hit = sorted(set(m.axes) & reduced)
    if hit and not (blind and m.zero):
        why = " (its padding is not zero)" if blind else ""
        raise refuse(n, f"works along {ins[0].name!r}'s run-time dimension(s) {hit}{why}")
    axes = {a if keep else a - sum(r < a for r in reduced): c for a, c in m.axes.items() if a not in reduced}
    return [Bound(axes, False)] + [Bound(dict(axes), False) for _ in n.outputs[1:]]


def _reduce(g, n, ins, marks):
    from ..ops.reduce import _reduce_axes
    axes = _reduce_axes(n, ins)
    return _along(n, ins, marks, set(axes or ()), axes is None or bool(int(n.attr("keepdims", 1))))


def _one_axis(g, n, ins, marks):
    r = len(ins[0].shape)
    axis = norm_axis(int(n.attr("axis", -1 if n.op_type in ("Softmax", "LogSoftmax", "Hardmax", "TopK") else 0)),
                     r, n)
    if int(n.attr(COERCE_2D, 0)):        # opset < 13 Softmax: over the flattened axis..end
        return _along(n, ins, marks, set(range(axis, r)), True)
    keep = n.op_type not in ("ArgMax", "ArgMin") or bool(int(n.attr("keepdims", 1)))
    return _along(n, ins, marks, {axis}, keep)


def _gemm(g, n, ins, marks):
    a, bm = marks[0], marks[1]
    rows = 1 if int(n.attr("transA", 0)) else 0
    if a is None or bm is not None or set(a.axes) != {rows}:
        raise refuse(n, "has a run-time dimension other than the rows of A")
    count = a.axes[rows]
    if len(marks) > 2 and marks[2] is not None:
        c, cm = ins[2], marks[2]
        if len(c.shape) != 2 or cm.axes != {0: count}:
            raise refuse(n, "adds a C whose run-time dimension is not A's rows")
    return [Bound({0: count}, False)]


def _expand(g, n, ins, marks):
    """Expand to a shape whose entries at run-time axes are counts (while shape inference sees
    the Shape: it records them in the node's `_run_time_axes`), or 1 there (a bounded input
    keeps its size); the input at such an axis either has that count or size 1."""
    v, m = ins[0], marks[0]
    out = _out_shape(g, n)
    r, off = len(out), len(out) - len(v.shape)
    if len(marks) > 1 and marks[1] is not None:
        n.attrs[RUN_TIME_AXES] = tuple(sorted((p + r - ins[1].shape[0], c) for p, c in marks[1].axes.items()))
    recorded = dict(n.attrs.get(RUN_TIME_AXES, ()))
    axes, zero = dict(recorded), m is not None and m.zero
    for oa, c in recorded.items():
        a = oa - off
        if 0 <= a < len(v.shape) and not (m is not None and m.axes.get(a) == c):
            if v.shape[a] != 1 or (m is not None and a in m.axes):
                raise refuse(n, f"expands {v.name!r} (size {v.shape[a]} on axis {a}) to a size known only at run time")
            zero = False                  # padding rows are copies of the one row
    if m is not None:
        shape = None if ins[1].const is None else [int(d) for d in ins[1].const.reshape(-1)]
        for a, c in m.axes.items():
            oa = a + off
            if oa in recorded:
                continue
            entry = 1 if shape is None or oa < r - len(shape) else shape[oa - (r - len(shape))]
            if shape is None or entry != 1:
                raise refuse(n, f"expands {v.name!r}'s run-time dimension {a} to a size fixed at compile time")
            axes[oa] = c
    return [Bound(axes, zero)]


# the rules an op's registry entry names (OpDef.bounded_rule; elementwise ops and views have
# theirs without naming it): how its outputs follow inputs of run-time size
BOUNDED_RULES: dict[str, Rule] = {
    "pointwise": _pointwise,
    "view": _view,
    "transpose": _transpose,
    "slice": _slice,
    "gather": _gather,
    "gather_nd": _gather_nd,
    "concat": _concat,
    "matmul": _matmul,
    "gemm": _gemm,
    "reduce": _reduce,
    "along_axis": _one_axis,
    "expand": _expand,
    "shape": _shape,
    "size": _size,
}


__all__ = ["analyze", "check_outputs", "node_bounds"]
