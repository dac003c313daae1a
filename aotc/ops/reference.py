"""Run one node on constant inputs with the ONNX reference implementation: the folding every op gets
without a fold of its own (passes/infer.py), and what some ops' own folds call."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir import dtypes
from ..ir.graph import Node

# After normalize_opset every node is in the form this opset defines.
NORMALIZED_OPSET = 21


def node_proto(n: Node) -> onnx.NodeProto:
    attrs = {}
    for k, v in n.attrs.items():
        if k.startswith("_"):          # aotc's own annotations, not ONNX attributes
            continue
        if isinstance(v, np.ndarray):
            attrs[k] = numpy_helper.from_array(v)
        else:
            attrs[k] = v
    return helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, domain=n.domain or None, **attrs)


def _gather_elements(n: Node, data: np.ndarray, indices: np.ndarray) -> list[np.ndarray]:
    """GatherElements in numpy. onnx.reference's own version calls np.choose, which takes at
    most 64 (numpy 2) choices along the axis, and its fallback for more keeps only the first
    index of every row: a (1, 512) token-type buffer gathered at (1, 128) positions, as the
    PyTorch exporter writes BERT's embeddings, failed to fold."""
    axis = int(n.attrs.get("axis", 0))
    rank = data.ndim
    if not -rank <= axis < rank or indices.ndim != rank:
        raise ValueError(f"axis {axis} and index rank {indices.ndim} do not fit data of rank {rank}")
    axis %= rank
    for d in range(rank):
        if d != axis and indices.shape[d] > data.shape[d]:
            raise ValueError(f"indices shape {indices.shape} exceeds data shape {data.shape} on axis {d}")
    size = data.shape[axis]
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ValueError(f"an index is outside [-{size}, {size - 1}]")
    idx = np.where(idx < 0, idx + size, idx)
    # take_along_axis wants the other axes equal: trim the data to the indices' extent there
    trimmed = data[tuple(slice(None) if d == axis else slice(0, indices.shape[d]) for d in range(rank))]
    return [np.take_along_axis(trimmed, idx, axis=axis)]


def _unique(n: Node, x: np.ndarray) -> list[np.ndarray]:
    """Unique in numpy: onnx.reference's unsorted form (sorted=0) indexes out of bounds. The
    unsorted order is that of first occurrence, as ONNX Runtime gives it."""
    axis = n.attrs.get("axis")
    data = x.reshape(-1) if axis is None else x
    ax = None if axis is None else int(axis) % max(x.ndim, 1)
    y, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True,
                                          axis=ax)
    inverse = inverse.reshape(-1)
    if not int(n.attrs.get("sorted", 1)):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if ax is None else ax)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


def _one_hot(n: Node, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    """OneHot in numpy, as its kernel computes it (ops/tensor.py): onnx.reference refuses a depth
    given as a one-element 1-D tensor, which the spec allows and paddle2onnx writes. A float index
    truncates toward zero (the spec's cast to int64), a negative one counts from depth, one outside
    [-depth, depth) gives off_value everywhere."""
    d = int(np.asarray(depth).reshape(-1)[0])
    rank = indices.ndim + 1
    axis = int(n.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    j = indices.astype(np.int64)
    j = np.where(j < 0, j + d, j)
    hot = np.expand_dims(j, axis) == np.arange(d).reshape((d,) + (1,) * (rank - 1 - axis))
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


# Ops folded by our own numpy code because the reference implementation is wrong for them.
_NUMPY_FOLDERS = {"GatherElements": _gather_elements, "Unique": _unique, "OneHot": _one_hot}


def evaluate(n: Node, arrays: list[np.ndarray | None], out_types: list[tuple],
             opset: int = NORMALIZED_OPSET) -> list[np.ndarray]:
    """n's outputs on constant inputs, by the reference implementation at `opset` (an op newer
    than NORMALIZED_OPSET names its own)."""
    from onnx.reference import ReferenceEvaluator

    own = _NUMPY_FOLDERS.get(n.op_type) if not n.domain or n.domain == "ai.onnx" else None
    if own is not None:
        return [np.asarray(r, order="C") for r in own(n, *arrays)]

    in_names = [f"in{k}" if a is not None else "" for k, a in enumerate(arrays)]
    out_names = [f"out{k}" if o else "" for k, o in enumerate(n.outputs)]
    proto = node_proto(Node(n.op_type, in_names, out_names, n.attrs, n.name, n.domain))
    inputs = [helper.make_tensor_value_info(nm, dtypes.to_onnx(a.dtype), a.shape)
              for nm, a in zip(in_names, arrays) if a is not None]
    outputs = [helper.make_tensor_value_info(nm, dtypes.to_onnx(t[0]), t[1])
               for nm, t in zip(out_names, out_types) if nm]
    graph = helper.make_graph([proto], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {nm: a for nm, a in zip(in_names, arrays) if a is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(r, order="C") for r in res]
