"""A small CNN exported by torch.onnx (its dynamo exporter) with a dynamic batch, height and
width, as users export one: its input is [batch, 3, 4*h, 4*w] (the exporter names the sides
after the multiple it finds). 3 x 3 convolution + BatchNorm + ReLU, 2 x 2 max pooling, a
depthwise and a pointwise convolution, a 3 x 3 convolution of 2*width channels (a Winograd one
on the CPU targets), a strided one, the global mean and a linear head. Random weights (seeded).
Used by tests/test_run_time_dims.py (width 16) and tools/dims_bench.py (width 32)."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path


def export_cnn(path: Path, width: int = 16) -> Path:
    import torch

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            w2 = 2 * width
            self.c1, self.b1 = torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.BatchNorm2d(width)
            self.dw, self.pw = torch.nn.Conv2d(width, width, 3, padding=1, groups=width), torch.nn.Conv2d(width, w2, 1)
            self.c2 = torch.nn.Conv2d(w2, w2, 3, padding=1)
            self.c3, self.fc = torch.nn.Conv2d(w2, w2, 3, stride=2, padding=1), torch.nn.Linear(w2, 10)

        def forward(self, x):
            x = torch.nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
            x = torch.relu(self.c2(torch.relu(self.pw(torch.relu(self.dw(x))))))
            x = torch.relu(self.c3(x))
            return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))

    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=8)
    h, w = torch.export.Dim("h", min=2, max=64), torch.export.Dim("w", min=2, max=64)
    with contextlib.redirect_stdout(sys.stderr):         # (the exporter's progress)
        torch.onnx.export(CNN().eval(), (torch.randn(2, 3, 32, 32),), str(path), input_names=["x"],
                          output_names=["y"], dynamic_shapes={"x": {0: batch, 2: 4 * h, 3: 4 * w}}, dynamo=True,
                          external_data=False)
    return Path(path)
