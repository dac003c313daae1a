"""Ops that only re-label a dense buffer's shape: no code, an alias in the memory plan.
The `canonicalize_views` pass turns all of them into Reshape with a constant shape."""
from __future__ import annotations

from ..errors import ShapeError
from .common import const_ints, norm_axis, prod
from .registry import register


@register("Reshape", view=True, run_time_dims=True, shape_inputs=frozenset({1}))
def _reshape(node, ins):
    x = ins[0]
    spec = const_ints(node, ins, 1, "the target shape")
    allowzero = int(node.attr("allowzero", 0))
    out = []
    for k, d in enumerate(spec):
        if d == 0 and not allowzero:
            if k >= len(x.shape):
                raise ShapeError(f"Reshape node {node.name!r}: 0 at dim {k} copies a dim the input lacks")
            out.append(x.shape[k])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ShapeError(f"Reshape node {node.name!r}: more than one -1 in {spec}")
    if -1 in out:
        known = prod(d for d in out if d != -1)
        if known == 0 or x.size % known:
            raise ShapeError(f"Reshape node {node.name!r}: cannot reshape {x.shape} to {spec}")
        out[out.index(-1)] = x.size // known
    if prod(out) != x.size:
        raise ShapeError(f"Reshape node {node.name!r}: cannot reshape {x.shape} ({x.size} elements) to {tuple(out)}")
    return [(x.dtype, tuple(out))]


@register("Flatten", view=True, run_time_dims=True)
def _flatten(node, ins):
    x = ins[0]
    r = len(x.shape)
    axis = int(node.attr("axis", 1))
    axis = axis + r if axis < 0 else axis
    if not 0 <= axis <= r:
        raise ShapeError(f"Flatten node {node.name!r}: axis {axis} out of range for rank {r}")
    return [(x.dtype, (prod(x.shape[:axis]), prod(x.shape[axis:])))]


@register("Squeeze", view=True, run_time_dims=True)
def _squeeze(node, ins):
    x = ins[0]
    axes = const_ints(node, ins, 1, "axes")
    if axes is None:
        return [(x.dtype, tuple(d for d in x.shape if d != 1))]
    axes = {norm_axis(a, len(x.shape), node) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"Squeeze node {node.name!r}: dim {a} of {x.shape} is not 1")
    return [(x.dtype, tuple(d for k, d in enumerate(x.shape) if k not in axes))]


@register("Unsqueeze", view=True, run_time_dims=True)
def _unsqueeze(node, ins):
    x = ins[0]
    axes = const_ints(node, ins, 1, "axes")
    r = len(x.shape) + len(axes)
    axes = sorted(norm_axis(a, r, node) for a in axes)
    out = list(x.shape)
    for a in axes:
        out.insert(a, 1)
    return [(x.dtype, tuple(out))]
