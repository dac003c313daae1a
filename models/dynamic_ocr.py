"""A text detector and recognizer pair shaped like PaddleOCR's (DB and CRNN), exported by
torch.onnx with the dynamic axes that pair ships with: the detector's input [batch, 3, H, W]
(pages of any size, sides multiples of 32), the recognizer's [batch, 3, 48, W] (text lines of any
width). Random weights (seeded); the layer sizes are small, the structure is theirs:

  * detector: a strided convolutional backbone giving maps at 1/4, 1/8, 1/16 and 1/32 of the
    page, a feature pyramid whose top-down path resizes each map to its neighbour's size read
    from the graph (F.interpolate(size=...): Shape, Slice and Concat into Resize's `sizes`) and
    to fixed factors (scale_factor: Resize's `scales`), the levels concatenated, and a head of
    convolutions and two transposed convolutions back to the page's size, then a sigmoid;
  * recognizer: convolutions that fold the line's height to 1 while keeping width / 4 steps, a
    bidirectional LSTM over those steps and a per-step classifier with softmax.
Used by tests/test_run_time_dims.py and tools/dims_bench.py's `ocr` models."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path


def export_detector(path: Path, width: int = 8) -> Path:
    import torch
    F = torch.nn.functional

    def block(cin, cout, stride):
        return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, stride, 1), torch.nn.BatchNorm2d(cout),
                                   torch.nn.ReLU())

    class Detector(torch.nn.Module):
        def __init__(self):
            super().__init__()
            w = width
            self.stem = torch.nn.Sequential(block(3, w, 2), block(w, w, 2))                      # 1/4
            self.s3, self.s4, self.s5 = block(w, 2 * w, 2), block(2 * w, 4 * w, 2), block(4 * w, 8 * w, 2)
            self.lat = torch.nn.ModuleList(torch.nn.Conv2d(c, 4 * w, 1) for c in (w, 2 * w, 4 * w, 8 * w))
            self.smooth = torch.nn.ModuleList(torch.nn.Conv2d(4 * w, w, 3, padding=1) for _ in range(4))
            self.head = torch.nn.Sequential(block(4 * w, w, 1), torch.nn.ConvTranspose2d(w, w, 2, 2),
                                            torch.nn.BatchNorm2d(w), torch.nn.ReLU(),
                                            torch.nn.ConvTranspose2d(w, 1, 2, 2))

        def forward(self, x):
            c2 = self.stem(x)
            c3 = self.s3(c2)
            c4 = self.s4(c3)
            c5 = self.s5(c4)
            in2, in3, in4, in5 = (lat(c) for lat, c in zip(self.lat, (c2, c3, c4, c5)))
            out4 = in4 + F.interpolate(in5, size=in4.shape[2:], mode="nearest")
            out3 = in3 + F.interpolate(out4, size=in3.shape[2:], mode="nearest")
            out2 = in2 + F.interpolate(out3, scale_factor=2.0, mode="nearest")
            p5, p4, p3, p2 = (s(o) for s, o in zip(self.smooth[::-1], (in5, out4, out3, out2)))
            p5 = F.interpolate(p5, scale_factor=8.0, mode="nearest")
            p4 = F.interpolate(p4, scale_factor=4.0, mode="nearest")
            p3 = F.interpolate(p3, scale_factor=2.0, mode="nearest")
            return torch.sigmoid(self.head(torch.cat([p5, p4, p3, p2], 1)))

    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=4)
    h, w = torch.export.Dim("h", min=1, max=64), torch.export.Dim("w", min=1, max=64)
    with contextlib.redirect_stdout(sys.stderr):         # (the exporter's progress)
        torch.onnx.export(Detector().eval(), (torch.randn(1, 3, 64, 96),), str(path), input_names=["x"],
                          output_names=["maps"], dynamic_shapes={"x": {0: batch, 2: 32 * h, 3: 32 * w}},
                          dynamo=True, external_data=False)
    return Path(path)


def export_recognizer(path: Path, width: int = 16, classes: int = 40) -> Path:
    import torch

    class Recognizer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            w = width
            layers, cin = [], 3
            # height 48 -> 24 -> 12 -> 6 -> 3 -> 1; width -> 1/2 -> 1/4
            for cout, stride in ((w, (2, 2)), (w, (2, 2)), (2 * w, (2, 1)), (2 * w, (2, 1))):
                layers += [torch.nn.Conv2d(cin, cout, 3, stride, 1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]
                cin = cout
            self.convs = torch.nn.Sequential(*layers)
            self.fold = torch.nn.Conv2d(cin, cin, (3, 1))
            self.rnn = torch.nn.LSTM(cin, w, bidirectional=True, batch_first=True)
            self.fc = torch.nn.Linear(2 * w, classes)

        def forward(self, x):
            f = self.fold(self.convs(x)).squeeze(2).permute(0, 2, 1)        # [batch, W/4, C]
            return torch.softmax(self.fc(self.rnn(f)[0]), -1)

    torch.manual_seed(1)
    batch = torch.export.Dim("batch", min=1, max=8)
    w = torch.export.Dim("w", min=2, max=80)
    with contextlib.redirect_stdout(sys.stderr):
        torch.onnx.export(Recognizer().eval(), (torch.randn(2, 3, 48, 160),), str(path), input_names=["x"],
                          output_names=["probs"], dynamic_shapes={"x": {0: batch, 3: 4 * w}}, dynamo=True,
                          external_data=False)
    return Path(path)
