"""Graph-IR test helpers: type an imported graph with ONNX's own shape inference (so a pass
can be unit-tested on ops whose aotc definitions do not exist yet), write an IR graph back
to ONNX, and evaluate either with onnx.reference, to show a pass kept the function intact."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aotc.frontend import import_model
from aotc.ir import dtypes
from aotc.ir.graph import Graph, Value
from aotc.ops.reference import node_proto


def typed_graph(model: onnx.ModelProto, name: str = "t") -> Graph:
    """Import `model` and give every node output the dtype/shape ONNX's strict shape
    inference finds (independent of aotc's op registry)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.elem_type and tt.HasField("shape"):
            types[vi.name] = (dtypes.from_onnx(tt.elem_type), tuple(int(d.dim_value) for d in tt.shape.dim))
    g = import_model(model, name)
    for n in g.nodes:
        for o in n.outputs:
            if o:
                dt, shape = types[o]
                g.values[o] = Value(o, dt, shape)
    return g


def to_model(g: Graph) -> onnx.ModelProto:
    """The IR graph as an ONNX model (aotc.Copy becomes Identity)."""
    used = {i for n in g.nodes for i in n.inputs if i} | set(g.outputs)
    inits = [numpy_helper.from_array(v.const, k) for k, v in g.values.items()
             if v.const is not None and k in used and k not in g.inputs]
    nodes = []
    for n in g.nodes:
        p = node_proto(n)
        if n.op_type == "aotc.Copy":
            p = helper.make_node("Identity", list(n.inputs), list(n.outputs), name=n.name)
        nodes.append(p)

    def vi(k):
        v = g.values[k]
        return helper.make_tensor_value_info(k, dtypes.to_onnx(v.dtype), list(v.shape))

    graph = helper.make_graph(nodes, g.name, [vi(k) for k in g.inputs], [vi(k) for k in g.outputs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])
    m.ir_version = 10
    return m


def evaluate(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def assert_same_function(before: onnx.ModelProto, g: Graph, feeds: dict, rtol=1e-5, atol=1e-6) -> None:
    """`g` (a rewritten graph) computes what `before` computes on `feeds`, output by output."""
    want = evaluate(before, feeds)
    got = evaluate(to_model(g), {k: feeds[k] for k in g.inputs})
    assert len(want) == len(got)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"output {k}: shape {a.shape} != {b.shape}"
        assert a.dtype == b.dtype, f"output {k}: dtype {a.dtype} != {b.dtype}"
        # the inputs are random and non-trivial: refuse a comparison of all-zero results
        assert np.any(b != 0), f"output {k} is all zeros: the test would not notice a broken rewrite"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {k}")


def ops(g: Graph) -> list[str]:
    return [n.op_type for n in g.nodes]
