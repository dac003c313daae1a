"""Training steps as graphs of ai.onnx operators, rewritten when the model is read as
ai.onnx.ml's operators are (frontend/rewrite.py): BatchNormalization in training mode (the batch's
statistics, and the running ones updated), and ai.onnx.preview.training's optimizer steps
(Adagrad, Momentum, Adam).

An optimizer step node updates n tensors at once: inputs R (learning rate), T (update count), then the n
tensors X, their n gradients G and the n optimizer states of each kind; outputs the n new X
and then the new states, in the order of the inputs. The formulas are the operator spec's."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..errors import ModelError
from .emit import Emit

TRAINING = "ai.onnx.preview.training"


def _groups(e: Emit, kinds: int) -> tuple[str, str, list]:
    ins = list(e.node.input)
    n, rest = divmod(len(ins) - 2, kinds)
    if n < 1 or rest or len(e.node.output) != (kinds - 1) * n:
        raise ModelError(f"{e.label}: {len(ins)} inputs and {len(e.node.output)} outputs are not R, T and "
                         f"{kinds} groups of tensors with {kinds - 1} groups of outputs")
    return ins[0], ins[1], [ins[2 + k * n: 2 + (k + 1) * n] for k in range(kinds)]


def _scalar(e: Emit, value: float) -> str:
    return e.const(np.float32(value))


def _regularized(e: Emit, x: str, g: str, norm: float) -> str:
    return g if norm == 0 else e.op("Add", [e.op("Mul", [_scalar(e, norm), x]), g])


def _adagrad(e: Emit, a: dict):
    r, t, (xs, gs, hs) = _groups(e, 3)
    decay, eps, norm = (float(a.get(k, d)) for k, d in (("decay_factor", 0.0), ("epsilon", 0.0),
                                                      ("norm_coefficient", 0.0)))
    tf = e.op("Cast", [t], to=TensorProto.FLOAT)
    rate = e.op("Div", [r, e.op("Add", [_scalar(e, 1), e.op("Mul", [tf, _scalar(e, decay)])])])
    n = len(xs)
    for k, (x, g, h) in enumerate(zip(xs, gs, hs)):
        gr = _regularized(e, x, g, norm)
        h_new = e.op("Add", [h, e.op("Mul", [gr, gr])], out=e.node.output[n + k])
        adaptive = e.op("Add", [e.op("Sqrt", [h_new]), _scalar(e, eps)])
        e.op("Sub", [x, e.op("Div", [e.op("Mul", [rate, gr]), adaptive])], out=e.node.output[k])


def _momentum(e: Emit, a: dict):
    r, t, (xs, gs, vs) = _groups(e, 3)
    alpha, beta, norm = (float(a[k]) if k in a else None for k in ("alpha", "beta", "norm_coefficient"))
    mode = a.get("mode", b"standard")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if None in (alpha, beta, norm) or mode not in ("standard", "nesterov"):
        raise ModelError(f"{e.label}: alpha, beta, norm_coefficient and mode ('standard' or 'nesterov') are required")
    # beta applies from the second update on (T > 0); the first takes the whole gradient
    b = e.op("Where", [e.op("Greater", [t, e.const(np.int64(0))]), _scalar(e, beta), _scalar(e, 1)])
    n = len(xs)
    for k, (x, g, v) in enumerate(zip(xs, gs, vs)):
        gr = _regularized(e, x, g, norm)
        v_new = e.op("Add", [e.op("Mul", [_scalar(e, alpha), v]), e.op("Mul", [b, gr])], out=e.node.output[n + k])
        step = v_new if mode == "standard" else e.op("Add", [gr, e.op("Mul", [_scalar(e, alpha), v_new])])
        e.op("Sub", [x, e.op("Mul", [r, step])], out=e.node.output[k])


def _adam(e: Emit, a: dict):
    r, t, (xs, gs, vs, hs) = _groups(e, 4)
    alpha, beta, eps, norm, post = (float(a.get(k, d)) for k, d in (
        ("alpha", 0.9), ("beta", 0.999), ("epsilon", 1e-6), ("norm_coefficient", 0.0), ("norm_coefficient_post", 0.0)))
    # the bias-corrected rate R * sqrt(1 - beta^T) / (1 - alpha^T) from the second update on
    tf = e.op("Cast", [t], to=TensorProto.FLOAT)
    corrected = e.op("Div", [e.op("Mul", [r, e.op("Sqrt", [e.op("Sub", [_scalar(e, 1), e.op("Pow", [_scalar(e, beta), tf])])])]),
                             e.op("Sub", [_scalar(e, 1), e.op("Pow", [_scalar(e, alpha), tf])])])
    rate = e.op("Where", [e.op("Greater", [t, e.const(np.int64(0))]), corrected, r])
    n = len(xs)
    for k, (x, g, v, h) in enumerate(zip(xs, gs, vs, hs)):
        gr = _regularized(e, x, g, norm)
        v_new = e.op("Add", [e.op("Mul", [_scalar(e, alpha), v]), e.op("Mul", [_scalar(e, 1 - alpha), gr])],
                     out=e.node.output[n + k])
        h_new = e.op("Add", [e.op("Mul", [_scalar(e, beta), h]), e.op("Mul", [_scalar(e, 1 - beta), e.op("Mul", [gr, gr])])],
                     out=e.node.output[2 * n + k])
        x_new = e.op("Sub", [x, e.op("Mul", [rate, e.op("Div", [v_new, e.op("Add", [e.op("Sqrt", [h_new]),
                                                                                     _scalar(e, eps)])])])])
        e.op("Mul", [_scalar(e, 1 - post), x_new], out=e.node.output[k])


TRAINING_BUILDERS = {"Adagrad": _adagrad, "Momentum": _momentum, "Adam": _adam}


def batchnorm_training(e: Emit, a: dict):
    """BatchNormalization with training_mode = 1: Y normalized by the batch's mean and
    (population) variance over every axis but the channels; the second and third outputs, when
    asked for, the running mean and variance, input * momentum + batch's * (1 - momentum)."""
    x, scale, bias, mean, var = e.node.input[:5]
    eps, momentum = float(a.get("epsilon", 1e-5)), float(a.get("momentum", 0.9))
    r = e.rank(x)
    if r < 2:
        raise ModelError(f"{e.label}: input of rank {r} has no channel axis")
    axes = [0] + list(range(2, r))
    per_channel = e.const(np.array([-1] + [1] * (r - 2), np.int64), "channel_shape")
    batch_mean = e.reduce("ReduceMean", x, axes)
    centered = e.op("Sub", [x, batch_mean])
    batch_var = e.reduce("ReduceMean", e.op("Mul", [centered, centered]), axes)
    normed = e.op("Div", [centered, e.op("Sqrt", [e.op("Add", [batch_var, _scalar(e, eps)])])])
    e.op("Add", [e.op("Mul", [normed, e.op("Reshape", [scale, per_channel])]), e.op("Reshape", [bias, per_channel])],
         out=e.node.output[0])
    flat = e.const(np.array([-1], np.int64))
    for out, running, batch in zip(e.node.output[1:3], (mean, var), (batch_mean, batch_var)):
        if out:
            e.op("Add", [e.op("Mul", [running, _scalar(e, momentum)]),
                         e.op("Mul", [e.op("Reshape", [batch, flat]), _scalar(e, 1 - momentum)])], out=out)
