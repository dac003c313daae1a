"""16-bit float models (float16, bfloat16): stored in their type at the artifact's edges,
computed in float32 inside.

A float16 or bfloat16 graph input keeps its type (the caller passes such arrays) and is cast
to float32 by a Cast node the graph reads instead (exact); a float16 or bfloat16 graph output
is a Cast of its float32 value (rounded to nearest even at the store). Inside, every 16-bit
float becomes float32: initializers and constant attributes are widened (exactly), dtype
attributes naming either type name float32.

A Cast inside the graph differs by type. To float16 it becomes a Cast to float32: a model that
casts to float16 between two ops does not round there but computes in float32 throughout, as
ONNX Runtime's CPU provider does for the ops it has no float16 kernel for (results agree to
float16's precision, not always to the bit). To bfloat16 it rounds, as ONNX's Cast says and
ONNX Runtime does: it becomes aotc.RoundFloat (ops/narrow_float.py), float32 in and out, whose
result is a bfloat16 value; a few integer operations on the float's bits. So does a CastLike
whose target is a bfloat16 graph input, initializer or Constant. A graph output the model
leaves untyped is float16 or bfloat16 where ONNX's type inference finds it so.
"""
from __future__ import annotations

import numpy as np
import onnx

from ..ir import dtypes
from ..ir.graph import Graph, Node
from ..ops.narrow_float import ROUND_FLOAT

F16, BF16, F32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT
NARROW = (F16, BF16)           # the ONNX codes of dtypes.NARROW_FLOATS
# attributes that name an element type
_TYPE_ATTRS = {"to", "dtype", "output_datatype", "output_dtype"}


def widen_array(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if dtypes.is_narrow_float(a.dtype) else a


def _widen(v):
    if isinstance(v, np.ndarray) and dtypes.is_narrow_float(v.dtype):
        return v.astype(np.float32)
    if isinstance(v, list) and v and isinstance(v[0], np.ndarray):
        return [_widen(x) for x in v]
    return v


def _bfloat16_constants(nodes: list[Node]) -> set[str]:
    """The outputs of Constant nodes holding a bfloat16 tensor (before widening)."""
    return {n.outputs[0] for n in nodes if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
            and isinstance(n.attrs.get("value"), np.ndarray) and n.attrs["value"].dtype == dtypes.BFLOAT16}


def widen_nodes(nodes: list[Node], bfloat16_values: set[str] = frozenset()) -> None:
    """float16 and bfloat16 in the nodes' attributes (tensors, element types) become float32;
    a Cast to bfloat16, and a CastLike whose target is one of `bfloat16_values` or a bfloat16
    Constant's output, becomes aotc.RoundFloat."""
    bfloat16_values = set(bfloat16_values) | _bfloat16_constants(nodes)
    for n in nodes:
        default = n.domain in ("", "ai.onnx")
        if default and n.op_type == "Cast" and int(n.attrs.get("to", 0)) == BF16:
            n.op_type, n.attrs = ROUND_FLOAT, {"to": BF16}
            continue
        if default and n.op_type == "CastLike" and len(n.inputs) > 1 and n.inputs[1] in bfloat16_values:
            n.op_type, n.inputs, n.attrs = ROUND_FLOAT, n.inputs[:1], {"to": BF16}
            continue
        for k, v in list(n.attrs.items()):
            if k in _TYPE_ATTRS and isinstance(v, int) and v in NARROW:
                n.attrs[k] = F32
            else:
                n.attrs[k] = _widen(v)


def untyped_narrow_outputs(model: onnx.ModelProto) -> dict[str, int]:
    """The graph outputs without a declared element type that ONNX's type inference finds
    float16 or bfloat16, with that type (none where it cannot tell)."""
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
    return {name: types[name] for name in untyped if types.get(name) in NARROW}


def narrow_edges(g: Graph, nodes: list[Node], narrow_outputs: dict[str, int]) -> list[Node]:
    """`nodes` with Casts at the float16 / bfloat16 inputs of `g` and onto the outputs in
    `narrow_outputs` (graph outputs the model declares float16 or bfloat16, with that type),
    every 16-bit float inside widened to float32."""
    bf16 = {name for name, v in g.values.items() if v.dtype == dtypes.BFLOAT16}
    widen_nodes(nodes, bf16)
    for name, v in list(g.values.items()):
        if v.const is not None and dtypes.is_narrow_float(v.dtype):
            v.const = v.const.astype(np.float32)
            v.dtype = dtypes.FLOAT32
    rename: dict[str, str] = {}
    edges: list[Node] = []
    for name in g.inputs:
        if dtypes.is_narrow_float(g.values[name].dtype):
            rename[name] = inside = g.fresh_name(f"{name}/float32")
            edges.append(Node("Cast", [name], [inside], {"to": F32}, f"{name}/to_float32"))
    for n in nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
    tails = []
    for out, code in narrow_outputs.items():
        if out in rename:              # an input that is an output too: itself, in its type
            continue
        if out in g.values:            # a constant output
            src = g.fresh_name(f"{out}/float32")
            v = g.values.pop(out)
            v.name = src
            g.values[src] = v
        else:
            src = g.fresh_name(f"{out}/float32")
            for n in nodes:
                n.outputs = [src if o == out else o for o in n.outputs]
                n.inputs = [src if i == out else i for i in n.inputs]
        tails.append(Node("Cast", [src], [out], {"to": code}, f"{out}/to_{dtypes.name(dtypes.from_onnx(code))}"))
    return edges + nodes + tails
