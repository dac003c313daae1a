"""Operators that aotc has no definition of, but that ONNX defines as a function of other
operators (today ai.onnx.preview's FlexAttention): each such node is replaced by its function
body, which the ONNX schema builds for that node (its attributes, subgraph attributes and input
types), so that the ops of the body compile as they would anywhere else.

This runs before anything else reads the graph (onnx_import.import_model), on a copy of the
model. A node whose body cannot be built (an input whose type shape inference cannot tell) is
left as it is: the operator check then names it as unsupported.
"""
from __future__ import annotations

import onnx
from onnx import defs, inliner, shape_inference

from .operators import is_supported
from .validate import DEFAULT_DOMAINS, all_graphs

# the domain the per-node functions are put in while the inliner runs
_DOMAIN = "aotc.expanded"


def _schema(n: onnx.NodeProto, opsets: dict):
    domain = "" if n.domain in DEFAULT_DOMAINS else n.domain
    if domain not in opsets:
        return None
    try:
        s = defs.get_schema(n.op_type, opsets[domain], domain)
    except defs.SchemaError:
        return None
    return s if (s.has_function or s.has_context_dependent_function) else None


def value_types(model: onnx.ModelProto) -> dict:
    """Value name -> TypeProto, from the declarations and ONNX's shape inference (which may
    fail on a model it cannot follow: then the declared types only)."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:       # onnx raises several exception types for models it cannot infer
        inferred = model
    types = {}
    for g in all_graphs(inferred.graph):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            types[vi.name] = vi.type
        for t in g.initializer:
            tp = onnx.TypeProto()
            tp.tensor_type.elem_type = t.data_type
            tp.tensor_type.shape.SetInParent()      # (a scalar's shape: known, no dims)
            for d in t.dims:
                tp.tensor_type.shape.dim.add().dim_value = d
            types[t.name] = tp
    return types


def _body(n: onnx.NodeProto, schema, types: dict) -> onnx.FunctionProto | None:
    if schema.has_function:
        f = onnx.FunctionProto()
        f.CopyFrom(schema.function_body)
        return f
    if any(i and i not in types for i in n.input):
        return None
    try:
        arg_types = [types[i].SerializeToString() if i else onnx.TypeProto().SerializeToString() for i in n.input]
        data = schema.get_context_dependent_function(n.SerializeToString(), arg_types)
    except Exception:           # onnx's C++ raises several types when it cannot build the body
        return None
    if not data:
        return None
    f = onnx.FunctionProto()
    f.ParseFromString(data)
    return f


def expand_schema_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every node of an op that has a function body in ONNX and no definition in
    aotc replaced by that body; the model itself when there is none."""
    opsets = {("" if imp.domain in DEFAULT_DOMAINS else imp.domain): int(imp.version) for imp in model.opset_import}
    nodes = [n for g in all_graphs(model.graph) for n in g.node]
    todo = [(k, n, s) for k, n in enumerate(nodes) if not is_supported(n) and (s := _schema(n, opsets)) is not None]
    if not todo:
        return model
    types = value_types(model)
    bodies = [(k, n, f) for k, n, s in todo if (f := _body(n, s, types)) is not None]
    if not bodies:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    copied = [n for g in all_graphs(out.graph) for n in g.node]        # the same walk, the same order
    for j, (k, n, f) in enumerate(bodies):
        # each node gets its own function: a context-dependent body is built for that node's
        # attributes, so two FlexAttention nodes with different score_mods have different bodies
        f.domain, f.name = _DOMAIN, f"{n.op_type}_{j}"
        have = {o.domain or "" for o in f.opset_import}
        f.opset_import.extend(imp for imp in model.opset_import if (imp.domain or "") not in have)
        copied[k].domain, copied[k].op_type = _DOMAIN, f.name
        out.functions.append(f)
    out.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    try:
        out = inliner.inline_local_functions(out)
    except Exception:           # the body does not inline (its opsets clash with the model's)
        return model
    del out.opset_import[:]
    out.opset_import.extend(model.opset_import)
    return out
