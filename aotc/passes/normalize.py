"""Rewrite nodes written against older opsets into the form of NORMALIZED_OPSET, so op
definitions implement one version of each operator."""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..ir.graph import Graph, Node
from ..ir.internal import COERCE_2D, OPSET_ATTR
from ..ops.reference import NORMALIZED_OPSET


_REDUCE = ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _const_input(g: Graph, n: Node, pos: int, arr, hint: str) -> None:
    while len(n.inputs) < pos:
        n.inputs.append("")
    name = g.add_const(np.asarray(arr), f"{n.name}_{hint}")
    if len(n.inputs) == pos:
        n.inputs.append(name)
    else:
        n.inputs[pos] = name


def normalize_opset(g: Graph) -> Graph:
    g.source_opset = g.opset
    normalize_nodes(g, g.nodes)
    g.opset = NORMALIZED_OPSET
    return g


def normalize_nodes(g: Graph, nodes: list[Node]) -> None:
    """Rewrite `nodes` (in the model's opset, g.source_opset, or the one aotc's own rewrites
    marked them with: ir.graph.OPSET_ATTR) into the current attribute forms."""
    for n in nodes:
        t, a = n.op_type, n.attrs
        v = int(a.pop(OPSET_ATTR, g.source_opset))
        if t == "Clip" and v < 11:
            lo, hi = a.pop("min", None), a.pop("max", None)
            if lo is not None:
                _const_input(g, n, 1, np.float32(lo), "min")
            if hi is not None:
                _const_input(g, n, 2, np.float32(hi), "max")
        elif t in ("Squeeze", "Unsqueeze") and v < 13 and "axes" in a:
            _const_input(g, n, 1, np.array(a.pop("axes"), np.int64), "axes")
        elif t == "Split":
            if v < 13 and "split" in a:
                _const_input(g, n, 1, np.array(a.pop("split"), np.int64), "split")
            if (len(n.inputs) < 2 or not n.inputs[1]) and "num_outputs" not in a:
                a["num_outputs"] = len(n.outputs)
        elif t == "ReduceSum" and v < 13 and "axes" in a:
            _const_input(g, n, 1, np.array(a.pop("axes"), np.int64), "axes")
        elif t in _REDUCE and v < 18 and "axes" in a:
            _const_input(g, n, 1, np.array(a.pop("axes"), np.int64), "axes")
        elif t == "Slice" and v < 10:
            starts, ends = a.pop("starts"), a.pop("ends")
            axes = a.pop("axes", None)
            n.inputs = n.inputs[:1]
            _const_input(g, n, 1, np.array(starts, np.int64), "starts")
            _const_input(g, n, 2, np.array(ends, np.int64), "ends")
            if axes is not None:
                _const_input(g, n, 3, np.array(axes, np.int64), "axes")
        elif t == "Pad" and v < 11:
            pads = a.pop("pads", a.pop("paddings", None))
            value = a.pop("value", 0.0)
            _const_input(g, n, 1, np.array(pads, np.int64), "pads")
            _const_input(g, n, 2, np.float32(value), "value")
        elif t == "Upsample" or (t == "Resize" and v < 11):
            scales = a.pop("scales", None)
            mode = a.get("mode", "nearest")
            x = n.inputs[0]
            scale_in = n.inputs[1] if len(n.inputs) > 1 else ""
            n.op_type = "Resize"
            n.inputs = [x, ""]
            if scales is not None:
                _const_input(g, n, 2, np.array(scales, np.float32), "scales")
            else:
                n.inputs.append(scale_in)
            if isinstance(mode, bytes):
                mode = mode.decode()
            modes = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}
            if mode not in modes:
                raise UnsupportedError([f"{t} node {n.name!r} with mode {mode!r} (nearest, linear, bilinear "
                                        "and cubic are understood)"])
            a.clear()
            a["mode"] = modes[mode]
            a["coordinate_transformation_mode"] = "asymmetric"
            if a["mode"] == "nearest":
                a["nearest_mode"] = "floor"
        elif t == "TopK" and v < 10:
            _const_input(g, n, 1, np.array([a.pop("k")], np.int64), "k")
        elif t in ("Softmax", "LogSoftmax", "Hardmax") and v < 13:
            # before opset 13 these flattened the input to 2-D at `axis` (default 1)
            a.setdefault("axis", 1)
            a[COERCE_2D] = 1
        elif t == "BatchNormalization":
            for k in ("spatial", "is_test", "consumed_inputs", "momentum"):
                a.pop(k, None)
        elif t == "Dropout" and v < 12:
            a.pop("is_test", None)
            ratio = a.pop("ratio", None)
            if ratio is not None and len(n.inputs) < 2:
                _const_input(g, n, 1, np.float32(ratio), "ratio")
        elif t == "Scatter":
            n.op_type = "ScatterElements"
        elif t == "DFT" and v < 20:
            # opsets 17-19: axis is an attribute, default 1; from 20 an input, default -2
            _const_input(g, n, 2, np.array(int(a.pop("axis", 1)), np.int64), "axis")
        elif t == "RoiAlign" and v < 16:
            # opset 10 has no coordinate_transformation_mode: its rois are output_half_pixel
            a["coordinate_transformation_mode"] = "output_half_pixel"
