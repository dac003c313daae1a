"""Two mobile CNN backbones of the kind OCR pipelines use, exported by torch.onnx (the dynamo
exporter) with weights whose distributions look trained:

  * PP-LCNet x1.0 ("PP-LCNet: A Lightweight CPU Convolutional Neural Network", Cui et al. 2021),
    the backbone of PaddleOCR's mobile detectors and recognizers: a 3x3 stride-2 stem, then 13
    depthwise-separable blocks (depthwise kxk + BN + hardswish, squeeze-excitation in the last
    two, pointwise 1x1 + BN + hardswish), 5x5 depthwise kernels in the deep blocks; head: global
    average pool, a 1x1 convolution to 1280 with bias, hardswish, Linear to 1000 classes.
  * MobileNetV3-Large width 1.0 ("Searching for MobileNetV3", Howard et al. 2019): a 3x3 stride-2
    stem, 15 inverted residual blocks (1x1 expansion, kxk depthwise, squeeze-excitation with a
    hardsigmoid gate in some, 1x1 projection, a residual when shapes allow; ReLU early and
    hardswish late), a 1x1 convolution to 960, global average pool, Linear 960->1280 + hardswish,
    Linear 1280->1000.

size="full" is the published network at 224x224 with 1000 classes; size="small" is the same
structure at width 0.25 (channels made divisible by 8), at most two blocks per repeated stage,
on a 64x64 input with 100 classes, so it exports, compiles and checks in seconds.

Hardswish, Hardsigmoid and ReLU are torch.nn's, so the exporter writes HardSwish, HardSigmoid
and Relu nodes; its graph optimizer folds every (eval-mode) BatchNorm into the Conv before it,
adaptive average pooling becomes ReduceMean, flatten a Reshape, Linear a Gemm.

Weights: see `trained_like` -- heavy-tailed, per-channel scaled, with a share of exact zeros and
of float32 subnormals (as trained models carry; issue 32 item 5), and BatchNorm statistics
calibrated on random batches so activations stay O(1) through the depth as in a trained model.

Exports take seconds and the zoo's builders are called by many test files, so the serialized
models are cached in-process and on disk (AOTC_ZOO_CACHE, default ~/.cache/aotc-zoo), keyed by
this file's source text and torch's version.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

OPSET = 18


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """The channel rounding of the MobileNet papers' reference code: the nearest multiple of
    `divisor` (at least `min_value`), never more than 10% below `v`."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _sizes(size: str) -> tuple[float, int, int]:
    """(width multiplier, input resolution, classes)."""
    if size == "full":
        return 1.0, 224, 1000
    if size == "small":
        return 0.25, 64, 100
    raise ValueError(f"size must be 'small' or 'full', not {size!r}")


# ----------------------------------------------------------------------------- torch modules
def _modules():
    """The torch.nn classes, defined on first use (torch is imported only when exporting)."""
    import torch
    nn = torch.nn

    class ConvBNAct(nn.Sequential):
        """kxk convolution (no bias, 'same' padding) + BatchNorm2d + an optional activation."""

        def __init__(self, cin, cout, k, stride=1, groups=1, act=nn.Hardswish):
            layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                      nn.BatchNorm2d(cout)]
            if act is not None:
                layers.append(act())
            super().__init__(*layers)

    class SqueezeExcite(nn.Module):
        """Global average pool, 1x1 conv c->squeeze + ReLU, 1x1 conv squeeze->c + hardsigmoid,
        times the input."""

        def __init__(self, c, squeeze):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(c, squeeze, 1)
            self.relu = nn.ReLU()
            self.fc2 = nn.Conv2d(squeeze, c, 1)
            self.gate = nn.Hardsigmoid()

        def forward(self, x):
            return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))

    class DepthSepBlock(nn.Module):
        """PP-LCNet's block: depthwise kxk (stride s) + BN + hardswish, optional SE (c -> c/4),
        pointwise 1x1 + BN + hardswish."""

        def __init__(self, k, cin, cout, stride, se):
            super().__init__()
            self.dw = ConvBNAct(cin, cin, k, stride, groups=cin)
            self.se = SqueezeExcite(cin, cin // 4) if se else nn.Identity()
            self.pw = ConvBNAct(cin, cout, 1)

        def forward(self, x):
            return self.pw(self.se(self.dw(x)))

    class PPLCNet(nn.Module):
        def __init__(self, cfg, stem, head, classes):
            super().__init__()
            self.stem = ConvBNAct(3, stem, 3, 2)
            self.blocks = nn.Sequential(*(DepthSepBlock(*row) for row in cfg))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.last_conv = nn.Conv2d(cfg[-1][2], head, 1, bias=True)
            self.act = nn.Hardswish()
            self.fc = nn.Linear(head, classes)

        def forward(self, x):
            h = self.act(self.last_conv(self.pool(self.blocks(self.stem(x)))))
            return self.fc(torch.flatten(h, 1))

    class InvertedResidual(nn.Module):
        """MobileNetV3's block: 1x1 expansion (when exp != cin), kxk depthwise (stride s),
        optional SE (exp -> make_divisible(exp/4)), 1x1 projection with no activation, plus
        the input when the stride is 1 and cin == cout."""

        def __init__(self, cin, k, exp, cout, se, act, stride):
            super().__init__()
            act = nn.Hardswish if act == "HS" else nn.ReLU
            self.residual = stride == 1 and cin == cout
            layers = [ConvBNAct(cin, exp, 1, act=act)] if exp != cin else []
            layers.append(ConvBNAct(exp, exp, k, stride, groups=exp, act=act))
            if se:
                layers.append(SqueezeExcite(exp, make_divisible(exp / 4, 8)))
            layers.append(ConvBNAct(exp, cout, 1, act=None))
            self.body = nn.Sequential(*layers)

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    class MobileNetV3(nn.Module):
        def __init__(self, cfg, stem, last_conv, last, classes):
            super().__init__()
            self.stem = ConvBNAct(3, stem, 3, 2)
            blocks, c = [], stem
            for k, exp, cout, se, act, s in cfg:
                blocks.append(InvertedResidual(c, k, exp, cout, se, act, s))
                c = cout
            self.blocks = nn.Sequential(*blocks)
            self.last_conv = ConvBNAct(c, last_conv, 1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(last_conv, last), nn.Hardswish(), nn.Linear(last, classes))

        def forward(self, x):
            h = self.pool(self.last_conv(self.blocks(self.stem(x))))
            return self.classifier(torch.flatten(h, 1))

    return PPLCNet, MobileNetV3


# (k, cin, cout, stride, SE) at width 1.0; index 6 is the 5x5 256->256 block repeated five times
PPLCNET_CFG = ([(3, 16, 32, 1, False), (3, 32, 64, 2, False), (3, 64, 64, 1, False), (3, 64, 128, 2, False),
                (3, 128, 128, 1, False), (3, 128, 256, 2, False)] + [(5, 256, 256, 1, False)] * 5
               + [(5, 256, 512, 2, True), (5, 512, 512, 1, True)])

# (k, exp, out, SE, activation, stride) at width 1.0 (MobileNetV3-Large, Table 1 of the paper)
MOBILENETV3_CFG = [(3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
                   (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
                   (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
                   (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
                   (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1)]


def _pplcnet_module(size: str):
    width, res, classes = _sizes(size)
    cfg = PPLCNET_CFG
    if size == "small":
        cfg = cfg[:6] + cfg[6:8] + cfg[11:]                       # two of the five 5x5 repeats
    cfg = [(k, make_divisible(ci * width), make_divisible(co * width), s, se) for k, ci, co, s, se in cfg]
    head = make_divisible(1280 * width)
    return _modules()[0](cfg, make_divisible(16 * width), head, classes), res


def _mobilenetv3_module(size: str):
    width, res, classes = _sizes(size)
    cfg = MOBILENETV3_CFG
    if size == "small":                      # at most the first two blocks of each output width
        kept: dict = {}
        for row in cfg:
            kept.setdefault(row[2], []).append(row)
        cfg = [row for rows in kept.values() for row in rows[:2]]
    cfg = [(k, make_divisible(e * width), make_divisible(o * width), se, a, s) for k, e, o, se, a, s in cfg]
    last_in = cfg[-1][2]
    return _modules()[1](cfg, make_divisible(16 * width), 6 * last_in, make_divisible(1280 * width),
                         classes), res


# ----------------------------------------------------------------------------- weights
def trained_like(module, seed: int, resolution: int = 64):
    """Gives `module` (a torch.nn.Module) weights distributed like a trained network's, in place,
    and returns it in eval mode.

    Why: random init (uniform, light-tailed, no exact zeros, no tiny values) is not what trained
    checkpoints hold. Trained models carry heavy-tailed weights, channels of very different
    scales, exact zeros (pruned or dead units) and float32 subnormals -- weights and BatchNorm
    scales decayed toward zero (issue 32 item 5) -- which a compiler's constant folding, weight
    packing and flush-to-zero settings must handle like ONNX Runtime does.

    What, drawn from numpy and torch generators seeded by `seed`:
      * every Conv2d / Linear weight: Laplace with the Kaiming standard deviation sqrt(2 / fan_in),
        times a log-normal scale (sigma 0.3) per output channel; then about 5% of its entries set
        to +-10**U(-44, -38.5) (float32 subnormals) and about 3% to exact zeros; biases N(0, 0.05);
      * every BatchNorm2d: gamma 1 + 0.2 N(0, 1) with about 3% of channels at 1e-40 (a subnormal,
        as pruned channels end up), beta N(0, 0.1);
      * BatchNorm running statistics calibrated: train mode with momentum=None (a cumulative
        average), 8 forward passes of N(0, 1) batches of 4 (3 x resolution x resolution) under
        no_grad, then eval(). So every BatchNorm normalizes what actually reaches it and
        activations stay O(1) through the depth, as in a trained model.
    The exporter folds each BatchNorm into its Conv, so a channel at gamma 1e-40 becomes a
    subnormal row of that Conv's weight: the exported initializers hold a little more than 5%
    subnormals (about 5.7%) and about 3% zeros.
    """
    import torch
    nn = torch.nn
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    def sprinkle(w: np.ndarray) -> np.ndarray:
        u = rng.random(w.shape)
        tiny = rng.choice([-1.0, 1.0], w.shape) * 10.0 ** rng.uniform(-44.0, -38.5, w.shape)
        w = np.where(u < 0.05, tiny, w)
        return np.where((u >= 0.05) & (u < 0.08), 0.0, w).astype(np.float32)

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                shape = tuple(m.weight.shape)
                fan_in = int(np.prod(shape[1:]))
                std = np.sqrt(2.0 / fan_in)
                w = rng.laplace(0.0, std / np.sqrt(2.0), shape)          # Laplace(b) has std b*sqrt(2)
                w *= rng.lognormal(0.0, 0.3, shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))
                m.weight.copy_(torch.from_numpy(sprinkle(w)))
                if m.bias is not None:
                    m.bias.copy_(torch.from_numpy((0.05 * rng.standard_normal(shape[0])).astype(np.float32)))
            elif isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                gamma = 1.0 + 0.2 * rng.standard_normal(c)
                gamma[rng.random(c) < 0.03] = 1e-40
                m.weight.copy_(torch.from_numpy(gamma.astype(np.float32)))
                m.bias.copy_(torch.from_numpy((0.1 * rng.standard_normal(c)).astype(np.float32)))
                m.reset_running_stats()
                m.momentum = None
    module.train()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(8):
            module(torch.randn(4, 3, resolution, resolution, generator=gen))
    return module.eval()


# ----------------------------------------------------------------------------- export and cache
_BUILDERS = {"pplcnet": (_pplcnet_module, 31), "mobilenetv3": (_mobilenetv3_module, 32)}


def _export(name: str, size: str) -> bytes:
    import torch
    make, seed = _BUILDERS[name]
    module, res = make(size)
    trained_like(module, seed, res)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.onnx"
        with contextlib.redirect_stdout(sys.stderr):         # (the exporter's progress)
            torch.onnx.export(module, (torch.randn(1, 3, res, res),), str(path), input_names=["x"],
                              output_names=["logits"], opset_version=OPSET, dynamo=True, external_data=False)
        return onnx.load(str(path)).SerializeToString()


def _cache_path(name: str, size: str) -> Path:
    # (torch's version from its metadata: a cache hit does not import torch, which takes a second)
    torch_version = importlib.metadata.version("torch")
    key = hashlib.sha256(Path(__file__).read_bytes() + b"\0" + torch_version.encode()).hexdigest()[:16]
    root = Path(os.environ.get("AOTC_ZOO_CACHE") or Path.home() / ".cache" / "aotc-zoo")
    return root / f"{name}_{size}_{key}.onnx"


@functools.lru_cache(maxsize=None)
def _serialized(name: str, size: str) -> bytes:
    _sizes(size)
    path = _cache_path(name, size)
    try:
        return path.read_bytes()
    except OSError:
        pass
    data = _export(name, size)
    try:                                                 # atomically: concurrent test workers
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass                                             # an unwritable cache: export again next time
    return data


def _model(name: str, size: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(_serialized(name, size))           # a fresh proto: callers mutate models
    return m


def pplcnet(size: str = "small") -> onnx.ModelProto:
    """PP-LCNet x1.0 at 224x224, 1000 classes (small: x0.25, 64x64, 100 classes)."""
    return _model("pplcnet", size)


def mobilenetv3(size: str = "small") -> onnx.ModelProto:
    """MobileNetV3-Large 1.0 at 224x224, 1000 classes (small: 0.25, 64x64, 100 classes)."""
    return _model("mobilenetv3", size)
