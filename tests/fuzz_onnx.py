"""Fuzzing the loader and the compile path with mutated ONNX models.

A mutation is structure-aware: it parses a valid model, breaks one thing the way a buggy
exporter, a truncated download or a hostile file would (a payload shorter than its dims, a
negative or huge dimension, an attribute of another type or an absurd value, a dangling or
missing input, an op swapped for another, an opset out of range, external data pointing
out of the model's folder...) and serializes it again; raw byte flips are mixed in too.
Each mutated model goes through `aotc.compiler.compile_program` (import, passes, fusion, lowering,
memory planning: everything but the C compiler) in this process, under a time limit; with
--full, every 10th goes through `compile_model` (the C compiler too), and when it compiles,
it runs on seeded inputs against ONNX Runtime (in a child process, since ORT aborts on some
malformed models).

The only acceptable outcomes are a compiled graph or an `AotcError` (a one-line message
with exit code 2 at the command line). Anything else is a finding: another exception (the
user would see "internal error ... please report it"), a hang past the time limit, or an
open() of a file outside the model's folder (an audit hook watches a canary file placed
next to the folder), an error message of several lines. With --full also `BuildError` (aotc
wrote C that does not build) and a compiled mutant that answers differently from ONNX
Runtime ("wrong": a broken model compiled without a word, or a miscompile).

    python -m tests.fuzz_onnx --seconds 300            # atheris when installed (make fuzz)
    python -m tests.fuzz_onnx --seconds 60 --no-atheris --full
    python -m tests.fuzz_onnx --replay build/fuzz/findings/xxxx.onnx

Seeds: the small zoo models (models/zoo.py), a model with local functions, and ONNX backend
node test cases. The
deterministic pass in `make test` is tests/test_fuzz_pass.py.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
CANARY = "aotc_fuzz_canary.bin"
CASE_SECONDS = 20
COMPARE_LIMIT_BYTES = 64 << 20        # --full: mutants with larger inputs are compiled, not run

# ------------------------------------------------------------------------------------------ seeds
# zoo models used as seeds (all small variants), with the shapes they compile with
ZOO_SEEDS = ["mlp", "lenet5", "legacy_opset11", "legacy_opset13", "bert", "gpt2", "lstm", "gru", "mobilenetv2"]
# node test cases used as seeds: one or two per op family aotc compiles
NODE_SEEDS = ["test_conv_with_strides_padding", "test_gemm_all_attributes", "test_matmul_4d",
              "test_maxpool_2d_pads", "test_averagepool_2d_same_upper", "test_reshape_negative_dim",
              "test_transpose_all_permutations_3", "test_slice_neg_steps", "test_gather_negative_indices",
              "test_gather_elements_negative_indices", "test_concat_3d_axis_negative_1", "test_split_equal_parts_1d",
              "test_reduce_mean_keepdims_example", "test_softmax_axis_1", "test_layer_normalization_4d_axis1",
              "test_pad_reflect_allaxes", "test_resize_upsample_scales_linear", "test_expand_dim_changed",
              "test_where_long_example", "test_cast_FLOAT_to_INT32", "test_lstm_with_initial_bias",
              "test_batchnorm_epsilon", "test_clip_default_min", "test_tile", "test_range_float_type_positive_delta",
              "test_convtranspose_pads", "test_cumsum_2d_axis_1", "test_topk_negative_axis", "test_einsum_batch_matmul",
              "test_squeeze_negative_axes", "test_unsqueeze_three_axes", "test_depthtospace_crd_mode_example",
              "test_argmax_negative_axis_keepdims_example", "test_scatter_elements_with_negative_indices",
              "test_constantofshape_int_zeros", "test_onehot_with_axis", "test_instancenorm_example",
              "test_gathernd_example_int32_batch_dim1", "test_trilu_lower", "test_mod_mixed_sign_int64",
              # outputs of run-time size (aotc/passes/bounded.py)
              "test_nonzero_example", "test_compress_0", "test_nonmaxsuppression_center_point_box_format",
              "test_unique_not_sorted_without_axis"]


@dataclass
class Seed:
    name: str
    data: bytes
    shapes: dict = field(default_factory=dict)


def zoo_seeds(names=ZOO_SEEDS) -> list[Seed]:
    from models.zoo import ZOO
    return [Seed(f"zoo:{k}", ZOO[k].build("small").SerializeToString(), dict(ZOO[k].shapes)) for k in names]


def function_seeds() -> list[Seed]:
    """Models with local functions (as the PyTorch dynamo exporter writes them): the loader
    inlines them with onnx.inliner before anything else."""
    fn = helper.make_function
    add_relu = fn("custom", "AddRelu", ["a", "b"], ["c"],
                  [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["c"])],
                  [helper.make_opsetid("", 17)])
    scaled = fn("custom", "Scaled", ["a"], ["c"],
                [helper.make_node("Constant", [], ["k"], value_float=0.5),
                 helper.make_node("Mul", ["a", "k"], ["m"]),
                 helper.make_node("Softmax", ["m"], ["c"], axis=-1)],
                [helper.make_opsetid("", 17)], attributes=["alpha"])
    block = fn("custom", "Block", ["a", "b"], ["c"],
               [helper.make_node("AddRelu", ["a", "b"], ["h"], domain="custom"),
                helper.make_node("Scaled", ["h"], ["c"], domain="custom")],
               [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])
    b = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    g = helper.make_graph([helper.make_node("Block", ["x", "b"], ["h"], domain="custom"),
                           helper.make_node("AddRelu", ["h", "b"], ["y"], domain="custom")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=[add_relu, scaled, block])
    m.ir_version = 8
    return [Seed("functions:nested", m.SerializeToString())]


def control_seeds() -> list[Seed]:
    """Ifs and Loops decided at run time (the host program's branches and while loops): an If
    on a data condition, a while loop reading values from before it, nested loops, a loop
    inside an If with an If inside it."""
    from tests.test_runtime_if import sign_if
    from tests.test_runtime_loop import halving_loop, loop_and_if, nested_loops
    return [Seed(f"control:{f.__name__}", f().SerializeToString())
            for f in (sign_if, halving_loop, nested_loops, loop_and_if)]


def node_seeds(names=NODE_SEEDS) -> list[Seed]:
    import warnings

    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = {c.name: c for c in collect_testcases(None)}
    return [Seed(f"node:{k}", cases[k].model.SerializeToString()) for k in names if k in cases]


# ------------------------------------------------------------------------------------------ mutations
# Values that break code which trusts them: signs, zero, int64/int32 edges, huge sizes.
EDGE_INTS = [0, -1, 1, 2, -2, 3, 7, 64, 65, 1000, -1000, 2**31 - 1, -2**31, 2**31, 2**62, -2**62,
             2**63 - 1, -2**63]
EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, 3.4e38, float("inf"), float("-inf"), float("nan")]
OTHER_OPS = ["Relu", "Add", "MatMul", "Conv", "Reshape", "Transpose", "Gather", "Concat", "Slice", "Softmax",
             "ReduceMean", "Squeeze", "Unsqueeze", "Split", "Expand", "Where", "Cast", "Pad", "Resize",
             "Identity", "Shape", "ConstantOfShape", "LSTM", "Gemm", "MaxPool", "NotAnOp", ""]


def _pick(rng, seq):
    return seq[rng.randrange(len(seq))] if len(seq) else None


def _tensors(model):
    out = list(model.graph.initializer)
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == AttributeProto.TENSOR:
                out.append(a.t)
    return out


def _value_infos(model):
    g = model.graph
    return list(g.input) + list(g.output) + list(g.value_info)


def m_truncate_payload(rng, m):
    ts = [t for t in _tensors(m) if t.raw_data]
    t = _pick(rng, ts)
    if t is None:
        return None
    cut = rng.randrange(len(t.raw_data))
    t.raw_data = t.raw_data[:cut] if rng.random() < 0.7 else t.raw_data + b"\0" * rng.randrange(1, 9)
    return f"payload of {t.name!r} to {len(t.raw_data)} bytes"


def m_tensor_dims(rng, m):
    t = _pick(rng, _tensors(m))
    if t is None:
        return None
    choice = rng.randrange(4)
    if choice == 0 and len(t.dims):
        k = rng.randrange(len(t.dims))
        t.dims[k] = _pick(rng, EDGE_INTS)
    elif choice == 1:
        t.dims.append(_pick(rng, [0, 1, 2, 2**40]))
    elif choice == 2 and len(t.dims):
        del t.dims[rng.randrange(len(t.dims))]
    else:
        t.dims[:] = list(reversed(t.dims))
    return f"dims of {t.name!r} to {list(t.dims)}"


def m_tensor_type(rng, m):
    t = _pick(rng, _tensors(m))
    if t is None:
        return None
    t.data_type = _pick(rng, [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 13, 14, 16, 21, 99, -5])
    return f"data_type of {t.name!r} to {t.data_type}"


def m_typed_payload(rng, m):
    """Move a tensor's data from raw_data into a typed field (possibly the wrong one)."""
    t = _pick(rng, [t for t in _tensors(m) if t.raw_data])
    if t is None:
        return None
    n = len(t.raw_data) // 4
    t.ClearField("raw_data")
    fld = _pick(rng, ["float_data", "int32_data", "int64_data", "double_data", "uint64_data"])
    getattr(t, fld).extend([rng.randrange(0, 5) for _ in range(min(n + rng.randrange(-1, 2), 4096))])
    return f"data of {t.name!r} into {fld}"


def m_value_info_dim(rng, m):
    vi = _pick(rng, [v for v in _value_infos(m) if v.type.HasField("tensor_type")])
    if vi is None:
        return None
    dims = vi.type.tensor_type.shape.dim
    if not len(dims) or rng.random() < 0.2:
        d = dims.add()
        d.dim_value = _pick(rng, EDGE_INTS)
    else:
        d = dims[rng.randrange(len(dims))]
        if rng.random() < 0.2:
            d.dim_param = "n"
        else:
            d.dim_value = _pick(rng, EDGE_INTS)
    return f"a dim of {vi.name!r}"


def m_value_info_type(rng, m):
    vi = _pick(rng, _value_infos(m))
    if vi is None:
        return None
    if rng.random() < 0.2:
        vi.type.ClearField("tensor_type")
        vi.type.sequence_type.elem_type.tensor_type.elem_type = 1
    else:
        vi.type.tensor_type.elem_type = _pick(rng, [0, 1, 2, 6, 7, 9, 10, 11, 16, 99])
    return f"type of {vi.name!r}"


def m_attribute(rng, m):
    nodes = [n for n in m.graph.node if len(n.attribute)]
    n = _pick(rng, nodes)
    if n is None:
        return None
    a = _pick(rng, n.attribute)
    c = rng.randrange(6)
    if c == 0 and a.type == AttributeProto.INT:
        a.i = _pick(rng, EDGE_INTS)
    elif c == 1 and a.type == AttributeProto.INTS and len(a.ints):
        a.ints[rng.randrange(len(a.ints))] = _pick(rng, EDGE_INTS)
    elif c == 2 and a.type == AttributeProto.INTS:
        if len(a.ints) and rng.random() < 0.5:
            del a.ints[rng.randrange(len(a.ints))]
        else:
            a.ints.append(_pick(rng, EDGE_INTS))
    elif c == 3 and a.type == AttributeProto.FLOAT:
        a.f = _pick(rng, EDGE_FLOATS)
    elif c == 4 and a.type == AttributeProto.STRING:
        a.s = _pick(rng, [b"", b"NOTSET", b"SAME_UPPER", b"\xff\xfe", b"linear", b"bogus"])
    else:
        a.type = _pick(rng, [0, 1, 2, 3, 4, 6, 7, 8, 99])
    return f"attribute {a.name!r} of {n.name!r}"


def m_add_attribute(rng, m):
    n = _pick(rng, m.graph.node)
    if n is None:
        return None
    name = _pick(rng, ["axis", "axes", "perm", "keepdims", "to", "mode", "bogus", "value", "alpha"])
    kind = rng.randrange(4)
    if kind == 0:
        n.attribute.append(helper.make_attribute(name, _pick(rng, EDGE_INTS)))
    elif kind == 1:
        n.attribute.append(helper.make_attribute(name, [_pick(rng, EDGE_INTS) for _ in range(rng.randrange(4))]))
    elif kind == 2:
        n.attribute.append(helper.make_attribute(name, _pick(rng, EDGE_FLOATS)))
    else:
        n.attribute.append(helper.make_attribute(name, numpy_helper.from_array(
            np.array([_pick(rng, [0, 1, -1, 5])] * rng.randrange(0, 3), np.int64))))
    return f"attribute {name!r} on {n.name!r}"


def m_drop_attribute(rng, m):
    n = _pick(rng, [n for n in m.graph.node if len(n.attribute)])
    if n is None:
        return None
    del n.attribute[rng.randrange(len(n.attribute))]
    return f"an attribute of {n.name!r}"


def m_node_inputs(rng, m):
    n = _pick(rng, m.graph.node)
    if n is None:
        return None
    names = [v.name for v in m.graph.input] + [t.name for t in m.graph.initializer] + \
            [o for x in m.graph.node for o in x.output]
    c = rng.randrange(5)
    if c == 0 and len(n.input):
        n.input[rng.randrange(len(n.input))] = _pick(rng, ["", "ghost"])
    elif c == 1 and len(n.input):
        del n.input[rng.randrange(len(n.input))]
    elif c == 2:
        n.input.append(_pick(rng, names + [""]))
    elif c == 3 and len(n.input):
        n.input[rng.randrange(len(n.input))] = _pick(rng, names)       # maybe a cycle, maybe a type clash
    else:
        n.output.append(_pick(rng, ["extra_out", "", names[0] if names else "x"]))
    return f"inputs/outputs of {n.name!r}"


def m_op_type(rng, m):
    n = _pick(rng, m.graph.node)
    if n is None:
        return None
    n.op_type = _pick(rng, OTHER_OPS)
    if rng.random() < 0.1:
        n.domain = _pick(rng, ["com.microsoft", "ai.onnx.ml", "custom"])
    return f"{n.name!r} into {n.op_type}"


def m_opset(rng, m):
    imp = _pick(rng, m.opset_import)
    if imp is None:
        return None
    c = rng.randrange(3)
    if c == 0:
        imp.version = _pick(rng, [-1, 0, 1, 6, 7, 9, 11, 13, 18, 21, 28, 29, 1000, 2**62])
    elif c == 1:
        m.opset_import.add(domain=_pick(rng, ["", "ai.onnx", "com.microsoft"]), version=rng.randrange(1, 30))
    else:
        imp.domain = _pick(rng, ["ai.onnx", "custom", ""])
    return "opset_import"


def m_graph_io(rng, m):
    g = m.graph
    c = rng.randrange(6)
    if c == 0 and len(g.output):
        del g.output[rng.randrange(len(g.output))]
    elif c == 1 and len(g.input):
        g.input.append(g.input[rng.randrange(len(g.input))])
    elif c == 2 and len(g.input):
        del g.input[rng.randrange(len(g.input))]
    elif c == 3 and len(g.output):
        g.output.append(g.output[rng.randrange(len(g.output))])
    elif c == 4 and len(g.initializer):
        g.initializer.append(g.initializer[rng.randrange(len(g.initializer))])
    elif c == 5 and len(g.input):
        g.input[rng.randrange(len(g.input))].name = _pick(rng, ["", "y", "renamed"])
    return "graph inputs/outputs"


def m_nodes(rng, m):
    g = m.graph
    if not len(g.node):
        return None
    c = rng.randrange(3)
    k = rng.randrange(len(g.node))
    if c == 0:
        del g.node[k]
    elif c == 1:
        g.node.append(g.node[k])
    else:
        j = rng.randrange(len(g.node))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(g.node[k])
        b.CopyFrom(g.node[j])
        g.node[k].CopyFrom(b)
        g.node[j].CopyFrom(a)
    return "node list"


def m_external_data(rng, m):
    """Move a tensor's data to an external file, maybe outside the folder (the canary)."""
    t = _pick(rng, [t for t in m.graph.initializer if t.raw_data])
    if t is None:
        return None
    n = len(t.raw_data)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    loc = _pick(rng, [f"../{CANARY}", f"sub/../../{CANARY}", f"/tmp/{CANARY}", "missing.bin", "data.bin", ""])
    entries = {"location": loc, "offset": str(_pick(rng, [0, 0, 8, -4, 2**62])),
               "length": _pick(rng, [str(n), str(n + 4), "-1", "abc", ""])}
    for k, v in entries.items():
        if rng.random() < 0.85:
            e = t.external_data.add()
            e.key, e.value = k, v
    return f"external data of {t.name!r} at {loc!r}"


def m_constant_value(rng, m):
    """Give a Constant-like node (or an initializer) extreme values: indices and shapes."""
    ts = [t for t in m.graph.initializer if t.data_type in (TensorProto.INT64, TensorProto.INT32)]
    t = _pick(rng, ts)
    if t is None:
        return None
    arr = numpy_helper.to_array(t).copy()
    if arr.size:
        flat = arr.reshape(-1)
        flat[rng.randrange(flat.size)] = _pick(rng, [v for v in EDGE_INTS if np.iinfo(arr.dtype).min <= v <=
                                                     np.iinfo(arr.dtype).max])
    t.CopyFrom(numpy_helper.from_array(arr, t.name))
    return f"values of {t.name!r}"


def m_function(rng, m):
    """Break a local function: its nodes, its signature, its opsets."""
    f = _pick(rng, m.functions)
    if f is None:
        return None
    c = rng.randrange(7)
    if c == 0 and len(f.node):
        n = _pick(rng, f.node)
        if len(n.input):
            n.input[rng.randrange(len(n.input))] = _pick(rng, ["", "ghost", f.input[0] if len(f.input) else "a",
                                                              n.output[0] if len(n.output) else "c"])
    elif c == 1 and len(f.node):
        _pick(rng, f.node).op_type = _pick(rng, OTHER_OPS + [f.name, "Block", "AddRelu"])  # maybe recursive
    elif c == 2 and len(f.input):
        del f.input[rng.randrange(len(f.input))]
    elif c == 3:
        f.output.append(_pick(rng, ["ghost", "c", ""]))
    elif c == 4 and len(f.opset_import):
        f.opset_import[0].version = _pick(rng, [0, 1, 6, 17, 1000])
    elif c == 5 and len(f.node):
        n = _pick(rng, f.node)
        n.domain = _pick(rng, ["custom", "", "other"])
    else:
        f.name = _pick(rng, ["Block", "AddRelu", "Scaled", ""])      # duplicate or empty function names
    return f"function {f.name!r}"


def m_bytes(rng, data: bytes) -> bytes:
    """Raw byte-level damage to the serialized protobuf."""
    b = bytearray(data)
    for _ in range(rng.randrange(1, 8)):
        if not b:
            break
        c = rng.randrange(4)
        k = rng.randrange(len(b))
        if c == 0:
            b[k] = rng.randrange(256)
        elif c == 1:
            del b[k:k + rng.randrange(1, 16)]
        elif c == 2:
            b[k:k] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        else:
            b[k] ^= 1 << rng.randrange(8)
    return bytes(b)


MUTATORS = [m_truncate_payload, m_tensor_dims, m_tensor_type, m_typed_payload, m_value_info_dim,
            m_value_info_type, m_attribute, m_attribute, m_add_attribute, m_drop_attribute, m_node_inputs,
            m_node_inputs, m_op_type, m_opset, m_graph_io, m_nodes, m_external_data, m_constant_value,
            m_constant_value, m_function, m_function]


def mutate(data: bytes, rng: random.Random, max_steps: int = 3) -> tuple[bytes, list[str]]:
    """One mutant of a serialized model; returns (bytes, what was done)."""
    if rng.random() < 0.08:
        return m_bytes(rng, data), ["byte damage"]
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception:
        return m_bytes(rng, data), ["byte damage (unparsable input)"]
    done = []
    for _ in range(rng.randrange(1, max_steps + 1)):
        fn = _pick(rng, MUTATORS)
        try:
            what = fn(rng, m)
        except Exception:                # noqa: BLE001 - the mutation did not apply (a value protobuf
            what = None                  # refuses, a tensor whose data is now external...)
        if what:
            done.append(f"{fn.__name__[2:]}: {what}")
    try:
        return m.SerializeToString(), done
    except Exception:
        return m_bytes(rng, data), ["byte damage (unserializable mutant)"]


# ------------------------------------------------------------------------------------------ running one case
# Crashes already reported, in files this fuzzer's owners may not edit (aotc/ops, aotc/kernel):
# (exception type, innermost aotc function) -> the regression test that tracks it. A crash
# with one of these signatures counts as "known", not as a new finding; the strict xfail
# tests in tests/test_known_op_bugs.py fail once the bug is fixed, so this list gets pruned.
KNOWN_CRASHES: dict[tuple[str, str], str] = {
}


def _signature(e: BaseException) -> tuple[str, str]:
    """(exception type, innermost function in aotc/ops, or else in aotc)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}aotc{os.sep}" in f.filename]
    in_ops = [f for f in frames if f"{os.sep}aotc{os.sep}ops{os.sep}" in f.filename]
    frames = in_ops or frames
    return type(e).__name__, (frames[-1].name if frames else "")


@dataclass
class Outcome:
    kind: str                 # "compiled", "refused", "known", "ort-refuses" (compiled, but ONNX
                              # Runtime refuses it: saved for triage); findings: "crash", "hang", "escape",
                              # "format" (an error message of several lines), "wrong" (compiled,
                              # and answers differently from ONNX Runtime: --full only)
    detail: str = ""

    @property
    def is_finding(self) -> bool:
        return self.kind in ("crash", "hang", "escape", "format", "wrong")


class _Timeout(BaseException):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int):
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise _Timeout()
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_opened_canary: list[str] = []
_hook_installed = False


def _install_audit_hook() -> None:
    """Record every open() of the canary file (it sits outside the model's folder)."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            p = os.fsdecode(args[0]) if not isinstance(args[0], os.PathLike) else os.fspath(args[0])
            if isinstance(p, str) and p.endswith(CANARY):
                _opened_canary.append(p)
    sys.addaudithook(hook)


class Workspace:
    """A folder holding the model file, with the canary one level up."""

    def __init__(self, root: Path | None = None):
        self._tmp = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="aotc_fuzz_")
            root = Path(self._tmp.name)
        self.root = Path(root)
        self.model_dir = self.root / "model"
        self.model_dir.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "sub").mkdir(exist_ok=True)
        (self.root / CANARY).write_bytes(bytes(range(256)) * 64)
        (self.model_dir / "data.bin").write_bytes(bytes(64))          # a legitimate external file, too short
        self.path = self.model_dir / "model.onnx"
        _install_audit_hook()

    def close(self):
        if self._tmp is not None:
            self._tmp.cleanup()


def run_case(data: bytes, ws: Workspace, shapes: dict | None = None, full: bool = False,
             seconds: int = CASE_SECONDS) -> Outcome:
    """Compile one model from bytes: analyze (or compile_model when `full`) and classify."""
    from aotc.compiler import compile_program, compile_model
    from aotc.errors import AotcError, BuildError, UnsupportedError

    ws.path.write_bytes(data)
    _opened_canary.clear()
    if full:
        seconds *= 6                      # the C compiler and ONNX Runtime (in a child process) run too
    try:
        with _time_limit(seconds), _quiet_numpy():
            if full:
                art = compile_model(ws.path, output_dir=ws.root / "out", shapes=shapes or None)
                out = _compare_with_onnx_runtime(ws, art, shapes)
            else:
                compile_program(ws.path, shapes=shapes or None)
                out = Outcome("compiled")
    except _Timeout:
        out = Outcome("hang", f"no answer within {seconds}s")
    except BuildError as e:
        out = Outcome("crash", f"BuildError: {e.message[:2000]}")
    except AotcError as e:
        if "\n" in e.message and not isinstance(e, UnsupportedError):      # (that one is a list by design)
            out = Outcome("format", f"{type(e).__name__} of several lines: {e.message!r}")
        else:
            out = Outcome("refused", f"{type(e).__name__}: {e.message.splitlines()[0] if e.message else ''}")
    except RecursionError:
        out = Outcome("crash", "RecursionError\n" + traceback.format_exc(limit=-8))
    except Exception as e:       # noqa: BLE001 - this is what the fuzzer looks for
        kind = "known" if _signature(e) in KNOWN_CRASHES else "crash"
        out = Outcome(kind, f"{type(e).__name__}: {e}\n" + traceback.format_exc(limit=-12))
    if _opened_canary:
        out = Outcome("escape", f"opened {_opened_canary[0]} outside the model's folder")
    return out


_ORT_RUNNER = r"""
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions()
so.log_severity_level = 4
feeds = dict(np.load(sys.argv[2]))
try:
    sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
    res = sess.run(None, feeds)
except Exception as e:
    print("ORT refuses:", str(e).splitlines()[0][:200])
    sys.exit(3)
np.savez(sys.argv[3], *res)
"""


_AOTC_RUNNER = r"""
import sys, numpy as np
from aotc.api import CompiledModel
from aotc.errors import AotcError
m = CompiledModel(sys.argv[1])
feeds = dict(np.load(sys.argv[2]))
try:
    res = m.run({k: feeds[k] for k in m.input_names})
except AotcError as e:
    print("aotc refuses:", e.message.splitlines()[0][:200])
    sys.exit(3)
np.savez(sys.argv[3], *res)
"""


def _compare_with_onnx_runtime(ws: Workspace, art: Path, shapes: dict | None) -> Outcome:
    """A mutant aotc compiled: run it and ONNX Runtime (in a child process: ORT aborts on some
    malformed models) on the same seeded inputs. Different answers are a finding ("wrong");
    a model ORT refuses is only counted ("compiled, ORT refuses")."""
    import subprocess

    from aotc.api import CompiledModel
    from aotc.check.inputs import sample_inputs
    from aotc.frontend import import_model, load_onnx

    g = import_model(load_onnx(ws.path), "fuzz", shapes)
    if sum(g.values[i].nbytes for i in g.inputs) > COMPARE_LIMIT_BYTES:
        return Outcome("compiled", "inputs too large to compare")
    feeds = sample_inputs(g, seed=1)
    np.savez(ws.root / "feeds.npz", **feeds)
    try:
        p = subprocess.run([sys.executable, "-c", _ORT_RUNNER, str(ws.path), str(ws.root / "feeds.npz"),
                            str(ws.root / "ref.npz")], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return Outcome("compiled", "ORT did not answer within 60s")
    if p.returncode != 0:
        return Outcome("ort-refuses", f"ORT refuses (exit {p.returncode}): {p.stdout.strip()[-200:]}")
    with np.load(ws.root / "ref.npz") as z:
        ref = [z[f"arr_{k}"] for k in range(len(z.files))]
    # the compiled model runs in a child process too: a trap in generated code is a finding,
    # not the end of the fuzzing run
    try:
        p = subprocess.run([sys.executable, "-c", _AOTC_RUNNER, str(art), str(ws.root / "feeds.npz"),
                            str(ws.root / "got.npz")], capture_output=True, text=True, timeout=60,
                           cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        return Outcome("hang", "the compiled model did not answer within 60s")
    if p.returncode < 0 or p.returncode > 3:
        return Outcome("crash", f"the compiled model's process died (exit {p.returncode}): {p.stderr[-500:]}")
    if p.returncode == 3:
        return Outcome("refused", f"at run time: {p.stdout.strip()[-300:]}")
    if p.returncode != 0:
        return Outcome("crash", f"running the compiled model failed: {p.stderr[-1500:]}")
    m = CompiledModel(art)
    with np.load(ws.root / "got.npz") as z:
        got = [z[f"arr_{k}"] for k in range(len(z.files))]
    for name, a, b in zip(m.output_names, got, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return Outcome("wrong", f"output {name}: aotc {a.dtype}{list(a.shape)}, ORT {b.dtype}{list(b.shape)}")
        if a.dtype.kind in "fc":
            ok = np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)
        else:
            ok = np.array_equal(a, b)
        if not ok:
            return Outcome("wrong", f"output {name} differs from ONNX Runtime")
    return Outcome("compiled", "matches ONNX Runtime")


@contextlib.contextmanager
def _quiet_numpy():
    import warnings
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------------------------------ drivers
def _save_finding(outdir: Path, data: bytes, out: Outcome, what: list[str], seed: str) -> Path:
    outdir.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256(data).hexdigest()[:16]
    (outdir / f"{h}.onnx").write_bytes(data)
    (outdir / f"{h}.txt").write_text(f"seed: {seed}\nmutations: {what}\noutcome: {out.kind}\n{out.detail}\n")
    return outdir / f"{h}.onnx"


def seeded_pass(seeds: list[Seed], per_seed: int, rng_seed: int = 0, full_every: int = 0,
                deadline: float | None = None, findings_dir: Path | None = None, log=None) -> dict:
    """Deterministic: `per_seed` mutants of every seed from random.Random(rng_seed).
    Returns counts by outcome and the findings [(seed, mutations, outcome)]."""
    rng = random.Random(rng_seed)
    ws = Workspace()
    counts: dict[str, int] = {}
    findings = []
    k = 0
    try:
        for rnd in range(per_seed):
            for s in seeds:
                if deadline is not None and time.time() > deadline:
                    return {"counts": counts, "findings": findings, "cases": k}
                data, what = mutate(s.data, rng)
                k += 1
                full = bool(full_every) and k % full_every == 0
                out = run_case(data, ws, s.shapes, full=full)
                counts[out.kind] = counts.get(out.kind, 0) + 1
                if out.kind == "ort-refuses" and findings_dir is not None:
                    _save_finding(findings_dir / "ort-refuses", data, out, what, s.name)
                if out.is_finding:
                    findings.append((s.name, what, out))
                    if findings_dir is not None:
                        p = _save_finding(findings_dir, data, out, what, s.name)
                        if log:
                            log(f"FINDING {out.kind} from {s.name} ({'; '.join(what)}): "
                                f"{out.detail.splitlines()[0]} -> {p}")
    finally:
        ws.close()
    return {"counts": counts, "findings": findings, "cases": k}


def atheris_fuzz(seeds: list[Seed], seconds: int, findings_dir: Path, corpus_dir: Path, full_every: int) -> None:
    import atheris

    corpus_dir.mkdir(parents=True, exist_ok=True)
    shapes_by_inputs = {}
    for s in seeds:
        (corpus_dir / (s.name.replace(":", "_") + ".onnx")).write_bytes(s.data)
        m = onnx.ModelProto()
        m.ParseFromString(s.data)
        shapes_by_inputs[tuple(i.name for i in m.graph.input)] = s.shapes
    ws = Workspace()
    state = {"n": 0, "findings": 0, "counts": {}}

    def shapes_for(data):
        m = onnx.ModelProto()
        try:
            m.ParseFromString(data)
        except Exception:
            return None
        return shapes_by_inputs.get(tuple(i.name for i in m.graph.input))

    def test_one(data: bytes) -> None:
        state["n"] += 1
        full = bool(full_every) and state["n"] % full_every == 0
        out = run_case(data, ws, shapes_for(data), full=full)
        state["counts"][out.kind] = state["counts"].get(out.kind, 0) + 1
        if out.is_finding:
            state["findings"] += 1
            p = _save_finding(findings_dir, data, out, ["atheris"], "atheris")
            print(f"FINDING {out.kind}: {out.detail.splitlines()[0]} -> {p}", flush=True)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.15:
            return atheris.Mutate(data, max(max_size, len(data)))
        out, _ = mutate(data, rng)
        return out

    argv = [sys.argv[0], str(corpus_dir), f"-max_total_time={seconds}", f"-timeout={CASE_SECONDS + 10}",
            "-rss_limit_mb=8192", "-max_len=8000000", "-print_final_stats=1"]
    atheris.Setup(argv, test_one, custom_mutator=custom_mutator)
    try:
        atheris.Fuzz()
    finally:
        print(f"atheris: {state['n']} cases, {state['counts']}, {state['findings']} findings", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--no-atheris", action="store_true", help="use the seeded random mutator only")
    ap.add_argument("--full", action="store_true", help="every 10th case: the C compiler too, and the "
                    "compiled model against ONNX Runtime")
    ap.add_argument("--findings", type=Path, default=ROOT / "build" / "fuzz" / "findings")
    ap.add_argument("--replay", type=Path, nargs="*", help="run these model files once and report")
    args = ap.parse_args(argv)
    if args.replay:
        ws = Workspace()
        bad = 0
        for p in args.replay:
            out = run_case(p.read_bytes(), ws, full=args.full)
            bad += out.is_finding
            print(f"{p}: {out.kind} {out.detail}")
        return 1 if bad else 0
    use_atheris = not args.no_atheris
    if use_atheris:
        try:
            import atheris
        except ImportError:
            print("atheris is not installed: using the seeded random mutator", flush=True)
            use_atheris = False
        else:
            # coverage feedback from aotc's own code (imported here first, instrumented)
            with atheris.instrument_imports(include=["aotc"]):
                import aotc.compiler  # noqa: F401
                import aotc.ops.registry as registry
                registry.supported_ops()          # loads every op module, instrumented too
    seeds = zoo_seeds() + function_seeds() + control_seeds() + node_seeds()
    print(f"{len(seeds)} seeds; fuzzing for {args.seconds}s; findings go to {args.findings}", flush=True)
    full_every = 10 if args.full else 0
    if use_atheris:
        atheris_fuzz(seeds, args.seconds, args.findings, ROOT / "build" / "fuzz" / "corpus", full_every)
        return 0
    res = seeded_pass(seeds, per_seed=10**9, rng_seed=args.seed, full_every=full_every,
                      deadline=time.time() + args.seconds, findings_dir=args.findings, log=print)
    print(f"{res['cases']} cases (seed {args.seed}): {res['counts']}; {len(res['findings'])} findings")
    return 1 if res["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
