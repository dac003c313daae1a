"""Models exported by torch.onnx.export, both exporters (TorchScript-based and dynamo, which
writes local functions and newer opsets), compiled by aotc and compared with ONNX Runtime (a
CNN, a transformer encoder, recurrent layers, and data-dependent selections)."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from tests.helpers import assert_parity


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = nn.functional.silu(self.bn(self.c1(x)))
        y = nn.functional.relu6(self.dw(y)) + nn.functional.hardswish(self.dw(y))
        y = nn.functional.interpolate(y, scale_factor=2, mode="nearest")
        y = nn.functional.max_pool2d(y, 2) + nn.functional.avg_pool2d(y, 2)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True, activation="gelu")
        self.head = nn.Linear(32, 5)

    def forward(self, ids):
        h = self.layer(self.emb(ids))
        return torch.softmax(self.head(h), -1), h.mean(1)


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True)
        self.gru = nn.GRU(32, 8)

    def forward(self, x):
        y, _ = self.lstm(x)
        z, h = self.gru(y)
        return z, h


class Masking(nn.Module):
    """Selections whose size depends on the data (aotc/passes/bounded.py): a boolean mask over
    rows (the dynamo exporter expands the indices to the Shape of themselves), nonzero, unique."""

    def forward(self, x, s):
        picked = x[s > 0.5] * 2
        return picked, torch.nonzero(s > 0.2), torch.unique(torch.round(s * 4))


CASES = {
    "masking": (Masking, lambda: (torch.randn(10, 4), torch.rand(10))),
    "convnet": (ConvNet, lambda: (torch.randn(1, 3, 16, 16),)),
    "encoder": (Encoder, lambda: (torch.randint(0, 50, (2, 12)),)),
    "recurrent": (Recurrent, lambda: (torch.randn(6, 1, 8),)),
}


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_exported_model(case, dynamo, tmp_path):
    torch.manual_seed(0)
    cls, make_inputs = CASES[case]
    model = cls().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):      # realistic statistics, not 0/1
            m.running_mean.uniform_(-0.3, 0.3)
            m.running_var.uniform_(0.5, 1.5)
    args = make_inputs()
    path = tmp_path / f"{case}.onnx"
    kw = {"dynamo": dynamo}
    if not dynamo:
        kw["opset_version"] = 14
    torch.backends.mha.set_fastpath_enabled(False)   # the fused fast path has no ONNX export
    with torch.no_grad():
        torch.onnx.export(model, args, str(path), input_names=[f"in{k}" for k in range(len(args))], **kw)
    import onnx
    feeds = {f"in{k}": a.numpy() for k, a in enumerate(args)}
    # fresh random inputs of the same kind for the parity run
    rng = np.random.default_rng(1)
    for k, v in feeds.items():
        feeds[k] = rng.integers(0, 50, v.shape).astype(v.dtype) if v.dtype.kind == "i" else \
            rng.standard_normal(v.shape).astype(v.dtype)
    assert_parity(onnx.load(str(path)), tmp_path, feeds)
