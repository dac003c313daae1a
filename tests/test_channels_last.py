"""Channels-last tensors around depthwise convolutions (passes/layout.py, ops/channels_last.py;
the transposing packers of runtime/aotc_gemm_packed.h that read them): MobileNet-style blocks
exported by torch.onnx.export with trained-looking weights, against ONNX Runtime, and against
the same model compiled with the option planar (every tensor channels-first, the depthwise
convolutions as loop nests over planes), which must give the same bits: each output a sum of
the same products in the same order."""
import numpy as np
import onnx
import pytest
import torch
import torch.nn as nn

import aotc
from models.mobile import trained_like
from tests.helpers import assert_parity


class Inverted(nn.Module):
    """1x1 expand, activation, depthwise k x k, activation, (squeeze-excitation), 1x1 project,
    (residual)."""

    def __init__(self, cin, exp, cout, k, stride, act, se=None, dilation=1):
        super().__init__()
        pad = dilation * (k - 1) // 2
        self.expand = nn.Conv2d(cin, exp, 1)
        self.dw = nn.Conv2d(exp, exp, k, stride, pad, dilation=dilation, groups=exp)
        self.project = nn.Conv2d(exp, cout, 1)
        self.act = act()
        # squeeze-excitation, its pooling a GlobalAveragePool ("pool") or a ReduceMean ("mean")
        self.se = se
        if se:
            self.squeeze = nn.Sequential(nn.Conv2d(exp, 8, 1), nn.ReLU(), nn.Conv2d(8, exp, 1), nn.Hardsigmoid())
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.act(self.dw(self.act(self.expand(x))))
        if self.se == "pool":
            y = y * self.squeeze(nn.functional.adaptive_avg_pool2d(y, 1))
        elif self.se == "mean":
            y = self.squeeze(y.mean((2, 3), keepdim=True)) * y
        y = self.project(y)
        return x + y if self.residual else y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1)
        self.blocks = nn.Sequential(
            Inverted(16, 72, 24, 3, 1, nn.ReLU6),               # 72 channels: 4 blocks of 16 and 8
            Inverted(24, 96, 24, 5, 2, nn.Hardswish),           # 5 x 5 at stride 2
            Inverted(24, 64, 24, 7, 1, nn.ReLU),                # 7 x 7, residual add
            Inverted(24, 48, 24, 3, 1, nn.ReLU6, dilation=2),   # dilated
            Inverted(24, 96, 32, 3, 1, nn.Hardswish, se="pool"),    # squeeze-excitation blocks
            Inverted(32, 64, 32, 5, 1, nn.Hardswish, se="mean"),
        )
        self.side = nn.Conv2d(32, 32, 3, padding=1, groups=32)      # its output read by a pooling alone
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        y = self.blocks(nn.functional.hardswish(self.stem(x)))
        pooled = nn.functional.adaptive_avg_pool2d(y + self.side(y), 1)
        return self.head(torch.flatten(pooled, 1)), y


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    torch.manual_seed(0)
    net = trained_like(Net().eval(), seed=3, resolution=40)
    path = tmp_path_factory.mktemp("channels_last") / "net.onnx"
    with torch.no_grad():
        torch.onnx.export(net, (torch.randn(1, 3, 40, 40),), str(path), input_names=["x"],
                          output_names=["logits", "features"], opset_version=17, dynamo=False)
    return path


def _feeds(seed: int):
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, 40, 40)).astype(np.float32)}


def _channels_last_kernels(directory) -> int:
    return sum(p.read_text().count("depthwise convolution, channels last") for p in directory.glob("*.c"))


@pytest.mark.parametrize("target", ["native", "c"])
def test_blocks_match_onnx_runtime(model_path, target, tmp_path):
    assert_parity(onnx.load(str(model_path)), tmp_path, _feeds(1), target=target, threads=2)
    # every block's depthwise convolution went channels-last (the SE blocks' poolings and scaling
    # read their output channels-last); the side one, whose input is a graph output and whose
    # output an Add reads, stayed on planes
    assert _channels_last_kernels(tmp_path / "out") == 6


@pytest.mark.parametrize("threads", [1, 2])
def test_channels_last_gives_the_planar_bits(model_path, threads, tmp_path):
    last = aotc.compile(model_path, target="native", output_dir=tmp_path / "last", threads=threads)
    planar = aotc.compile(model_path, target="native,planar", output_dir=tmp_path / "planar", threads=threads)
    assert _channels_last_kernels(tmp_path / "last") == 6 and _channels_last_kernels(tmp_path / "planar") == 0
    for seed in (2, 3):
        for a, b in zip(last.run(_feeds(seed)), planar.run(_feeds(seed))):
            assert np.array_equal(a, b)


def test_squeeze_excitation_on_one_position_planes(tmp_path):
    """On 1 x 1 planes a squeeze-excitation's scales have the block's own shape, (N, C, 1, 1):
    they are not taken for a per-channel operand (which would put the scaled value in two
    groups); the network still compiles and matches ONNX Runtime (the small legacy_opset13 zoo
    model has such a block)."""
    torch.manual_seed(0)
    net = nn.Sequential(Inverted(16, 48, 16, 3, 1, nn.Hardswish, se="pool"),
                        Inverted(16, 48, 16, 5, 1, nn.ReLU, se="mean"))
    net = net.eval()                  # (trained_like calibrates on 3-channel images)
    path = tmp_path / "tiny.onnx"
    with torch.no_grad():
        torch.onnx.export(net, (torch.randn(2, 16, 1, 1),), str(path), input_names=["x"], opset_version=17,
                          dynamo=False)
    x = np.random.default_rng(6).standard_normal((2, 16, 1, 1)).astype(np.float32)
    assert_parity(onnx.load(str(path)), tmp_path, {"x": x}, threads=2)
