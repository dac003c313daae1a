"""The cuda target on a GPU: parity of every zoo model, and latency beside PyTorch.

python -m models.gpu_check zoo   [--size full] [--models a,b] [--jobs 8] [--target cuda:sm_90] [--report F]
python -m models.gpu_check torch [--batches 1,32] [--models resnet50,bert,...] [--report F]

`zoo`: every zoo model is built, compiled for the cuda target (in parallel: nvcc compiles one
file on one core), run next to ONNX Runtime (CPU) on the same seeded inputs, and timed (median
of `--runs` invokes after warm-up, each invoke copying inputs in and outputs out, as the API
does).
`torch`: models PyTorch builds itself (torchvision's ResNet-50 and MobileNetV2, Hugging Face
BERT-base, GPT-2 small and a ViT-tiny from configs with random weights, an MLP, a 2-layer LSTM)
are exported to ONNX, compiled by aotc, checked against the PyTorch output, and timed beside
PyTorch eager and torch.compile on the same GPU, float32 (TF32 off), median of CUDA-event
timings after warm-up; aotc's time includes its host<->device copies, PyTorch's inputs and
outputs stay on the GPU.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import statistics
import time
from pathlib import Path

import numpy as np


def _tf32(target: str) -> bool:
    """Does the target run float32 GEMMs in TF32 (cuda,tf32)?"""
    from aotc.targets import load_target
    return bool(load_target(target).get("numerics", {}).get("tf32", False))


# ----------------------------------------------------------------------------- zoo parity
def _compile_one(args):
    name, size, target, workdir = args
    import onnx
    from aotc.compiler import compile_model
    from models.zoo import ZOO
    e = ZOO[name]
    path = Path(workdir) / f"{name}_{size}.onnx"
    onnx.save(e.build(size), str(path))
    t0 = time.perf_counter()
    try:
        compile_model(path, target=target, output_dir=Path(workdir) / f"{name}_{size}_cuda", shapes=e.shapes_for(size))
        return name, time.perf_counter() - t0, None
    except Exception as ex:        # reported per model, the others go on
        return name, time.perf_counter() - t0, f"{type(ex).__name__}: {str(ex)[:400]}"


def zoo(a) -> str:
    from aotc.api import load
    from aotc.check.inputs import sample_inputs
    from aotc.check.parity import compare
    from aotc.check.runner import reference_outputs
    from aotc.frontend import import_model, load_onnx
    from models.zoo import ZOO
    names = a.models.split(",") if a.models else list(ZOO)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    with cf.ProcessPoolExecutor(a.jobs) as pool:
        built = {n: (t, err) for n, t, err in pool.map(_compile_one, [(n, a.size, a.target, str(work)) for n in names])}
    rows = ["| model | result | max abs err | max rel err | rtol / atol | aotc ms (median) | nvcc s |",
            "|---|---|---|---|---|---|---|"]
    for n in names:
        e = ZOO[n]
        t_build, err = built[n]
        if err:
            rows.append(f"| {n} | ERROR | | | | | {t_build:.0f} | {err} |")
            print(n, "ERROR", err, flush=True)
            continue
        path = work / f"{n}_{a.size}.onnx"
        feeds = sample_inputs(import_model(load_onnx(path), n, e.shapes_for(a.size)), seed=3)
        try:
            m = load(work / f"{n}_{a.size}_cuda")
            got = m.run({k: feeds[k] for k in m.input_names})
        except Exception as ex:
            rows.append(f"| {n} | ERROR | | | | | {t_build:.0f} | {type(ex).__name__}: {str(ex)[:300]} |")
            print(n, "ERROR", ex, flush=True)
            continue
        ref = reference_outputs(path, feeds)
        rtol, atol = (1e-2, 1e-2) if _tf32(a.target) else (e.rtol, e.atol)      # as `aotc check` takes tf32
        reps = [compare(o, x, y, rtol, atol) for o, x, y in zip(m.output_names, got, ref)]
        ok = all(r.passed for r in reps)
        arrays = [feeds[k] for k in m.input_names]
        for _ in range(5):
            m.run(arrays)
        ts = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            m.run(arrays)
            ts.append(time.perf_counter() - t0)
        rows.append(f"| {n} | {'PASS' if ok else 'FAIL'} | {max(r.max_abs_err for r in reps):.3g} | "
                    f"{max(r.max_rel_err for r in reps):.3g} | {rtol:g} / {atol:g} | "
                    f"{statistics.median(ts) * 1e3:.3f} | {t_build:.0f} |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


# ----------------------------------------------------------------------------- beside PyTorch
TORCH_MODELS = ("resnet50", "mobilenetv2", "bert", "gpt2", "vit", "mlp", "lstm")


def _torch_model(name: str, batch: int):
    """(module, example inputs) PyTorch and its libraries build, random weights; the same
    ones in every process (seeded here)."""
    import torch
    torch.manual_seed(0)
    if name in ("resnet50", "mobilenetv2"):
        import torchvision
        ctor = {"resnet50": "resnet50", "mobilenetv2": "mobilenet_v2"}[name]
        return getattr(torchvision.models, ctor)(weights=None).eval(), (torch.randn(batch, 3, 224, 224),)
    if name in ("bert", "gpt2", "vit"):
        import transformers as T
        if name == "bert":
            cfg = T.BertConfig(attn_implementation="eager")
            model = _Wrap(T.BertModel(cfg)).eval()
            return model, (torch.randint(0, cfg.vocab_size, (batch, 128)), torch.ones(batch, 128, dtype=torch.int64))
        if name == "gpt2":
            cfg = T.GPT2Config(attn_implementation="eager")
            return _Wrap(T.GPT2Model(cfg)).eval(), (torch.randint(0, cfg.vocab_size, (batch, 64)),)
        cfg = T.ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                          attn_implementation="eager")
        return _Wrap(T.ViTModel(cfg)).eval(), (torch.randn(batch, 3, 224, 224),)
    if name == "mlp":
        return (torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                    torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval(), (torch.randn(batch, 784),))
    if name == "lstm":
        return _Lstm().eval(), (torch.randn(32, batch, 64),)
    raise KeyError(name)


class _Wrap:
    """A Hugging Face model returning its last hidden state only (one output tensor)."""

    def __new__(cls, model):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                return self.m(*args).last_hidden_state

        return W()


def _Lstm():
    import torch

    class L(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.LSTM(64, 128)
            self.b = torch.nn.LSTM(128, 128, bidirectional=True)
            self.head = torch.nn.Linear(256, 10)

        def forward(self, x):
            y, _ = self.a(x)
            _, (h, _) = self.b(y)
            return self.head(torch.cat([h[0], h[1]], dim=-1))

    return L()


def _time_cuda(fn, runs: int, warmup: int = 10) -> float:
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def _prepare(args):
    """In a worker process: export one model, compile it with aotc, and run torch.compile on it
    once (its compiled graphs land in inductor's cache for the timing pass)."""
    name, batch, target, workdir = args
    import torch
    from aotc.compiler import compile_model
    t0 = time.perf_counter()
    try:
        model, inputs = _torch_model(name, batch)
        path = Path(workdir) / f"t_{name}_{batch}.onnx"
        with torch.no_grad():
            torch.onnx.export(model, inputs, str(path), opset_version=17, dynamo=False)
        compile_model(path, target=target, output_dir=Path(workdir) / f"t_{name}_{batch}_cuda")
        gpu = model.cuda()
        with torch.no_grad():
            torch.compile(gpu)(*(x.cuda() for x in inputs))
        return name, batch, time.perf_counter() - t0, None
    except Exception as ex:       # reported in the table, the others go on
        return name, batch, time.perf_counter() - t0, f"{type(ex).__name__}: {str(ex)[:300]}"


def beside_torch(a) -> str:
    import multiprocessing as mp
    import torch
    from aotc.api import load
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    names = a.models.split(",") if a.models else list(TORCH_MODELS)
    jobs = [(n, int(b), a.target, str(work)) for b in a.batches.split(",") for n in names]
    with cf.ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as pool:
        ready = {(n, b): err for n, b, _, err in pool.map(_prepare, jobs)}
    tf32 = _tf32(a.target)          # PyTorch gets TF32 exactly when aotc does
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    rows = [f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; float32, "
            f"TF32 {'on' if tf32 else 'off'}; "
            f"target {a.target}; median of "
            f"{a.runs} runs after warm-up, ms. aotc includes copying inputs in and outputs out.", "",
            "| model | batch | PyTorch eager | torch.compile | aotc cuda | eager/aotc | compile/aotc | max abs err |",
            "|---|---|---|---|---|---|---|---|"]
    for name, batch, _, _ in jobs:
        err = ready[(name, batch)]
        if err:
            rows.append(f"| {name} | {batch} | | | ERROR | | | {err} |")
            print(rows[-1], flush=True)
            continue
        try:
            model, inputs = _torch_model(name, batch)
            gpu = model.cuda()
            gin = tuple(x.cuda() for x in inputs)
            with torch.no_grad():
                ref = gpu(*gin)
                eager = _time_cuda(lambda: gpu(*gin), a.runs)
                compiled = torch.compile(gpu)
                comp = _time_cuda(lambda: compiled(*gin), a.runs)
            m = load(work / f"t_{name}_{batch}_cuda")
            feeds = [x.numpy() for x in inputs]
            got = m.run(feeds)[0]
            diff = float(np.max(np.abs(got - ref.float().cpu().numpy())))
            mine = _time_cuda(lambda: m.run(feeds), a.runs)
            rows.append(f"| {name} | {batch} | {eager:.3f} | {comp:.3f} | {mine:.3f} | {eager / mine:.2f} | "
                        f"{comp / mine:.2f} | {diff:.3g} |")
            torch.cuda.empty_cache()
        except Exception as ex:
            rows.append(f"| {name} | {batch} | | | ERROR | | | {type(ex).__name__}: {str(ex)[:200]} |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["zoo", "torch"])
    ap.add_argument("--size", default="full", choices=["small", "full"])
    ap.add_argument("--models", default=None)
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--workdir", default="build/gpu")
    ap.add_argument("--report", type=Path, default=None)
    a = ap.parse_args()
    text = zoo(a) if a.what == "zoo" else beside_torch(a)
    print(text)
    if a.report:
        a.report.write_text(text + "\n")


if __name__ == "__main__":
    main()
