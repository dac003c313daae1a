"""Elementwise ops, alone and fused, against ONNX Runtime on random inputs."""
import numpy as np
import pytest
from onnx import helper

from tests.helpers import assert_parity, graph_model, rand, single_op_model

UNARY = ["Relu", "Neg", "Abs", "Exp", "Sigmoid", "Tanh", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos",
         "Softplus", "Softsign", "Sign", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
         "Reciprocal", "Atan", "Sinh", "Cosh", "Tan", "ThresholdedRelu", "Mish"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op, tmp_path):
    x = rand(2, 3, 5, seed=1) * 2
    opset = 18 if op == "Mish" else 17
    assert_parity(single_op_model(op, {"x": x}, opset=opset), tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["Log", "Sqrt"])
def test_unary_positive_domain(op, tmp_path):
    x = rand(4, 7, seed=2, low=0.1, high=3.0)
    assert_parity(single_op_model(op, {"x": x}), tmp_path, {"x": x})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)),
                                    ((1,), (5, 2))])
def test_binary_broadcast(op, shapes, tmp_path):
    a = rand(*shapes[0], seed=3)
    b = rand(*shapes[1], seed=4)
    if op == "Pow":
        a = np.abs(a) + 0.5
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    assert_parity(single_op_model(op, {"a": a, "b": b}), tmp_path, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare(op, tmp_path):
    a = np.round(rand(3, 4, seed=5))
    b = np.round(rand(4, seed=6))
    assert_parity(single_op_model(op, {"a": a, "b": b}), tmp_path, {"a": a, "b": b})


def test_where_and_logic(tmp_path):
    a, b = rand(3, 4, seed=7), rand(3, 4, seed=8)
    nodes = [helper.make_node("Greater", ["a", "b"], ["g"]),
             helper.make_node("Less", ["a", "zero"], ["l"]),
             helper.make_node("Or", ["g", "l"], ["o"]),
             helper.make_node("Not", ["o"], ["n"]),
             helper.make_node("Where", ["n", "a", "b"], ["y"])]
    m = graph_model(nodes, {"a": a, "b": b}, ["y", "n"], {"zero": np.float32(0)})
    assert_parity(m, tmp_path, {"a": a, "b": b})


def test_clip_with_and_without_bounds(tmp_path):
    x = rand(4, 6, seed=9) * 3
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["a"]),
             helper.make_node("Clip", ["x", "", "hi"], ["b"]),
             helper.make_node("Clip", ["x"], ["c"])]
    m = graph_model(nodes, {"x": x}, ["a", "b", "c"], {"lo": np.float32(-1), "hi": np.float32(0.5)})
    assert_parity(m, tmp_path, {"x": x})


def test_cast_chain(tmp_path):
    x = rand(3, 5, seed=10) * 4
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=7),           # float -> int64 (truncates)
             helper.make_node("Cast", ["i"], ["f"], to=1),
             helper.make_node("Cast", ["x"], ["bl"], to=9),          # float -> bool
             helper.make_node("Mul", ["f", "x"], ["y"])]
    assert_parity(graph_model(nodes, {"x": x}, ["y", "i", "bl"]), tmp_path, {"x": x})


def test_fused_chain_with_shared_intermediate(tmp_path):
    """x*sigmoid(x) (SiLU) + residual: one value used twice inside a fused chain and also output."""
    x, r = rand(2, 8, 5, seed=11), rand(2, 8, 5, seed=12)
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["silu"]),
             helper.make_node("Add", ["silu", "r"], ["y"]),
             helper.make_node("Mul", ["silu", "s"], ["z"])]
    assert_parity(graph_model(nodes, {"x": x, "r": r}, ["y", "z", "silu"]), tmp_path, {"x": x, "r": r})


def test_int_arithmetic(tmp_path):
    rng = np.random.default_rng(13)
    a = rng.integers(-20, 20, (3, 4)).astype(np.int64)
    b = rng.integers(1, 7, (4,)).astype(np.int64)
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "a"], ["s"]),
             helper.make_node("Mod", ["s", "b"], ["y"])]
    assert_parity(graph_model(nodes, {"a": a, "b": b}, ["y", "s"]), tmp_path, {"a": a, "b": b})


def test_operand_read_only_for_its_type(tmp_path):
    """CastLike's second input gives only a type: the fused loop must not load it (an unused
    local would fail -Werror)."""
    x, like = rand(3, 4, seed=14) * 3, np.arange(12, dtype=np.int64).reshape(3, 4)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("CastLike", ["r", "like"], ["y"])]
    assert_parity(graph_model(nodes, {"x": x, "like": like}, ["y"], opset=19), tmp_path, {"x": x, "like": like})
