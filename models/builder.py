"""A small layer on onnx.helper for writing models by hand, with realistic random weights.

Every builder is seeded, so the same call gives the same bytes. Weights use He/Xavier
scaling so activations stay O(1) through deep networks; BatchNorm statistics are
non-trivial (mean != 0, var != 1) so that BN folding is really exercised.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
}


class ModelBuilder:
    def __init__(self, name: str, opset: int = 17, seed: int = 0):
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._n = 0

    # -- names -------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    # -- graph interface ---------------------------------------------------------------
    def input(self, name: str, shape, dtype=np.float32) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[np.dtype(dtype)], list(shape)))
        return name

    def output(self, name: str, shape=None, dtype=np.float32) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[np.dtype(dtype)], shape))
        return name

    def const(self, array, hint: str = "c") -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs, n_out: int = 1, name: str | None = None, outputs=None, **attrs):
        name = name or self.fresh(op_type.lower())
        outs = outputs or [f"{name}_out{k}" if n_out > 1 else f"{name}_out" for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def constant_node(self, array, hint: str = "k") -> str:
        """A Constant node, as older exporters write small tensors."""
        return self.op("Constant", [], name=self.fresh(hint), value=numpy_helper.from_array(np.asarray(array)))

    def build(self) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="aotc-models")
        m.ir_version = min(m.ir_version, 8)
        onnx.checker.check_model(m)
        return m

    # -- random weights ----------------------------------------------------------------
    def weight(self, shape, fan_in: int, gain: float = 2.0, hint: str = "w") -> str:
        w = self.rng.standard_normal(shape) * np.sqrt(gain / max(fan_in, 1))
        return self.const(w.astype(np.float32), hint)

    def bias(self, n: int, scale: float = 0.1, hint: str = "b") -> str:
        return self.const((self.rng.standard_normal(n) * scale).astype(np.float32), hint)

    # -- layers ------------------------------------------------------------------------
    def linear(self, x: str, din: int, dout: int, bias: bool = True, gain: float = 1.0, use_gemm: bool = False) -> str:
        if use_gemm:
            w = self.weight((dout, din), din, gain)
            ins = [x, w] + ([self.bias(dout)] if bias else [])
            return self.op("Gemm", ins, transB=1)
        y = self.op("MatMul", [x, self.weight((din, dout), din, gain)])
        return self.op("Add", [y, self.bias(dout)]) if bias else y

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None,
             group: int = 1, bias: bool = False, gain: float = 2.0) -> str:
        pad = k // 2 if pad is None else pad
        w = self.weight((cout, cin // group, k, k), cin // group * k * k, gain)
        ins = [x, w] + ([self.bias(cout)] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group)

    def batchnorm(self, x: str, c: int, eps: float = 1e-5) -> str:
        r = self.rng
        gamma = (1.0 + 0.2 * r.standard_normal(c)).astype(np.float32)
        beta = (0.1 * r.standard_normal(c)).astype(np.float32)
        mean = (0.2 * r.standard_normal(c)).astype(np.float32)
        var = (r.uniform(0.5, 1.5, c)).astype(np.float32)
        ins = [x] + [self.const(a, h) for a, h in ((gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var"))]
        return self.op("BatchNormalization", ins, epsilon=eps)
