"""Hand-made malformed ONNX models, each with the one-line message aotc must give for it.

Every case is `Case(id, build, message)`: `build(dir)` writes the model file into `dir`
(and any external data beside it) and returns its path; `message` is a fragment of the
error line. Used by tests/test_validate.py (through the Python API and the command line).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, defs, helper, numpy_helper

N = helper.make_node
NEWEST = defs.onnx_opset_version()


@dataclass
class Case:
    id: str
    build: Callable[[Path], Path]
    message: str
    error: str = "ModelError"


def _vi(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes, inputs, outputs, inits=(), opset=17, opsets=None, ir=8):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=opsets if opsets is not None else [helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def _w(shape=(2, 3), name="w", dtype=np.float32):
    return numpy_helper.from_array(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape), name)


X = _vi("x", [2, 3])
Y = _vi("y", [2, 3])


def _saver(make) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        p = d / "model.onnx"
        d.mkdir(parents=True, exist_ok=True)
        p.write_bytes(make().SerializeToString())
        return p
    return build


def _add_w(init):
    return _model([N("Add", ["x", "w"], ["y"], name="add")], [X], [Y], [init])


# --------------------------------------------------------------------------------------- initializers
def _short_raw():
    w = _w()
    w.raw_data = w.raw_data[:8]
    return _add_w(w)


def _long_raw():
    w = _w()
    w.raw_data = w.raw_data + b"\0\0\0\0"
    return _add_w(w)


def _short_typed():
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    w.float_data.extend([1.0, 2.0, 3.0, 4.0, 5.0])
    return _add_w(w)


def _wrong_field():
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    w.int64_data.extend(range(6))
    return _add_w(w)


def _raw_and_typed():
    w = _w()
    w.float_data.extend([1.0] * 6)
    return _add_w(w)


def _negative_init_dim():
    w = _w()
    w.dims[0] = -2
    return _add_w(w)


def _huge_init_dims():
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
    return _add_w(w)


def _undefined_dtype():
    w = _w()
    w.data_type = 0
    return _add_w(w)


def _unknown_dtype_code():
    w = _w()
    w.data_type = 99
    return _add_w(w)


def _rank_too_high():
    w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1] * 40)
    w.raw_data = b"\0\0\0\0"
    return _add_w(w)


def _duplicate_initializer():
    return _model([N("Add", ["x", "w"], ["y"])], [X], [Y], [_w(), _w()])


def _unnamed_initializer():
    return _model([N("Relu", ["x"], ["y"])], [X], [Y], [_w(name="")])


def _constant_short_payload():
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "c")
    t.raw_data = t.raw_data[:-1]
    return _model([N("Constant", [], ["c"], value=t, name="const"), N("Add", ["x", "c"], ["y"])], [X], [Y])


# --------------------------------------------------------------------------------------- inputs, outputs, names
def _negative_input_dim():
    return _model([N("Relu", ["x"], ["y"])], [_vi("x", [2, -3])], [Y])


def _negative_output_dim():
    return _model([N("Relu", ["x"], ["y"])], [X], [_vi("y", [2, -3])])


def _huge_input():
    return _model([N("Relu", ["x"], ["y"])], [_vi("x", [2**61, 3])], [Y])


def _no_outputs():
    return _model([N("Relu", ["x"], ["y"])], [X], [])


def _duplicate_input():
    return _model([N("Add", ["x", "x"], ["y"])], [X, X], [Y])


def _unnamed_input():
    return _model([N("Relu", ["x"], ["y"])], [X, _vi("", [2])], [Y])


def _unnamed_output():
    return _model([N("Relu", ["x"], ["y"])], [X], [_vi("", [2, 3])])


def _produced_twice():
    return _model([N("Relu", ["x"], ["y"], name="a"), N("Neg", ["x"], ["y"], name="b")], [X], [Y])


def _output_over_input():
    return _model([N("Relu", ["x"], ["x"], name="r")], [X], [X])


def _dangling():
    return _model([N("Add", ["x", "ghost"], ["y"], name="adder")], [X], [Y])


def _output_not_computed():
    return _model([N("Relu", ["x"], ["r"])], [X], [_vi("r", [2, 3]), _vi("missing", [2, 3])])


def _cycle():
    return _model([N("Add", ["x", "t2"], ["t1"], name="add"), N("Relu", ["t1"], ["t2"], name="relu"),
                   N("Neg", ["t2"], ["y"], name="neg")], [X], [Y])


# --------------------------------------------------------------------------------------- opsets
def _opset_1000():
    return _model([N("Relu", ["x"], ["y"])], [X], [Y], opset=1000)


def _opset_6():
    return _model([N("Dropout", ["x"], ["y"])], [X], [Y], opset=6)


def _opset_twice():
    return _model([N("Relu", ["x"], ["y"])], [X], [Y],
                  opsets=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx", 17)])


def _no_default_opset():
    return _model([N("Relu", ["x"], ["y"])], [X], [Y], opsets=[helper.make_opsetid("com.example", 1)])


def _op_newer_than_opset():
    return _model([N("Where", ["c", "x", "x"], ["y"], name="w")], [_vi("c", [2, 3], TensorProto.BOOL), X], [Y],
                  opset=8)


def _unknown_domain_unused():
    """Importing a domain nothing uses is fine: this one must compile."""
    return _model([N("Relu", ["x"], ["y"])], [X], [Y],
                  opsets=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1000)])


# --------------------------------------------------------------------------------------- nodes
def _attr_wrong_type():
    n = N("Transpose", ["x"], ["y"], name="tr")
    n.attribute.append(helper.make_attribute("perm", 1))
    return _model([n], [X], [_vi("y", [3, 2])])


def _attr_undefined_type():
    n = N("Softmax", ["x"], ["y"], name="sm", axis=1)
    n.attribute[0].type = AttributeProto.UNDEFINED
    return _model([n], [X], [Y])


def _attr_unknown():
    return _model([N("ReduceMean", ["x"], ["y"], name="rm", axes=[1])], [X], [_vi("y", [2, 1])], opset=18)


def _attr_missing_required():
    return _model([N("Cast", ["x"], ["y"], name="cast")], [X], [Y])


def _attr_twice():
    n = N("Softmax", ["x"], ["y"], name="sm", axis=1)
    n.attribute.append(helper.make_attribute("axis", 0))
    return _model([n], [X], [Y])


def _too_few_inputs():
    return _model([N("Add", ["x"], ["y"], name="add1")], [X], [Y])


def _too_many_outputs():
    return _model([N("Relu", ["x"], ["y", "z"], name="relu2")], [X], [Y])


def _required_input_empty():
    return _model([N("Conv", ["x", ""], ["y"], name="conv")], [_vi("x", [1, 1, 4, 4])], [Y])


def _type_not_allowed():
    return _model([N("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2])],
                  [_vi("x", [1, 1, 4, 4], TensorProto.BOOL)], [_vi("y", [1, 1, 3, 3], TensorProto.BOOL)])


def _types_differ():
    return _model([N("Add", ["x", "i"], ["y"], name="mixed")], [X, _vi("i", [2, 3], TensorProto.INT64)], [Y])


def _type_after_known_output():
    """The type flows: Shape gives int64, and Relu does not take int64 at opset 13."""
    return _model([N("Shape", ["x"], ["s"], name="shape"), N("Relu", ["s"], ["y"], name="relu")], [X],
                  [_vi("y", [2], TensorProto.INT64)], opset=13)


def _invalid_utf8(field_value: bytes, broken: bytes):
    """A model whose serialized bytes have `field_value` replaced by `broken` (same length)."""
    def build(d: Path) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        data = _model([N("Relu", ["x"], ["y"], name="relu_node")], [X], [Y]).SerializeToString()
        assert data.count(field_value) == 1 and len(broken) == len(field_value)
        p = d / "model.onnx"
        p.write_bytes(data.replace(field_value, broken))
        return p
    return build


def _output_type_differs():
    return _model([N("Relu", ["x"], ["y"], name="relu")], [X], [_vi("y", [2, 3], TensorProto.UINT8)])


def _output_is_a_sequence():
    return _model([N("Relu", ["x"], ["y"], name="relu")], [X],
                  [helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, None)])


def _output_type_undefined():
    return _model([N("Relu", ["x"], ["y"])], [X], [_vi("y", [2, 3], TensorProto.UNDEFINED)])


# --------------------------------------------------------------------------------------- external data
def _external(entries: dict, data: bytes = bytes(24)):
    def build(d: Path) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        (d / "w.bin").write_bytes(data)
        w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
        w.data_location = TensorProto.EXTERNAL
        for k, v in {"location": "w.bin", **entries}.items():
            e = w.external_data.add()
            e.key, e.value = k, v
        p = d / "model.onnx"
        p.write_bytes(_add_w(w).SerializeToString())
        return p
    return build


CASES = [
    Case("short_raw_data", _saver(_short_raw),
         "initializer 'w' holds 8 bytes of raw_data, its dims [2, 3] and type FLOAT need 24"),
    Case("long_raw_data", _saver(_long_raw), "initializer 'w' holds 28 bytes of raw_data"),
    Case("short_typed_data", _saver(_short_typed), "initializer 'w' holds 5 values in float_data, its dims [2, 3] need 6"),
    Case("data_in_wrong_field", _saver(_wrong_field), "initializer 'w' of type FLOAT has its data in int64_data"),
    Case("raw_and_typed_data", _saver(_raw_and_typed), "initializer 'w' has both raw_data and float_data"),
    Case("negative_initializer_dim", _saver(_negative_init_dim),
         "initializer 'w' has a negative dimension (-2 at axis 0)"),
    Case("initializer_too_large", _saver(_huge_init_dims),
         "initializer 'w' has dims [1099511627776, 1099511627776], more elements than a 64-bit size holds"),
    Case("undefined_element_type", _saver(_undefined_dtype),
         "initializer 'w' has element type UNDEFINED, which is not an ONNX tensor type"),
    Case("unknown_element_type", _saver(_unknown_dtype_code),
         "initializer 'w' has element type 99, which is not an ONNX tensor type"),
    Case("rank_too_high", _saver(_rank_too_high), "initializer 'w' has rank 40, above the most aotc handles, 32"),
    Case("duplicate_initializer", _saver(_duplicate_initializer), "initializer 'w' is defined twice"),
    Case("unnamed_initializer", _saver(_unnamed_initializer), "an initializer has an empty name"),
    Case("constant_short_payload", _saver(_constant_short_payload),
         "node 'const' (Constant) attribute 'value' holds 23 bytes of raw_data, its dims [2, 3] and type FLOAT need 24"),
    Case("negative_input_dim", _saver(_negative_input_dim), "graph input 'x' has a negative dimension (-3 at axis 1)"),
    Case("negative_output_dim", _saver(_negative_output_dim),
         "graph output 'y' has a negative dimension (-3 at axis 1)"),
    Case("input_too_large", _saver(_huge_input),
         "graph input 'x' has dims [2305843009213693952, 3]: 27670116110564327424 bytes do not fit a 64-bit size"),
    Case("no_outputs", _saver(_no_outputs), "the graph declares no outputs"),
    Case("duplicate_input", _saver(_duplicate_input), "graph input 'x' is declared twice"),
    Case("unnamed_input", _saver(_unnamed_input), "a graph input has an empty name"),
    Case("unnamed_output", _saver(_unnamed_output), "a graph output has an empty name"),
    Case("produced_twice", _saver(_produced_twice), "value 'y' is produced twice (by node 'b')"),
    Case("output_over_input", _saver(_output_over_input), "value 'x' is produced twice (by node 'r')"),
    Case("dangling_input", _saver(_dangling), "node 'adder' (Add) reads 'ghost', which nothing produces"),
    Case("output_not_computed", _saver(_output_not_computed), "graph output 'missing' is not computed by any node"),
    Case("cycle", _saver(_cycle), "the graph has a cycle through node"),
    Case("opset_1000", _saver(_opset_1000), f"opset 1000 (ai.onnx) is newer than the newest aotc knows, {NEWEST}"),
    Case("opset_6", _saver(_opset_6), "opset 6 is older than the oldest supported, 7, and these operators "
         "were redefined since: Dropout (version 6, redefined in 7)"),
    Case("opset_imported_twice", _saver(_opset_twice),
         "the model imports the ai.onnx opset 2 times (versions 13, 17)"),
    Case("no_default_opset", _saver(_no_default_opset), "the model imports no default-domain (ai.onnx) opset"),
    Case("op_newer_than_opset", _saver(_op_newer_than_opset),
         "node 'w' (Where) uses Where, which ai.onnx opset 8 does not have (it appears in opset 9)"),
    Case("attribute_wrong_type", _saver(_attr_wrong_type),
         "node 'tr' (Transpose): attribute 'perm' is INT, the Transpose-13 schema declares INTS"),
    Case("attribute_without_type", _saver(_attr_undefined_type), "node 'sm' (Softmax): attribute 'axis' has no type"),
    Case("attribute_not_in_schema", _saver(_attr_unknown),
         "node 'rm' (ReduceMean) has attribute 'axes', which the ReduceMean-18 schema does not define"),
    Case("required_attribute_missing", _saver(_attr_missing_required),
         "node 'cast' (Cast) lacks attribute 'to', which the Cast-13 schema requires"),
    Case("attribute_twice", _saver(_attr_twice), "node 'sm' (Softmax) sets attribute 'axis' twice"),
    Case("too_few_inputs", _saver(_too_few_inputs), "node 'add1' (Add) has 1 inputs, the Add-14 schema takes 2"),
    Case("too_many_outputs", _saver(_too_many_outputs), "node 'relu2' (Relu) has 2 outputs, the Relu-14 schema gives 1"),
    Case("required_input_empty", _saver(_required_input_empty),
         "node 'conv' (Conv) leaves input 1 (W) empty, and the Conv-11 schema requires it"),
    Case("element_type_not_allowed", _saver(_type_not_allowed),
         "node 'pool' (MaxPool): input 0 (X) is bool, the MaxPool-12 schema allows double, float, float16, int8, uint8"),
    Case("element_types_differ", _saver(_types_differ),
         "node 'mixed' (Add): inputs A and B share type T in the Add-14 schema, but are float and int64"),
    Case("element_type_flows_through_nodes", _saver(_type_after_known_output),
         "node 'relu' (Relu): input 0 (X) is int64, the Relu-13 schema allows bfloat16, double, float, float16"),
    Case("output_declared_with_another_type", _saver(_output_type_differs),
         "graph output 'y' is declared uint8, but the graph computes float"),
    Case("output_declared_as_a_sequence", _saver(_output_is_a_sequence),
         "graph output 'y' is declared as a sequence, but node 'relu' (Relu) computes a tensor"),
    Case("output_type_undefined", _saver(_output_type_undefined),
         "graph output 'y' is declared as a tensor of element type UNDEFINED"),
    Case("op_type_not_utf8", _invalid_utf8(b"Relu", b"R\xe3lu"),
         "the op_type of node 0 is not valid UTF-8 text (b'R\\xe3lu')"),
    Case("node_name_not_utf8", _invalid_utf8(b"relu_node", b"relu\xffnode"),
         "the name of node 0 is not valid UTF-8 text"),
    Case("external_length_mismatch", _external({"length": "20"}),
         "tensor 'w': external data length 20 bytes, its dims [2, 3] need 24"),
    Case("external_offset_not_a_number", _external({"offset": "abc"}),
         "tensor 'w': external data offset 'abc' is not an integer"),
    Case("external_offset_negative", _external({"offset": "-8"}), "tensor 'w': external data offset -8 is negative"),
    Case("external_file_short", _external({"offset": "8"}),
         "tensor 'w': external data 'w.bin' is shorter than the tensor needs (24 bytes at offset 8, the file has 24)"),
    Case("external_outside_folder", _external({"location": "../w.bin"}),
         "tensor 'w' names external data '../w.bin' outside the model's folder"),
]

# Models that must still compile: validation must not refuse them.
VALID = [("unknown_domain_imported_but_unused", _saver(_unknown_domain_unused))]
