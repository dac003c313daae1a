"""Statically quantized zoo models in the QDQ format (ONNX Runtime's `quant_pre_process`, then
`quantize_static` with its defaults: QDQ, uint8 activations, int8 weights per channel,
calibrated on 4 random inputs) compiled by aotc, beside ONNX Runtime on the same file: latency
at one thread (medians of --runs runs, in 3 rounds of back-to-back runs per engine, each round
after an untimed run), for aotc's target as given (on c-avx512 the QDQ islands become integer
operators, passes/qdq.py) and with `,qdq_float` (the model as written: float32 between its
DequantizeLinear and QuantizeLinear nodes); and how far each output is from ONNX Runtime's and
from the float model's.

With --format qoperator, quantize_static writes its QOperator form instead (QLinearConv,
QLinearAdd, QLinearGlobalAveragePool, ...: ONNX Runtime's contrib operators, which aotc
rewrites when it reads the model, frontend/contrib_quant.py).

python -m tools.qdq_bench [--models resnet50,mobilenetv2] [--format qdq|qoperator] [--runs 15] [--target native]
                          [--workdir DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx


def quantized(name: str, workdir: Path, rng, form: str = "qdq") -> tuple[Path, Path, dict]:
    """(float model, its quantized model in `form` (qdq, qoperator), a fresh input) of zoo model
    `name` at full size"""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from models.zoo import ZOO
    workdir.mkdir(parents=True, exist_ok=True)
    fp, pp, q = workdir / f"{name}.onnx", workdir / f"{name}_pre.onnx", workdir / f"{name}_{form}.onnx"
    model = ZOO[name].build("full")
    onnx.save(model, str(fp))
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]

    def sample():
        return {inp.name: rng.standard_normal(shape).astype(np.float32)}

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([sample() for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    cwd = os.getcwd()
    os.chdir(workdir)                # (the quantization tools leave temporary files in the current folder)
    try:
        quant_pre_process(str(fp), str(pp), skip_symbolic_shape=True)
        fmt = QuantFormat.QOperator if form == "qoperator" else QuantFormat.QDQ
        quantize_static(str(pp), str(q), Calibration(), quant_format=fmt, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    finally:
        os.chdir(cwd)
    return fp, q, sample()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    ap.add_argument("--format", choices=["qdq", "qoperator"], default="qdq")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--target", default="native")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/aotc-qdq"))
    a = ap.parse_args()
    import onnxruntime as ort

    from aotc.api import load
    from aotc.compiler import compile_model
    from aotc.targets import load_target
    rng = np.random.default_rng(0)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    targets = {"aotc": a.target}
    if "qdq_float" in load_target(a.target).options and a.format == "qdq":
        targets["aotc qdq_float"] = f"{a.target},qdq_float"
    print(f"{a.format}, 1 thread, target {load_target(a.target).name}; ms (medians of {a.runs} runs)")
    for name in a.models.split(","):
        fp, q, feeds = quantized(name, a.workdir / name, rng, a.format)
        engines = {k: load(compile_model(q, target=t, output_dir=a.workdir / name / k.replace(" ", "_"), threads=1),
                           threads=1) for k, t in targets.items()}
        s = ort.InferenceSession(str(q), so)
        runs = {k: (lambda m=m: m.run(feeds)) for k, m in engines.items()}
        runs["ORT"] = lambda: s.run(None, feeds)
        times: dict[str, list] = {k: [] for k in runs}
        for _ in range(3):
            for k, f in runs.items():
                f()
                for _ in range(-(-a.runs // 3)):
                    t0 = time.perf_counter()
                    f()
                    times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        ref = ort.InferenceSession(str(fp), so).run(None, feeds)[0]
        want = np.asarray(s.run(None, feeds)[0])
        cols = [f"ORT {med['ORT']:.2f}"]
        for k, m in engines.items():
            got = np.asarray(m.run(feeds)[0])
            cols.append(f"{k} {med[k]:.2f} (ORT/aotc {med['ORT'] / med[k]:.2f}; max |aotc - ORT| "
                        f"{np.abs(got - want).max():.4f}, |aotc - float| {np.abs(got - ref).max():.4f})")
        print(f"{name}: " + "; ".join(cols) + f"; ORT |int8 - float| {np.abs(want - ref).max():.4f}")


if __name__ == "__main__":
    main()
