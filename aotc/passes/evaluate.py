"""Run one node on constant inputs with the ONNX reference implementation (for folding)."""
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


def evaluate(n: Node, arrays: list[np.ndarray | None], out_types: list[tuple]) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    in_names = [f"in{k}" if a is not None else "" for k, a in enumerate(arrays)]
    out_names = [f"out{k}" if o else "" for k, o in enumerate(n.outputs)]
    proto = node_proto(Node(n.op_type, in_names, out_names, n.attrs, n.name, n.domain))
    inputs = [helper.make_tensor_value_info(nm, dtypes.to_onnx(a.dtype), a.shape)
              for nm, a in zip(in_names, arrays) if a is not None]
    outputs = [helper.make_tensor_value_info(nm, dtypes.to_onnx(t[0]), t[1])
               for nm, t in zip(out_names, out_types) if nm]
    graph = helper.make_graph([proto], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", NORMALIZED_OPSET)])
    feeds = {nm: a for nm, a in zip(in_names, arrays) if a is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(r, order="C") for r in res]
