"""LSTM, GRU and RNN against ONNX Runtime (layout 0) and the ONNX reference implementation
(layout 1, which ONNX Runtime's CPU kernels refuse), on random inputs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import aotc
from tests.helpers import NP2ONNX, assert_parity

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def rnn_model(op, S=5, B=2, I=3, H=4, direction="forward", bias=True, init_h=False, init_c=False,
              peep=False, seq_lens=None, seq_as_input=False, outputs=(True, True, True), layout=0,
              weights_as_inputs=False, seed=0, **attrs):
    """A one-node model; returns (model, feeds). Absent optional inputs/outputs are ''."""
    rng = np.random.default_rng(seed)
    G, D = GATES[op], 2 if direction == "bidirectional" else 1

    def r(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x_shape = (B, S, I) if layout else (S, B, I)
    st_shape = (B, D, H) if layout else (D, B, H)
    feeds = {"X": r(*x_shape)}
    inits = {"W": r(D, G * H, I, scale=0.5), "R": r(D, G * H, H, scale=0.5)}
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits["B"] = r(D, 2 * G * H, scale=0.3)
        names[3] = "B"
    if seq_lens is not None:
        arr = np.asarray(seq_lens, np.int32)
        (feeds if seq_as_input else inits)["L"] = arr
        names[4] = "L"
    if init_h:
        feeds["h0"] = r(*st_shape)
        names[5] = "h0"
    if init_c:
        feeds["c0"] = r(*st_shape)
        names[6] = "c0"
    if peep:
        inits["P"] = r(D, 3 * H, scale=0.5)
        names[7] = "P"
    if weights_as_inputs:
        feeds.update({k: inits.pop(k) for k in ("W", "R")})
    names = names[:max(k for k, n in enumerate(names) if n) + 1]
    n_out = 3 if op == "LSTM" else 2
    outs = [f"y{k}" if outputs[k] else "" for k in range(n_out)]
    outs = outs[:max(k for k, o in enumerate(outs) if o) + 1]
    node = helper.make_node(op, names, outs, hidden_size=H, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    g_in = [helper.make_tensor_value_info(k, NP2ONNX[v.dtype], v.shape) for k, v in feeds.items()]
    g_out = [helper.make_empty_tensor_value_info(o) for o in outs if o]
    init = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    g = helper.make_graph([node], f"test_{op}", g_in, g_out, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, feeds


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("states", [False, True])
def test_rnn_directions(op, direction, states, tmp_path):
    m, feeds = rnn_model(op, direction=direction, bias=states, init_h=states, init_c=states and op == "LSTM",
                         seed=hash((op, direction, states)) % 1000)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("weights_as_inputs", [False, True])
def test_gru_linear_before_reset(lbr, direction, weights_as_inputs, tmp_path):
    """Constant weights are transposed at compile time; weights fed as inputs at run time."""
    m, feeds = rnn_model("GRU", S=6, B=3, I=5, H=7, direction=direction, init_h=True,
                         linear_before_reset=lbr, weights_as_inputs=weights_as_inputs, seed=10 + lbr)
    assert_parity(m, tmp_path, feeds)


def test_lstm_peepholes_batch(tmp_path):
    m, feeds = rnn_model("LSTM", S=7, B=3, I=6, H=5, direction="bidirectional", init_h=True, init_c=True,
                         peep=True, seed=4)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_activations_and_clip(op, tmp_path):
    acts = {"LSTM": ["Sigmoid", "Relu", "Tanh"], "GRU": ["Sigmoid", "Relu"], "RNN": ["Relu"]}[op]
    m, feeds = rnn_model(op, direction="bidirectional", activations=acts * 2, clip=1.5, seed=5)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_rnn_only_final_state(op, tmp_path):
    """Y absent: only Y_h (and Y_c) are computed."""
    m, feeds = rnn_model(op, direction="reverse", outputs=(False, True, op == "LSTM"), seed=6)
    assert_parity(m, tmp_path, feeds)


def test_lstm_only_y(tmp_path):
    m, feeds = rnn_model("LSTM", outputs=(True, False, False), weights_as_inputs=True, seed=7)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("as_input", [False, True])
def test_rnn_sequence_lens(op, as_input, tmp_path):
    m, feeds = rnn_model(op, S=6, B=3, direction="bidirectional", init_h=True, seq_lens=[6, 2, 4],
                         seq_as_input=as_input, seed=8)
    assert_parity(m, tmp_path, feeds)


def test_rnn_sequence_lens_full_constant(tmp_path):
    m, feeds = rnn_model("LSTM", S=4, B=2, seq_lens=[4, 4], seed=9)
    assert_parity(m, tmp_path, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_rnn_layout_1(op, tmp_path):
    """Batch-major layout, checked against onnx.reference (ONNX Runtime rejects layout=1)."""
    m, feeds = rnn_model(op, S=4, B=3, direction="bidirectional", init_h=True, init_c=op == "LSTM",
                         layout=1, seed=11)
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    got = aotc.compile(path, output_dir=tmp_path / "out").run(feeds)
    ref = ReferenceEvaluator(m).run(None, feeds)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_constant_weights_are_transposed_at_compile_time():
    from aotc.frontend import import_model
    from aotc.ir.internal import PACKED_ATTR
    from aotc.passes import PassManager
    m, _ = rnn_model("LSTM", S=3, B=1, I=5, H=4, direction="bidirectional")
    g = PassManager().run(import_model(m, "t"))
    (n,) = g.nodes
    assert n.attr(PACKED_ATTR)
    assert g.values[n.inputs[1]].shape == (2, 5, 16) and g.values[n.inputs[2]].shape == (2, 4, 16)


def test_packed_node_folds_on_constant_inputs():
    """A packed node whose inputs all become constant still folds to the ONNX result."""
    from aotc.frontend import import_model
    from aotc.passes.infer import infer_shapes
    from aotc.passes.recurrent import prepack_recurrent_weights
    m, feeds = rnn_model("GRU", S=3, B=2, I=5, H=4, direction="bidirectional", linear_before_reset=1)
    g = prepack_recurrent_weights(infer_shapes(import_model(m, "t"), fold=False))
    g.values["X"].const = feeds["X"]
    g = infer_shapes(g, fold=True)
    assert not g.nodes
    ref = ReferenceEvaluator(m).run(None, feeds)
    for name, r in zip(["y0", "y1"], ref):
        np.testing.assert_allclose(g.values[name].const, r, rtol=1e-5, atol=1e-6)
