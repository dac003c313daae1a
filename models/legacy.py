"""Models written the way older exporters wrote them (PyTorch 1.x / tf2onnx / keras2onnx era).

legacy_opset11: opset 11. Constant nodes for every small tensor, BatchNormalization with
  `momentum`, Relu6 as Clip with min/max *inputs*, explicit Pad nodes before un-padded
  convolutions, Resize in its opset-11 form (roi + scales, or empty scales + sizes), the
  Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain that `x.view(x.size(0), -1)`
  exports to, GlobalAveragePool, Flatten and Gemm.
legacy_opset13: opset 13, a MobileNetV3-style network: HardSwish (as x * HardSigmoid(x):
  the HardSwish operator only exists from opset 14), HardSigmoid in
  squeeze-excite blocks, Squeeze/Unsqueeze with `axes` as an input, Dropout with a ratio
  input, Constant nodes, BatchNormalization.
"""
from __future__ import annotations

import numpy as np

from .builder import ModelBuilder
from .cnn import _make_div


def _bn(b: ModelBuilder, x: str, c: int, gamma: float = 1.0) -> str:
    r = b.rng
    arrays = [(gamma * (1.0 + 0.2 * r.standard_normal(c))).astype(np.float32),
              (0.1 * r.standard_normal(c)).astype(np.float32),
              (0.2 * r.standard_normal(c)).astype(np.float32),
              r.uniform(0.5, 1.5, c).astype(np.float32)]
    ins = [x] + [b.const(a, h) for a, h in zip(arrays, ("gamma", "beta", "mean", "var"))]
    return b.op("BatchNormalization", ins, epsilon=1e-5, momentum=0.9)


def _conv(b: ModelBuilder, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None,
          group: int = 1, gain: float = 2.0) -> str:
    return b.conv(x, cin, cout, k, stride, pad=pad, group=group, gain=gain)


# ----------------------------------------------------------------------------- opset 11
def _relu6_11(b: ModelBuilder, x: str) -> str:
    lo = b.constant_node(np.array(0.0, np.float32), "clip_min")
    hi = b.constant_node(np.array(6.0, np.float32), "clip_max")
    return b.op("Clip", [x, lo, hi])


def _pad_11(b: ModelBuilder, x: str, p: tuple, mode: str = "constant") -> str:
    """An explicit Pad (NCHW, pads [t, l, b, r]) as exporters write before a pad-0 conv."""
    t, l, bo, r = p
    pads = b.constant_node(np.array([0, 0, t, l, 0, 0, bo, r], np.int64), "pads")
    if mode == "constant":
        return b.op("Pad", [x, pads, b.constant_node(np.array(0.0, np.float32), "pad_value")], mode=mode)
    return b.op("Pad", [x, pads], mode=mode)


def _dw_block_11(b: ModelBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    """MobileNetV1 block: depthwise 3x3 (TF-style asymmetric Pad when strided) + pointwise 1x1."""
    if stride == 2:
        h = _conv(b, _pad_11(b, x, (0, 0, 1, 1)), cin, cin, 3, 2, pad=0, group=cin)
    else:
        h = _conv(b, x, cin, cin, 3, 1, group=cin)
    h = _relu6_11(b, _bn(b, h, cin))
    return _relu6_11(b, _bn(b, _conv(b, h, cin, cout, 1), cout))


def legacy_opset11(size: str = "small"):
    """A MobileNetV1-style classifier with an FPN-style top-down merge, opset 11.
    full: 224x224, widths 32..512 (MobileNetV1 0.5); small: 32x32, widths 8..64."""
    full = size == "full"
    res, widths, classes = (224, [16, 32, 64, 128, 256, 512], 1000) if full else (32, [8, 8, 16, 32, 32, 64], 10)
    b = ModelBuilder("legacy_opset11", opset=11, seed=11)
    x = b.input("x", [1, 3, res, res])
    # stem: reflect-padded 3x3 stride-2 conv, BN, Relu6
    h = _conv(b, _pad_11(b, x, (1, 1, 1, 1), "reflect"), 3, widths[0], 3, 2, pad=0)
    h = _relu6_11(b, _bn(b, h, widths[0]))
    c = widths[0]
    feats = []
    for k, w in enumerate(widths[1:]):
        h = _dw_block_11(b, h, c, w, 2 if k in (1, 2, 4) else 1)
        if full and k in (2, 3):
            h = _dw_block_11(b, h, w, w, 1)
        c = w
        feats.append((h, c))
    # top-down: upsample the deepest map (nearest, opset-11 roi + scales) and merge
    (c4, n4), (c5, n5) = feats[-2], feats[-1]
    lat = _bn(b, _conv(b, c5, n5, n4, 1, gain=1.0), n4)
    roi = b.constant_node(np.array([], np.float32), "roi")
    scales = b.constant_node(np.array([1, 1, 2, 2], np.float32), "scales")
    up = b.op("Resize", [lat, roi, scales], mode="nearest", coordinate_transformation_mode="asymmetric",
              nearest_mode="floor")
    h = b.op("Add", [c4, up])
    # and a bilinear resize to a fixed size, as torch.nn.functional.interpolate exports it
    side = res // 8 + res // 32
    sizes = b.constant_node(np.array([1, n4, side, side], np.int64), "sizes")
    empty = b.constant_node(np.array([], np.float32), "empty_scales")
    h = b.op("Resize", [h, roi, empty, sizes], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    h = _relu6_11(b, _bn(b, _conv(b, h, n4, n5, 3, 2), n5))
    # classifier: GlobalAveragePool, then x.view(x.size(0), -1) -> Gemm -> Relu6 -> Flatten -> Gemm
    p = b.op("GlobalAveragePool", [h])
    shape = b.op("Shape", [p])
    n = b.op("Gather", [shape, b.constant_node(np.array(0, np.int64), "idx")], axis=0)
    n = b.op("Unsqueeze", [n], axes=[0])
    target = b.op("Concat", [n, b.constant_node(np.array([-1], np.int64), "minus_one")], axis=0)
    f = b.op("Reshape", [p, target])
    hidden = 4 * n5 if full else 2 * n5
    f = _relu6_11(b, b.op("Gemm", [f, b.weight((hidden, n5), n5, 2.0), b.bias(hidden)], transB=1))
    f = b.op("Flatten", [f], axis=1)
    b.op("Gemm", [f, b.weight((classes, hidden), hidden, 1.0), b.bias(classes)], outputs=["logits"],
         transB=1, alpha=1.0, beta=1.0)
    b.output("logits", [1, classes])
    return b.build()


# ----------------------------------------------------------------------------- opset 13
def _hswish(b: ModelBuilder, x: str) -> str:
    """HardSwish became an operator in opset 14; opset-13 exporters write x * HardSigmoid(x)."""
    return b.op("Mul", [x, b.op("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])


def _se_conv(b: ModelBuilder, x: str, c: int) -> str:
    """Squeeze-excite with 1x1 convs (torchvision): GAP -> conv -> Relu -> conv -> HardSigmoid -> Mul."""
    s = _make_div(c // 4)
    g = b.op("GlobalAveragePool", [x])
    g = b.op("Relu", [b.conv(g, c, s, 1, bias=True)])
    g = b.op("HardSigmoid", [b.conv(g, s, c, 1, bias=True, gain=1.0)], alpha=1 / 6, beta=0.5)
    return b.op("Mul", [x, g])


def _se_linear(b: ModelBuilder, x: str, c: int) -> str:
    """Squeeze-excite with Linear layers: GAP -> Squeeze(axes input) -> Gemm -> Relu -> Gemm ->
    HardSigmoid -> Unsqueeze(axes input) -> Mul."""
    s = _make_div(c // 4)
    axes = b.constant_node(np.array([2, 3], np.int64), "axes")
    g = b.op("Squeeze", [b.op("GlobalAveragePool", [x]), axes])
    g = b.op("Relu", [b.op("Gemm", [g, b.weight((s, c), c, 2.0), b.bias(s)], transB=1)])
    g = b.op("Gemm", [g, b.weight((c, s), s, 1.0), b.bias(c)], transB=1)
    g = b.op("HardSigmoid", [g], alpha=0.2, beta=0.5)
    g = b.op("Unsqueeze", [g, b.constant_node(np.array([2, 3], np.int64), "axes")])
    return b.op("Mul", [x, g])


def _bneck(b: ModelBuilder, x: str, cin: int, k: int, exp: int, cout: int, se: str | None, act: str,
           stride: int) -> str:
    def a(y):
        return _hswish(b, y) if act == "HS" else b.op("Relu", [y])

    h = x
    if exp != cin:
        h = a(_bn(b, _conv(b, h, cin, exp, 1), exp))
    h = a(_bn(b, _conv(b, h, exp, exp, k, stride, group=exp), exp))
    if se == "conv":
        h = _se_conv(b, h, exp)
    elif se == "linear":
        h = _se_linear(b, h, exp)
    res = stride == 1 and cin == cout
    h = _bn(b, _conv(b, h, exp, cout, 1, gain=1.0), cout, gamma=0.5 if res else 1.0)
    return b.op("Add", [x, h]) if res else h


def legacy_opset13(size: str = "small"):
    """MobileNetV3-Small (Howard et al. 2019), opset 13. full: the real config at 224x224;
    small: the first blocks at reduced width on 32x32."""
    full = size == "full"
    # k, exp, out, se, act, stride  (torchvision mobilenet_v3_small)
    cfg = [(3, 16, 16, "conv", "RE", 2), (3, 72, 24, None, "RE", 2), (3, 88, 24, None, "RE", 1),
           (5, 96, 40, "linear", "HS", 2), (5, 240, 40, "conv", "HS", 1), (5, 240, 40, "linear", "HS", 1),
           (5, 120, 48, "conv", "HS", 1), (5, 144, 48, "linear", "HS", 1), (5, 288, 96, "conv", "HS", 2),
           (5, 576, 96, "linear", "HS", 1), (5, 576, 96, "conv", "HS", 1)]
    if full:
        res, scale, last, head, classes = 224, 1.0, 576, 1024, 1000
    else:
        res, scale, last, head, classes = 32, 0.5, 96, 128, 10
        cfg = [cfg[i] for i in (0, 1, 2, 3, 4, 8, 9)]
    b = ModelBuilder("legacy_opset13", opset=13, seed=13)
    x = b.input("x", [1, 3, res, res])
    c = 16
    h = _hswish(b, _bn(b, _conv(b, x, 3, c, 3, 2), c))
    for k, exp, out, se, act, s in cfg:
        e, o = _make_div(exp * scale), _make_div(out * scale)
        h = _bneck(b, h, c, k, e, o, se, act, s)
        c = o
    lastc = _make_div(last * scale)
    h = _hswish(b, _bn(b, _conv(b, h, c, lastc, 1), lastc))
    p = b.op("GlobalAveragePool", [h])
    p = b.op("Squeeze", [p, b.constant_node(np.array([2, 3], np.int64), "axes")])
    p = _hswish(b, b.op("Gemm", [p, b.weight((head, lastc), lastc, 2.0), b.bias(head)], transB=1))
    p = b.op("Dropout", [p, b.constant_node(np.array(0.2, np.float32), "ratio")])
    logits = b.op("Gemm", [p, b.weight((classes, head), head, 1.0), b.bias(classes)], transB=1)
    b.op("Unsqueeze", [logits, b.constant_node(np.array([1], np.int64), "axes")], outputs=["logits"])
    b.output("logits", [1, 1, classes])
    return b.build()
