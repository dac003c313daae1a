"""Convolutional networks: LeNet-5, ResNet-50, MobileNetV2 and a YOLO-style detector.

size="full" is the real architecture at its usual input size; size="small" keeps every kind
of layer (and the way they connect) with fewer blocks and channels on a 64x64 input, so it
compiles and checks in a few seconds.

Random weights: He-scaled convolutions keep activations O(1) layer to layer; the last
BatchNorm of every residual branch gets a small gamma (as "zero-init residual" training
leaves it) so that the sum of many residual branches does not grow with depth.
"""
from __future__ import annotations

import numpy as np

from .builder import ModelBuilder


# ----------------------------------------------------------------------------- shared layers
def bn(b: ModelBuilder, x: str, c: int, gamma: float = 1.0, eps: float = 1e-5) -> str:
    """BatchNormalization with realistic statistics; `gamma` scales the learned scale."""
    r = b.rng
    g = (gamma * (1.0 + 0.2 * r.standard_normal(c))).astype(np.float32)
    beta = (0.1 * r.standard_normal(c)).astype(np.float32)
    mean = (0.2 * r.standard_normal(c)).astype(np.float32)
    var = r.uniform(0.5, 1.5, c).astype(np.float32)
    ins = [x] + [b.const(a, h) for a, h in ((g, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var"))]
    return b.op("BatchNormalization", ins, epsilon=eps)


def relu6(b: ModelBuilder, x: str) -> str:
    return b.op("Clip", [x, b.const(np.float32(0.0), "zero"), b.const(np.float32(6.0), "six")])


def silu(b: ModelBuilder, x: str) -> str:
    return b.op("Mul", [x, b.op("Sigmoid", [x])])


def conv_bn(b: ModelBuilder, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
            act: str | None = "relu", gamma: float = 1.0, gain: float = 2.0) -> str:
    y = bn(b, b.conv(x, cin, cout, k, stride, group=group, gain=gain), cout, gamma)
    if act == "relu":
        return b.op("Relu", [y])
    if act == "relu6":
        return relu6(b, y)
    if act == "silu":
        return silu(b, y)
    return y


def classifier(b: ModelBuilder, x: str, c: int, classes: int, out: str = "logits") -> str:
    """GlobalAveragePool -> Flatten -> Gemm, as torchvision exports it."""
    p = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.weight((classes, c), c, 1.0)
    b.op("Gemm", [p, w, b.bias(classes)], outputs=[out], transB=1)
    b.output(out, [1, classes])
    return out


# ----------------------------------------------------------------------------- LeNet-5
def lenet5(size: str = "small"):
    """LeCun et al. 1998 on a 1x32x32 image (the same network at both sizes)."""
    b = ModelBuilder("lenet5", opset=17, seed=10)
    x = b.input("x", [1, 1, 32, 32])
    h = b.op("Tanh", [b.conv(x, 1, 6, 5, pad=0, bias=True, gain=1.0)])           # 6x28x28
    h = b.op("AveragePool", [h], kernel_shape=[2, 2], strides=[2, 2])             # 6x14x14
    h = b.op("Relu", [b.conv(h, 6, 16, 5, pad=0, bias=True)])                    # 16x10x10
    h = b.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])                 # 16x5x5
    h = b.op("Flatten", [h], axis=1)
    h = b.op("Relu", [b.linear(h, 400, 120, use_gemm=True, gain=2.0)])
    h = b.op("Relu", [b.linear(h, 120, 84, use_gemm=True, gain=2.0)])
    y = b.linear(h, 84, 10, use_gemm=True)
    b.op("Softmax", [y], outputs=["probs"], axis=-1)
    b.output("probs", [1, 10])
    return b.build()


# ----------------------------------------------------------------------------- ResNet-50
def _bottleneck(b: ModelBuilder, x: str, cin: int, width: int, stride: int) -> tuple[str, int]:
    cout = width * 4
    h = conv_bn(b, x, cin, width, 1)
    h = conv_bn(b, h, width, width, 3, stride)           # v1.5: the stride sits on the 3x3 conv
    h = conv_bn(b, h, width, cout, 1, act=None, gamma=0.2)
    if stride != 1 or cin != cout:
        x = conv_bn(b, x, cin, cout, 1, stride, act=None, gamma=0.5, gain=1.0)
    return b.op("Relu", [b.op("Add", [h, x])]), cout


def resnet50(size: str = "small"):
    """He et al. 2015, torchvision's resnet50 (v1.5). small: 16-wide stem, [1, 1, 2, 1] blocks, 64x64."""
    full = size == "full"
    res, stem, widths, blocks, classes = (224, 64, [64, 128, 256, 512], [3, 4, 6, 3], 1000) if full else \
        (64, 16, [16, 32, 64, 128], [1, 1, 2, 1], 100)
    b = ModelBuilder("resnet50", opset=17, seed=50)
    x = b.input("x", [1, 3, res, res])
    h = conv_bn(b, x, 3, stem, 7, 2)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = stem
    for stage, (w, n) in enumerate(zip(widths, blocks)):
        for k in range(n):
            h, c = _bottleneck(b, h, c, w, 2 if (k == 0 and stage > 0) else 1)
    classifier(b, h, c, classes)
    return b.build()


# ----------------------------------------------------------------------------- MobileNetV2
def _make_div(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def mobilenetv2(size: str = "small"):
    """Sandler et al. 2018, torchvision's mobilenet_v2 (width 1.0, 224). small: width 0.35, fewer
    repeats, 64x64."""
    full = size == "full"
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
           (6, 320, 1, 1)]
    if full:
        res, width, last, classes = 224, 1.0, 1280, 1000
    else:
        res, width, last, classes = 64, 0.35, 256, 100
        cfg = [(t, c, min(n, 2), s) for t, c, n, s in cfg]
    b = ModelBuilder("mobilenetv2", opset=13, seed=2)
    x = b.input("x", [1, 3, res, res])
    c = _make_div(32 * width)
    h = conv_bn(b, x, 3, c, 3, 2, act="relu6")
    for t, ch, n, s in cfg:
        cout = _make_div(ch * width)
        for k in range(n):
            stride = s if k == 0 else 1
            hidden = c * t
            y = h
            if t != 1:
                y = conv_bn(b, y, c, hidden, 1, act="relu6")
            y = conv_bn(b, y, hidden, hidden, 3, stride, group=hidden, act="relu6")
            y = conv_bn(b, y, hidden, cout, 1, act=None, gamma=0.5 if (stride == 1 and c == cout) else 1.0,
                        gain=1.0)
            h = b.op("Add", [h, y]) if stride == 1 and c == cout else y
            c = cout
    lastc = _make_div(last * max(1.0, width)) if full else last
    h = conv_bn(b, h, c, lastc, 1, act="relu6")
    classifier(b, h, lastc, classes)
    return b.build()


# ----------------------------------------------------------------------------- YOLO
def _c2f(b: ModelBuilder, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    """YOLOv8's C2f: 1x1 conv, Split in halves, n bottlenecks on the last half, Concat all, 1x1 conv."""
    c = cout // 2
    y = conv_bn(b, x, cin, 2 * c, 1, act="silu")
    parts = list(b.op("Split", [y, b.const(np.array([c, c], np.int64), "split")], n_out=2, axis=1))
    for _ in range(n):
        h = conv_bn(b, parts[-1], c, c, 3, act="silu")
        h = conv_bn(b, h, c, c, 3, act="silu", gamma=0.5)
        parts.append(b.op("Add", [parts[-1], h]) if shortcut else h)
    return conv_bn(b, b.op("Concat", parts, axis=1), (2 + n) * c, cout, 1, act="silu")


def _sppf(b: ModelBuilder, x: str, cin: int, cout: int) -> str:
    c = cin // 2
    y = conv_bn(b, x, cin, c, 1, act="silu")
    pools = [y]
    for _ in range(3):
        pools.append(b.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return conv_bn(b, b.op("Concat", pools, axis=1), 4 * c, cout, 1, act="silu")


def _upsample(b: ModelBuilder, x: str) -> str:
    scales = b.const(np.array([1, 1, 2, 2], np.float32), "scales")
    return b.op("Resize", [x, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                nearest_mode="floor")


def yolo(size: str = "small", dynamic: bool = False):
    """A YOLOv5/v8-style detector: CSP backbone (C2f) with SiLU, SPPF, a PAN neck with nearest
    upsampling, and an anchor-based head decoded with Reshape/Transpose/Sigmoid into
    [1, boxes, 5 + classes]. full: 320x320, widths 16..256 (the "n" scale); small: 64x64, half width.
    dynamic: the head's grid sizes read from the map's Shape, as torch.onnx writes them with
    dynamic axes (the input's sizes left to models/build.py symbolic_input)."""
    full = size == "full"
    res, w, depth, nc = (320, [16, 32, 64, 128, 256], [1, 2, 2, 1], 80) if full else \
        (64, [8, 16, 32, 64, 128], [1, 1, 1, 1], 3)
    na, no = 3, 5 + nc
    b = ModelBuilder("yolo", opset=17, seed=5)
    x = b.input("x", [1, 3, res, res])
    # backbone
    h = conv_bn(b, x, 3, w[0], 3, 2, act="silu")                                   # /2
    h = conv_bn(b, h, w[0], w[1], 3, 2, act="silu")                                # /4
    h = _c2f(b, h, w[1], w[1], depth[0], True)
    h = conv_bn(b, h, w[1], w[2], 3, 2, act="silu")                                # /8
    p3 = _c2f(b, h, w[2], w[2], depth[1], True)
    h = conv_bn(b, p3, w[2], w[3], 3, 2, act="silu")                               # /16
    p4 = _c2f(b, h, w[3], w[3], depth[2], True)
    h = conv_bn(b, p4, w[3], w[4], 3, 2, act="silu")                               # /32
    h = _c2f(b, h, w[4], w[4], depth[3], True)
    p5 = _sppf(b, h, w[4], w[4])
    # neck (top-down, then bottom-up)
    n4 = _c2f(b, b.op("Concat", [_upsample(b, p5), p4], axis=1), w[4] + w[3], w[3], 1, False)
    n3 = _c2f(b, b.op("Concat", [_upsample(b, n4), p3], axis=1), w[3] + w[2], w[2], 1, False)
    d4 = conv_bn(b, n3, w[2], w[2], 3, 2, act="silu")
    n4b = _c2f(b, b.op("Concat", [d4, n4], axis=1), w[2] + w[3], w[3], 1, False)
    d5 = conv_bn(b, n4b, w[3], w[3], 3, 2, act="silu")
    n5b = _c2f(b, b.op("Concat", [d5, p5], axis=1), w[3] + w[4], w[4], 1, False)
    # detection head: per scale a 1x1 conv to na*(5+nc), decoded to [1, na*H*W, 5+nc]
    outs = []
    for feat, c, stride in ((n3, w[2], 8), (n4b, w[3], 16), (n5b, w[4], 32)):
        g = res // stride
        p = b.conv(feat, c, na * no, 1, bias=True, gain=1.0)
        if dynamic:         # batch and grid from the map's shape
            shape = b.op("Shape", [p])
            batch, grid = (b.op("Slice", [shape, b.const(np.array([i], np.int64), "start"),
                                          b.const(np.array([j], np.int64), "end")]) for i, j in ((0, 1), (2, 4)))
            target = b.op("Concat", [batch, b.const(np.array([na, no], np.int64), "head"), grid], axis=0)
            flat = b.op("Concat", [batch, b.const(np.array([-1, no], np.int64), "rows")], axis=0)
        else:
            target = b.const(np.array([1, na, no, g, g], np.int64), "shape")
            flat = None
        p = b.op("Reshape", [p, target])
        p = b.op("Transpose", [p], perm=[0, 1, 3, 4, 2])
        p = b.op("Sigmoid", [p])
        outs.append(b.op("Reshape", [p, flat or b.const(np.array([1, -1, no], np.int64), "shape")]))
    boxes = sum(na * (res // s) ** 2 for s in (8, 16, 32))
    b.op("Concat", outs, outputs=["detections"], axis=1)
    b.output("detections", [1, boxes, no])
    return b.build()
