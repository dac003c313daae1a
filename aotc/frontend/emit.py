"""Emit: writes the ai.onnx nodes that replace one node of another domain when a model is read
(the rewrites of frontend/rewrite.py: ai.onnx.ml in ml.py and ml_trees.py, training steps in
training.py). A builder takes an Emit and the node's attributes and calls `op`, `const`,
`reduce`... for each node it writes; the nodes get fresh names under the replaced node's own and
are marked with EMIT_OPSET (ir.graph.OPSET_ATTR), the opset whose forms they are written in."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import UnsupportedError
from ..ir.internal import OPSET_ATTR


def attrs_of(n: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def text(v):
    """A string attribute as str (onnx gives bytes)."""
    return v.decode() if isinstance(v, bytes) else v


class Deferred(Exception):
    """A builder needs a value's rank, which is not known yet."""


# the ai.onnx opset the rewrites write their nodes in, whatever the model imports: each node is
# marked with it (ir.graph.OPSET_ATTR), so that validation and the opset normalization read it
# in these forms (a model of opset 9 gets Slice with inputs, ReduceSum with an axes input, ...)
EMIT_OPSET = 17


@dataclass
class Emit:
    """Nodes of the default domain that replace one node, with fresh names under its own."""
    node: onnx.NodeProto
    types: dict
    nodes: list = field(default_factory=list)
    count: int = 0
    # value -> TypeProto, for outputs of nodes ONNX's shape inference cannot follow (aotc's own
    # node kinds): rewrite.py declares them with the inferred ones
    declared: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        n = self.node
        return f"{n.op_type} node {n.name!r}" if n.name else f"{n.op_type} node (unnamed, output {n.output[0]!r})"

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.node.name or self.node.op_type}__{hint}_{self.count}"

    def elem_type(self, value: str) -> int:
        t = self.types.get(value)
        return t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else TensorProto.UNDEFINED

    def rank(self, value: str) -> int:
        """The rank of `value`; raises Deferred when shape inference could not tell it (an
        output of another rewritten node, known once that one is rewritten)."""
        t = self.types.get(value)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            raise Deferred(value)
        return len(t.tensor_type.shape.dim)

    def const(self, arr, hint: str = "c") -> str:
        out = self.name(hint)
        self.nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(np.asarray(arr), out),
                                           **{OPSET_ATTR: EMIT_OPSET}))
        return out

    def op(self, op_type: str, inputs: list, hint: str | None = None, out: str | None = None, **attrs) -> str:
        out = out or self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs, **{OPSET_ATTR: EMIT_OPSET}))
        return out

    def reduce(self, op_type: str, x: str, axis, out: str | None = None, keepdims: int = 1) -> str:
        """op_type over one axis (or a list of them), the axes as an input (EMIT_OPSET's form
        for ReduceSum; the other reductions take it so from opset 18 on)."""
        axes = [int(axis)] if np.isscalar(axis) else [int(v) for v in axis]
        if op_type == "ReduceSum":
            return self.op(op_type, [x, self.const(np.array(axes, np.int64), "axes")], out=out, keepdims=keepdims)
        return self.op(op_type, [x], out=out, axes=axes, keepdims=keepdims)

    def unsqueeze(self, x: str, axis: int, out: str | None = None) -> str:
        return self.op("Unsqueeze", [x, self.const(np.array([axis], np.int64), "axes")], out=out)

    def float32(self, x: str) -> str:
        """x as float32 (the ML ops compute numeric inputs in float)."""
        if self.elem_type(x) == TensorProto.FLOAT:
            return x
        return self.op("Cast", [x], "f", to=TensorProto.FLOAT)

    def declare(self, value: str, elem_type: int, shape) -> None:
        """The type of `value`, an output of a node ONNX's shape inference does not know."""
        self.declared[value] = helper.make_tensor_type_proto(elem_type, list(shape))

    def refuse(self, what: str, hint: str = "") -> None:
        raise UnsupportedError([f"{self.label}: {what}"], hint or None)
