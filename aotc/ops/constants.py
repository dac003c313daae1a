"""Ops whose result is known at compile time once shapes are static: Constant, Shape, Size,
ConstantOfShape. Inference gives their type; folding (ONNX reference) gives their value.
ConstantOfShape is only folded when small; larger ones get a fill kernel."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.dims import Dim
from ..ir.internal import ASSUME_SIZES, SIZE_VALUES, SIZES_ATTR
from ..kernel.ir import SPATIAL, cast, const, dim_expr
from .common import ints
from .registry import register


def _constant_value(node) -> np.ndarray:
    a = node.attrs
    if "value" in a:
        v = np.asarray(a["value"])
    elif "value_float" in a:
        v = np.float32(a["value_float"])
    elif "value_floats" in a:
        v = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        v = np.int64(a["value_int"])
    elif "value_ints" in a:
        v = np.array(a["value_ints"], np.int64)
    else:
        raise UnsupportedError([f"Constant node {node.name!r} with attributes {sorted(a)}"])
    return np.asarray(v, order="C")


@register("Constant", fold=lambda node, ins: [_constant_value(node)])
def _constant(node, ins):
    v = _constant_value(node)
    return [(dtypes.from_onnx(dtypes.to_onnx(v.dtype)), tuple(v.shape))]


def _shape_range(node, rank):
    start = int(node.attr("start", 0))
    end = node.attr("end", None)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = rank if end is None else max(0, min(rank, int(end) + rank if int(end) < 0 else int(end)))
    return start, max(start, end)


def _fold_shape(node, ins):
    s, e = _shape_range(node, len(ins[0].shape))
    return [np.array(ins[0].shape[s:e], dtype=np.int64)]


@register("Shape", fold=_fold_shape, bounded_rule="shape")
def _shape(node, ins):
    s, e = _shape_range(node, len(ins[0].shape))
    return [(dtypes.INT64, (e - s,))]


@register("Size", fold=lambda node, ins: [np.array(ins[0].size, dtype=np.int64)], bounded_rule="size")
def _size(node, ins):
    return [(dtypes.INT64, ())]


def _lower_constant_of_shape(node, ctx):
    y = ctx.outs[0]
    v = node.attr("value")
    fill = np.asarray(v).reshape(-1)[0].item() if v is not None else 0.0
    with ctx.b.loop(y.size, "i", role=SPATIAL) as i:
        ctx.b.store(y, i, const(fill, y.dtype))


@register("ConstantOfShape", lower=_lower_constant_of_shape, large_output=True, run_time_dims=True,
          shape_inputs=frozenset({0}))
def _constant_of_shape(node, ins):
    if ins[0].const is None and ins[0].sym is None:
        raise ShapeError(f"ConstantOfShape node {node.name!r}: the shape input must be known at compile time",
                         "bind it with --const, or fix input shapes with --shape")
    v = node.attr("value")
    dt = np.asarray(v).dtype if v is not None else np.dtype(np.float32)
    return [(dt, tuple(ints(ins[0].sym if ins[0].sym is not None else ins[0].const)))]


def _lower_size_values(node, ctx):
    """Each entry from the run's sizes of its run-time dimensions (ints as they are)."""
    y = ctx.outs[0]
    for k, d in enumerate(node.attr(SIZES_ATTR)):
        ctx.b.store(y, k, cast(dim_expr(d), y.dtype))


@register(SIZE_VALUES, lower=_lower_size_values, run_time_dims=True, reference_fold=False,
          how="sizes of run-time dimensions that an op reads as data (passes/symbolic.py)")
def _size_values(node, ins):
    return [(dtypes.from_name(node.attr("dtype")), tuple(node.attr("shape")))]


def _assumed(d, sizes: dict):
    """Dim d at the sizes given by symbol name where it has no other symbols; else d."""
    if isinstance(d, Dim) and all(sym.name in sizes for sym in d.symbols()):
        return d.evaluate(sizes)
    return d


def _lower_assume_sizes(node, ctx):
    """The input's elements as they are: under the guard that chose this copy the run's sizes
    are the assumed ones, so the input's dense layout is the output's."""
    x, y = ctx.ins[0], ctx.outs[0]
    n = 1
    for d in y.shape:
        n = n * d
    with ctx.b.loops([n], ["i"], role=SPATIAL) as (i,):
        ctx.b.store(y, i, x[i])


@register(ASSUME_SIZES, lower=_lower_assume_sizes, run_time_dims=True, reference_fold=False,
          how="a value of run-time size read where a guard has fixed the sizes (passes/control.py "
              "specialize_branch)")
def _assume_sizes(node, ins):
    sizes = dict(node.attr("sizes"))          # ((symbol name, size), ...)
    return [(ins[0].dtype, tuple(_assumed(d, sizes) for d in ins[0].shape))]
