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
    4-D static shape; it may be read only by those ops and, as their input, by convolutions
    that can take it channels-last;
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

import numpy as np

from ..ir import dtypes
from ..ir.dims import is_static
from ..ir.graph import Graph, Node
from ..ir.internal import CHANNELS_LAST_CONV
from ..ir.verify import verify
from ..ops import registry
from ..ops.window import conv_parts
from ..targets import Target

_POINTWISE, _DEPTHWISE = "1x1", "depthwise"


def channels_last(g: Graph, target: Target | None) -> Graph:
    """g with the groups around depthwise convolutions channels-last (the module's doc)."""
    if target is None or target.is_gpu or target.numerics.bf16 or target.numerics.planar:
        return g
    kinds = {id(n): k for n in g.nodes if (k := _conv_kind(g, n)) is not None}
    if not any(k == _DEPTHWISE for k in kinds.values()):
        return g
    producers, consumers = g.producers(), g.consumers()
    groups = {}                                 # id(conv) -> its output's group (values), or None
    readers = {}                                # id(conv) -> the convolutions reading its group
    for n in g.nodes:
        if id(n) in kinds:
            groups[id(n)], readers[id(n)] = _group(g, n, kinds, consumers)
    source = {}                                 # id(conv) -> the conv whose group it reads
    for n in g.nodes:
        if id(n) in kinds:
            src = _source(g, n.inputs[0], producers)
            if src is not None and id(src) in kinds and groups[id(src)] is not None:
                source[id(n)] = src
    depthwise = {i for i, k in kinds.items() if k == _DEPTHWISE and i in source and groups[i] is not None}
    while True:
        last = {i for d in depthwise for i in (d, id(source[d]))}     # convolutions whose group goes
        bad = set()
        for d in depthwise:
            for owner in (d, id(source[d])):
                ok_owner = kinds[owner] == _POINTWISE or owner in depthwise
                ok_readers = all(kinds[id(r)] == _POINTWISE or id(r) in depthwise for r in readers[owner])
                if not (ok_owner and ok_readers):
                    bad.add(d)
        if not bad:
            break
        depthwise -= bad
    if not depthwise:
        return g
    x_last = {i for i in source if id(source[i]) in last}
    for owner in last:
        for name in groups[owner]:
            v = g.values[name]
            N, C, H, W = v.shape
            v.shape = (N, H, W, C)
    rewritten = []
    for n in g.nodes:
        i = id(n)
        if i in kinds and (i in last or i in x_last):
            n = _rewrite(g, n, kinds[i], i in x_last, i in last)
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


def _group(g: Graph, conv: Node, kinds: dict, consumers: dict) -> tuple[list[str] | None, list[Node]]:
    """(the values of conv's output group, the convolutions reading it), or (None, []) where
    the group cannot go channels-last."""
    out = conv.outputs[0]
    shape = g.values[out].shape
    values, readers, todo = [], [], [out]
    while todo:
        name = todo.pop()
        v = g.values[name]
        if name in g.outputs or v.dtype != dtypes.FLOAT32 or tuple(v.shape) != tuple(shape):
            return None, []
        values.append(name)
        for r in consumers.get(name, []):
            if id(r) in kinds and r.inputs[0] == name and name not in r.inputs[1:]:
                readers.append(r)
            elif _layout_free(g, r) and r.inputs[0] == name and name not in r.inputs[1:]:
                todo.append(r.outputs[0])
            else:
                return None, []
    return values, readers


def _source(g: Graph, name: str, producers: dict) -> Node | None:
    """The convolution whose group holds `name`: up through layout-free ops to a Conv."""
    while True:
        p = producers.get(name)
        if p is None:
            return None
        if p.op_type == "Conv":
            return p
        if not _layout_free(g, p):
            return None
        name = p.inputs[0]


def _rewrite(g: Graph, n: Node, kind: str, x_last: bool, y_last: bool) -> Node:
    inputs = list(n.inputs)
    if kind == _DEPTHWISE:
        w = g.const(n.inputs[1])                     # (C, 1, KH, KW) -> (KH, KW, C)
        inputs[1] = g.add_const(np.ascontiguousarray(w[:, 0].transpose(1, 2, 0)), f"{n.inputs[1]}_last")
    attrs = dict(n.attrs)
    attrs["x_last"], attrs["y_last"] = int(x_last), int(y_last)
    if kind == _DEPTHWISE:
        attrs["group"] = int(n.attr("group", 1))
    return Node(CHANNELS_LAST_CONV, inputs, list(n.outputs), attrs, n.name)
