"""An LSTM through ONNX Runtime's quantize_dynamic (its DynamicQuantizeLSTM: 8-bit weights, the
inputs and each step's hidden state quantized at run time) and the same LSTM in float32, each
compiled by aotc and run beside ONNX Runtime on the same file, timed alternating in one process
(aotc.bench.time_engines: rounds of back-to-back runs per engine, medians). The model: a torch
nn.LSTM exported by torch.onnx.export (opset 14), random weights. ONNX Runtime runs with one
intra-op thread at --threads 1 (its quantized LSTM's results depend on its thread count; aotc
check compares with it on one thread).

python -m tools.qlstm_bench [--input 128] [--hidden 256] [--layers 2] [--steps 50] [--batch 1]
                            [--threads 1] [--runs 100] [--rounds 10] [--target native]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx


def export(work: Path, inp: int, hidden: int, layers: int, steps: int, batch: int) -> tuple[Path, Path, np.ndarray]:
    """(float32 model, quantized model, an input)"""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(inp, hidden, num_layers=layers)

        def forward(self, x):
            return self.lstm(x)[0]

    x = torch.randn(steps, batch, inp)
    plain, quant = work / "lstm.onnx", work / "lstm_q.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (x,), str(plain), input_names=["x"], output_names=["y"], opset_version=14,
                          dynamo=False)
        quantize_dynamic(str(plain), str(quant), weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return plain, quant, x.numpy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("input", 128), ("hidden", 256), ("layers", 2), ("steps", 50), ("batch", 1),
                          ("threads", 1), ("runs", 100), ("rounds", 10)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--target", default="native")
    a = ap.parse_args(argv)
    import onnxruntime as ort

    from aotc.api import load
    from aotc.bench import time_engines
    from aotc.compiler import compile_model
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain, quant, x = export(work, a.input, a.hidden, a.layers, a.steps, a.batch)
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        engines, outputs = {}, {}
        for label, path in (("float32", plain), ("quantized", quant)):
            art = load(compile_model(path, target=a.target, output_dir=work / f"out_{label}", threads=a.threads),
                       threads=a.threads)
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            engines[f"aotc {label}"] = lambda art=art: art.run({"x": x})
            engines[f"ORT {label}"] = lambda sess=sess: sess.run(None, {"x": x})
            outputs[label] = (art.run({"x": x})[0], sess.run(None, {"x": x})[0])
        times = time_engines(engines, a.runs, 3, a.rounds)
    print(f"LSTM {a.input} -> {a.hidden}, {a.layers} layers, {a.steps} steps, batch {a.batch}; target {a.target}, "
          f"{a.threads} thread(s); medians of {a.runs} runs per engine in {a.rounds} rounds (ms)")
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    for label in ("float32", "quantized"):
        got, want = outputs[label]
        print(f"  {label:9}  aotc {med[f'aotc {label}']:.3f}  ORT {med[f'ORT {label}']:.3f}  "
              f"ORT / aotc {med[f'ORT {label}'] / med[f'aotc {label}']:.2f}  "
              f"largest difference {float(np.abs(got - want).max()):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
