"""Channels-last tensors between the convolutions of a mobile network's blocks (CPU targets).

A MobileNet block is a 1x1 convolution that widens the channels, an activation, a depthwise
convolution, an activation, and a 1x1 convolution that narrows them again. Planes of channels
(N, C, H, W) suit the 1x1 convolutions (GEMMs either way) but not the depthwise one, which
works along rows of 7 to 56 positions; channels last (N, H, W, C) it works on whole vectors of
channels (ops/channels_last.py). So the values from a convolution to a depthwise one and from
a depthwise one to the next convolution are stored channels-last, when every node between them
allows it:

  * a *group* is a convolution's output and the values that follow it through elementwise
    ops whose other inputs are single constants (Clip, Relu, HardSwish...: the same op at
    every element, whatever the layout), none of them a graph output, all float32 of the same
    4-D static shape, and through the Muls of a squeeze-excitation (by one value a channel,
    (N, C, 1, 1), read channels-last as (N, 1, 1, C): a view); it may be read only by those
    ops, by convolutions that can take it channels-last, as their input, and by means over its
    planes (GlobalAveragePool, ReduceMean over H and W: over axes 1 and 2 channels-last, whose
    (N, 1, 1, C) is the (N, C, 1, 1) the rest of the graph reads: a view again);
  * a convolution can take and make channels-last tensors when it is float32 with constant
    weights on static 4-D shapes and is either 1x1 (stride 1, no padding, one group: a GEMM
    that reads and writes by strides) or depthwise (one input channel a group, as many output
    channels);
  * a depthwise convolution goes channels-last when the groups it reads and makes both can;
    those groups then are stored channels-last (and only those: a group between two 1x1
    convolutions gains nothing), which leaves the depthwise convolutions whose other group
    cannot as they were, until nothing changes.

Each such convolution becomes aotc.ChannelsLastConv (x_last / y_last: which side is
channels-last; a depthwise one's weights transposed to (KH, KW, C) at compile time), and the
values of a converted group change shape to (N, H, W, C). Graph inputs and outputs never do.
Not on GPU targets (their schedules were not measured with it), nor with the option bf16
(whose GEMMs are never computed transposed, and a channels-last C would be stored element by
element), nor with the option planar (the same values: tests compare the two)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import dtypes
from ..ir.dims import is_static
from ..ir.graph import Graph, Node, Value
from ..ir.internal import CHANNELS_LAST_CONV
from ..ir.verify import verify
from ..ops import registry
from ..ops.window import conv_parts
from ..targets import Target

_POINTWISE, _DEPTHWISE = "1x1", "depthwise"


@dataclass
class _Group:
    """A convolution's output and what follows it (the module's doc): `values`, the convolutions
    reading them (`readers`), the poolings over their planes (`pools`: GlobalAveragePool, or
    ReduceMean over both spatial axes keeping them) and the Muls by one value a channel
    (`scaled`: (node, the index of that operand))."""
    values: list = field(default_factory=list)
    readers: list = field(default_factory=list)
    pools: list = field(default_factory=list)
    scaled: list = field(default_factory=list)


def channels_last(g: Graph, target: Target | None) -> Graph:
    """g with the groups around depthwise convolutions channels-last (the module's doc)."""
    if target is None or target.is_gpu or target.numerics.bf16 or target.numerics.planar:
        return g
    kinds = {id(n): k for n in g.nodes if (k := _conv_kind(g, n)) is not None}
    if not any(k == _DEPTHWISE for k in kinds.values()):
        return g
    consumers = g.consumers()
    groups: dict[int, _Group | None] = {}       # id(conv) -> its output's group, None where it cannot go
    for n in g.nodes:
        if id(n) in kinds:
            groups[id(n)] = _group(g, n, kinds, consumers)
    source = {}                                 # id(conv) -> the conv whose group it reads
    for owner, grp in groups.items():
        for r in grp.readers if grp is not None else []:
            source[id(r)] = owner
    depthwise = {i for i, k in kinds.items() if k == _DEPTHWISE and i in source and groups[i] is not None}
    while True:
        # a depthwise convolution stays only where what makes its input, and every convolution
        # reading its input's group or its own, can go channels-last too
        ok = {i for i, k in kinds.items() if k == _POINTWISE} | depthwise
        bad = {d for d in depthwise if source[d] not in ok
               or any(id(r) not in ok for owner in (d, source[d]) for r in groups[owner].readers)}
        if not bad:
            break
        depthwise -= bad
    if not depthwise:
        return g
    last = {i for d in depthwise for i in (d, source[d])}      # convolutions whose group goes
    pools, scaled, moved = {}, {}, set()
    for owner in last:
        grp = groups[owner]
        for name in grp.values:
            if name in moved:                # (a value in two groups: the rules above allow none)
                raise AssertionError(f"channels_last: {name!r} is in two groups")
            moved.add(name)
            v = g.values[name]
            N, C, H, W = v.shape
            v.shape = (N, H, W, C)
        pools.update((id(p), p) for p in grp.pools)
        scaled.update((id(m), i) for m, i in grp.scaled)
    rewritten = []
    for n in g.nodes:
        i = id(n)
        if i in kinds and (i in last or source.get(i) in last):
            rewritten.append(_rewrite(g, n, kinds[i], source.get(i) in last, i in last))
        elif i in pools:
            rewritten += _pool_channels_last(g, n)
        elif i in scaled:
            rewritten += _scale_channels_last(g, n, scaled[i])
        else:
            rewritten.append(n)
    g.nodes = rewritten
    verify(g, "channels_last")
    return g


def _conv_kind(g: Graph, n: Node) -> str | None:
    """_POINTWISE or _DEPTHWISE where the Conv n can read and write channels-last tensors."""
    if n.op_type != "Conv" or len(n.inputs) < 2 or not n.inputs[0]:
        return None
    x = g.values[n.inputs[0]]
    w = g.const(n.inputs[1])
    bias = n.inputs[2] if len(n.inputs) > 2 else ""
    if w is None or (bias and g.const(bias) is None) or x.dtype != dtypes.FLOAT32 or len(x.shape) != 4 \
            or not is_static(x.shape) or n.outputs[0] in g.outputs:
        return None
    group, win = conv_parts(n, x.shape, w.shape)
    C, M = x.shape[1], w.shape[0]
    if group == 1 and list(win.kernel) == [1, 1] and list(win.strides) == [1, 1] \
            and not any(win.pads_begin) and not any(win.pads_end):
        return _POINTWISE
    if group == C == M and group > 1:
        return _DEPTHWISE
    return None


def _layout_free(g: Graph, n: Node) -> bool:
    """An elementwise op of one tensor, its other inputs single constants: the same at every
    element whatever the layout."""
    op = registry.get(n.op_type)
    if op is None or op.pointwise is None or len(n.outputs) != 1 or not n.inputs or not n.inputs[0]:
        return False
    rest = [i for i in n.inputs[1:] if i]
    return all(g.const(i) is not None and g.const(i).size == 1 for i in rest)


def _group(g: Graph, conv: Node, kinds: dict, consumers: dict) -> _Group | None:
    """The group of conv's output, or None where it cannot go channels-last."""
    out = conv.outputs[0]
    shape = g.values[out].shape
    grp, todo = _Group(), [out]
    while todo:
        name = todo.pop()
        v = g.values[name]
        if name in g.outputs or v.dtype != dtypes.FLOAT32 or tuple(v.shape) != tuple(shape):
            return None
        grp.values.append(name)
        for r in consumers.get(name, []):
            once = r.inputs.count(name) == 1
            if id(r) in kinds and r.inputs[0] == name and once:
                grp.readers.append(r)
            elif _layout_free(g, r) and r.inputs[0] == name and once:
                todo.append(r.outputs[0])
            elif _pools_planes(g, r) and r.inputs[0] == name and once:
                grp.pools.append(r)
            elif (k := _channel_operand(g, r, name, shape)) is not None:
                grp.scaled.append((r, k))
                todo.append(r.outputs[0])
            else:
                return None
    return grp


def _pools_planes(g: Graph, n: Node) -> bool:
    """A GlobalAveragePool, or a ReduceMean over axes 2 and 3 that keeps them, of a 4-D value:
    channels-last, a ReduceMean over axes 1 and 2 gives the same values in the same order."""
    if n.op_type == "GlobalAveragePool":
        return True
    if n.op_type != "ReduceMean" or len(n.inputs) < 2 or not int(n.attr("keepdims", 1)):
        return False
    axes = g.const(n.inputs[1])
    return axes is not None and sorted(int(a) % 4 for a in np.ravel(axes)) == [2, 3]


def _channel_operand(g: Graph, n: Node, name: str, shape) -> int | None:
    """Where n is a Mul of `name` by a value of one element per channel ((N or 1, C, 1, 1), a
    squeeze-excitation's scales), that operand's index."""
    if n.op_type != "Mul" or len(n.inputs) != 2 or n.inputs.count(name) != 1:
        return None
    k = 1 - n.inputs.index(name)
    other = g.values[n.inputs[k]]
    N, C = shape[0], shape[1]
    if tuple(shape[2:]) == (1, 1):
        return None          # (planes of one position: the scales could be a group's own value)
    if other.dtype == dtypes.FLOAT32 and len(other.shape) == 4 and other.shape[0] in (1, N) \
            and tuple(other.shape[1:]) == (C, 1, 1):
        return k
    return None


def _pool_channels_last(g: Graph, n: Node) -> list[Node]:
    """n's mean over a channels-last input's planes: a ReduceMean over axes 1 and 2, (N, 1, 1, C),
    which is n's (N, C, 1, 1) re-shaped (a view)."""
    out = g.values[n.outputs[0]]
    N, _, _, C = g.values[n.inputs[0]].shape
    mean = g.fresh_name(f"{n.outputs[0]}_last")
    g.add_value(Value(mean, out.dtype, (N, 1, 1, C)))
    axes = g.add_const(np.array([1, 2], np.int64), "axes")
    shape = g.add_const(np.array(out.shape, np.int64), "shape")
    return [Node("ReduceMean", [n.inputs[0], axes], [mean], {"keepdims": 1}, f"{n.name}_last"),
            Node("Reshape", [mean, shape], list(n.outputs), {}, f"{n.name}_planes")]


def _scale_channels_last(g: Graph, n: Node, k: int) -> list[Node]:
    """The Mul n with its per-channel operand k (N, C, 1, 1) re-shaped (N, 1, 1, C) (a view)."""
    s = g.values[n.inputs[k]]
    N, C = s.shape[0], s.shape[1]
    viewed = g.fresh_name(f"{n.inputs[k]}_last")
    g.add_value(Value(viewed, s.dtype, (N, 1, 1, C)))
    shape = g.add_const(np.array([N, 1, 1, C], np.int64), "shape")
    inputs = list(n.inputs)
    inputs[k] = viewed
    return [Node("Reshape", [n.inputs[k], shape], [viewed], {}, f"{n.name}_scales"),
            Node(n.op_type, inputs, list(n.outputs), dict(n.attrs), n.name, n.domain)]


def _rewrite(g: Graph, n: Node, kind: str, x_last: bool, y_last: bool) -> Node:
    inputs = list(n.inputs)
    if kind == _DEPTHWISE:
        w = g.const(n.inputs[1])                     # (C, 1, KH, KW) -> (KH, KW, C)
        inputs[1] = g.add_const(np.ascontiguousarray(w[:, 0].transpose(1, 2, 0)), f"{n.inputs[1]}_last")
    attrs = dict(n.attrs)
    attrs["x_last"], attrs["y_last"] = int(x_last), int(y_last)
    return Node(CHANNELS_LAST_CONV, inputs, list(n.outputs), attrs, n.name)
