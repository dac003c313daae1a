"""Narrow element types: floats of 16, 8 and 4 bits (float16, bfloat16, the float8 formats
E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0, float4 E2M1) and integers of 4 and 2 bits (int4, uint4, int2,
uint2). They are stored in their type at the artifact's edges and computed inside in the type
that holds their values (dtypes.compute_dtype): float32, or int8 / uint8.

A graph input of a narrow type keeps its type (the caller passes such arrays; the 8-, 4- and
2-bit ones one element per byte, as ml_dtypes holds them) and is cast to its compute type by a
Cast node the graph reads instead (exact); a narrow graph output is a Cast of its value in the
compute type (float16 and bfloat16 rounded to nearest even at the store; the other types'
values are that type's already, see below). Inside, every narrow value is in its compute type:
initializers and constant attributes are widened (exactly), element-type attributes naming a
narrow type name its compute type.

A Cast to a narrow type inside the graph differs by type. To float16 it becomes a Cast to
float32: a model that casts to float16 between two ops does not round there but computes in
float32 throughout, as ONNX Runtime's CPU provider does for the ops it has no float16 kernel
for (results agree to float16's precision, not always to the bit). To bfloat16, float8 or
float4 it rounds, as ONNX's Cast says and ONNX Runtime does: it becomes aotc.RoundFloat
(ops/narrow.py), float32 in and out, whose result is a value of that type; to a 4- or 2-bit
integer it becomes aotc.WrapInt, whose int8 / uint8 result is in the type's range. So does a
CastLike whose target is a narrow graph input, initializer or Constant. A QuantizeLinear to a
narrow type (its zero point's, or its output_dtype) gets the attribute `aotc_narrow` naming it,
so that it saturates to that type's range (4- and 2-bit integers) or rounds to it (float8,
float4). A graph output the model leaves untyped is of a narrow type where ONNX's type
inference finds it so.
"""
from __future__ import annotations

import numpy as np
import onnx

from ..ir import dtypes
from ..ir.graph import Graph, Node
from ..ir.internal import NARROW_ATTR, ROUND_FLOAT, WRAP_INT

F16, F32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT


def _narrow_codes() -> dict[int, int]:
    out = {}
    for code in onnx.TensorProto.DataType.values():
        try:
            dt = dtypes.from_onnx(code)
        except dtypes.UnsupportedDtype:
            continue
        if dtypes.is_narrow(dt):
            out[code] = dtypes.to_onnx(dtypes.compute_dtype(dt))
    return out


# the ONNX codes of the narrow types -> the codes of the types they are computed in
COMPUTE = _narrow_codes()
NARROW = tuple(COMPUTE)
# attributes that name an element type
_TYPE_ATTRS = {"to", "dtype", "output_datatype", "output_dtype"}


def widen_array(a: np.ndarray) -> np.ndarray:
    return a.astype(dtypes.compute_dtype(a.dtype)) if dtypes.is_narrow(a.dtype) else a


def _widen(v):
    if isinstance(v, np.ndarray):
        return widen_array(v)
    if isinstance(v, list) and v and isinstance(v[0], np.ndarray):
        return [_widen(x) for x in v]
    return v


def _narrow_constants(nodes: list[Node]) -> dict[str, int]:
    """The outputs of Constant nodes holding a tensor of a narrow type (before widening), with
    its ONNX code."""
    out = {}
    for n in nodes:
        v = n.attrs.get("value")
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and isinstance(v, np.ndarray) \
                and dtypes.is_narrow(v.dtype):
            out[n.outputs[0]] = dtypes.to_onnx(v.dtype)
    return out


def _to_narrow(n: Node, code: int) -> None:
    """Cast / CastLike node n, to narrow type `code`, made the op that computes it inside."""
    n.inputs = n.inputs[:1]
    if code == F16:
        n.op_type, n.attrs = "Cast", {"to": F32}
    elif dtypes.is_small_int(dtypes.from_onnx(code)):
        n.op_type, n.attrs = WRAP_INT, {"to": code}
    else:
        n.op_type, n.attrs = ROUND_FLOAT, {"to": code, "saturate": int(n.attrs.get("saturate", 1)),
                                           "round_mode": n.attrs.get("round_mode", "up")}


def widen_nodes(nodes: list[Node], narrow_values: dict[str, int] | None = None) -> None:
    """Narrow types in the nodes' attributes (tensors, element types) become their compute
    types; a Cast to a narrow type, and a CastLike whose target is one of `narrow_values`
    (name -> ONNX code) or a narrow Constant's output, becomes the op that computes it (see
    the module's doc); a QuantizeLinear to a narrow type is marked `aotc_narrow`."""
    narrow_values = dict(narrow_values or {}) | _narrow_constants(nodes)
    for n in nodes:
        default = n.domain in ("", "ai.onnx")
        if default and n.op_type == "Cast" and int(n.attrs.get("to", 0)) in COMPUTE:
            _to_narrow(n, int(n.attrs["to"]))
            continue
        if default and n.op_type == "CastLike" and len(n.inputs) > 1 and n.inputs[1] in narrow_values:
            _to_narrow(n, narrow_values[n.inputs[1]])
            continue
        if default and n.op_type == "QuantizeLinear":
            code = int(n.attrs.get("output_dtype", 0))
            if len(n.inputs) > 2 and n.inputs[2] in narrow_values:
                code = narrow_values[n.inputs[2]]
            if code in COMPUTE:
                n.attrs[NARROW_ATTR] = code
        for k, v in list(n.attrs.items()):
            if k in _TYPE_ATTRS and isinstance(v, int) and v in COMPUTE:
                n.attrs[k] = COMPUTE[v]
            else:
                n.attrs[k] = _widen(v)


def untyped_narrow_outputs(model: onnx.ModelProto) -> dict[str, int]:
    """The graph outputs without a declared element type that ONNX's type inference finds
    of a narrow type, with that type (none where it cannot tell)."""
    untyped = [o.name for o in model.graph.output
               if not o.type.HasField("tensor_type") or not o.type.tensor_type.elem_type]
    if not untyped:
        return {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:                                  # (inference is a hint here, not a check)
        return {}
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.value_info) + list(inferred.output)
             if v.type.HasField("tensor_type")}
    return {name: types[name] for name in untyped if types.get(name) in COMPUTE}


def narrow_edges(g: Graph, nodes: list[Node], narrow_outputs: dict[str, int]) -> list[Node]:
    """`nodes` with Casts at the narrow inputs of `g` and onto the outputs in `narrow_outputs`
    (graph outputs the model declares of a narrow type, with that type), every narrow value
    inside widened to its compute type."""
    narrow_values = {name: dtypes.to_onnx(v.dtype) for name, v in g.values.items() if dtypes.is_narrow(v.dtype)}
    widen_nodes(nodes, narrow_values)
    for name, v in list(g.values.items()):
        if v.const is not None and dtypes.is_narrow(v.dtype):
            v.const = widen_array(v.const)
            v.dtype = v.const.dtype
    rename: dict[str, str] = {}
    edges: list[Node] = []
    for name in g.inputs:
        dt = g.values[name].dtype
        if dtypes.is_narrow(dt):
            inner = dtypes.compute_dtype(dt)
            rename[name] = inside = g.fresh_name(f"{name}/{dtypes.name(inner)}")
            edges.append(Node("Cast", [name], [inside], {"to": dtypes.to_onnx(inner)},
                              f"{name}/to_{dtypes.name(inner)}"))
    for n in nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
    tails = []
    for out, code in narrow_outputs.items():
        if out in rename:              # an input that is an output too: itself, in its type
            continue
        inner = dtypes.name(dtypes.from_onnx(COMPUTE[code]))
        src = g.fresh_name(f"{out}/{inner}")
        if out in g.values:            # a constant output
            v = g.values.pop(out)
            v.name = src
            g.values[src] = v
        else:
            for n in nodes:
                n.outputs = [src if o == out else o for o in n.outputs]
                n.inputs = [src if i == out else i for i in n.inputs]
        tails.append(Node("Cast", [src], [out], {"to": code}, f"{out}/to_{dtypes.name(dtypes.from_onnx(code))}"))
    return edges + nodes + tails
