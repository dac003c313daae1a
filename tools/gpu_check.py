"""The cuda target on a GPU: parity of every zoo model, and latency beside PyTorch.

python -m tools.gpu_check zoo   [--size full] [--models a,b] [--jobs 8] [--target cuda:sm_90] [--report F]
python -m tools.gpu_check torch [--batches 1,32] [--models resnet50,bert,...] [--compile-models bert,...] [--report F]
python -m tools.gpu_check variants [--models resnet50,bert] [--batch 1] [--variant NAME:TABLE.KEY=VALUE,...]
                                    [--runs 50] [--rounds 6] [--target cuda:sm_90] [--report F]
python -m tools.gpu_check files --dir DIR [--rtol 1e-4] [--atol 1e-5] [--target cuda:sm_90] [--report F]
python -m tools.gpu_check decode [--dir DIR] [--size small|full] [--prompt 48] [--steps 64] [--longest 128]

Every mode takes `--phase build` (compile only, recording each build's error in --workdir),
`--phase time` (run the table on what a build phase left) or `--phase all` (the default):
tools/gpu_lease.sh builds every mode's artifacts at once, then times each mode alone.

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
`files`: each DIR/NAME.onnx with its inputs in DIR/NAME.npz (models no zoo entry builds: ORT's
optimizer's contrib operators, onnxruntime-genai's decoders, written where those tools are
installed and carried to the GPU) is compiled at its inputs' shapes, run, compared with ONNX
Runtime (CPU) on the same inputs, and timed like `zoo`.
`decode`: decoders with a KV cache, one artifact over run-time sequence lengths (the prompt and
each token): onnxruntime-genai's builder's files in --dir (written where the builder is, carried)
and Hugging Face exports with past made here (models/decoders.py: tiny LLaMA and GPT-2; with
--size full also a 125M-parameter LLaMA) generate --steps tokens greedily after a --prompt-token
prompt, token for token against ONNX Runtime (CPU) on the same loop, and are timed (prefill and
per-token step, medians; aotc's steps keep the caches on the device, as aotc.generate does, and
again copying them in and out around every step for comparison; PyTorch eager on the GPU beside
the Hugging Face ones, its cache staying on the device).
`variants`: the GPU schedule's choices side by side in one run. Each variant is the target with
some of its settings changed (`--variant im2col-buffers:gemm.im2col_packing=false`; without
--variant, DEFAULT_VARIANTS: each undoes one change made without a GPU or tries the next one,
plus tf32); every
model is compiled for each, checked against ONNX Runtime, and timed in rounds that rotate the
variants' order (median over all rounds); "base/variant" > 1: the variant is faster. At
`--batch` other than 1 the zoo model's first input dim is renamed and set (a model whose
graph fixes its batch reports an error).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import re
import statistics
import time
from pathlib import Path

import numpy as np


def _tf32(target: str) -> bool:
    """Does the target run float32 GEMMs in TF32 (cuda,tf32)?"""
    from aotc.targets import load_target
    return load_target(target).numerics.tf32


# ----------------------------------------------------------------------------- building
def _built(a, kind: str, fn, jobs: list, key, pool_kwargs=None) -> dict:
    """Run `fn` over `jobs` in a process pool (phases `all` and `build`) and record each job's
    error, or None, under `--workdir`; phase `time` reads that record back instead, so that a
    GPU lease can build every table's artifacts at once (`--phase build` of each mode in
    parallel) and then time them one mode after another (`--phase time`)."""
    import json
    record = Path(a.workdir) / f"{kind}_built.json"
    if getattr(a, "phase", "all") == "time":
        if not record.exists():
            raise SystemExit(f"--phase time: {record} is missing; run --phase build first")
        return {tuple(k) if isinstance(k, list) else k: err for k, err in json.loads(record.read_text())}
    with cf.ProcessPoolExecutor(a.jobs, **(pool_kwargs or {})) as pool:
        done = {key(r): r[-1] for r in pool.map(fn, jobs)}
    record.write_text(json.dumps([[list(k) if isinstance(k, tuple) else k, err] for k, err in done.items()]))
    return done


def _build_summary(kind: str, built: dict) -> str:
    bad = {k: e for k, e in built.items() if e}
    return f"{kind}: {len(built) - len(bad)} of {len(built)} built" + "".join(f"\n  {k}: {e}" for k, e in bad.items())


# ----------------------------------------------------------------------------- zoo parity
def _compile_one(args):
    name, size, target, workdir = args
    import onnx
    from aotc.compiler import compile_model
    from models.zoo import ZOO
    e = ZOO[name]
    path = Path(workdir) / f"{name}_{size}.onnx"
    onnx.save(e.build(size), str(path))
    try:
        compile_model(path, target=target, output_dir=Path(workdir) / f"{name}_{size}_cuda", shapes=e.shapes_for(size))
        return name, None
    except Exception as ex:        # reported per model, the others go on
        return name, f"{type(ex).__name__}: {str(ex)[:400]}"


def zoo(a) -> str:
    from aotc.api import load
    from aotc.check.inputs import sample_inputs
    from aotc.check.runner import reference_outputs
    from aotc.frontend import import_model, load_onnx
    from models.zoo import ZOO
    names = a.models.split(",") if a.models else list(ZOO)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    built = _built(a, "zoo", _compile_one, [(n, a.size, a.target, str(work)) for n in names], key=lambda r: r[0])
    if a.phase == "build":
        return _build_summary("zoo", built)
    rows = ["| model | result | max abs err | max rel err | rtol / atol | aotc ms (median) |",
            "|---|---|---|---|---|---|"]
    for n in names:
        e = ZOO[n]
        err = built[n]
        if err:
            rows.append(f"| {n} | ERROR: {err} | | | | |")
            print(n, "ERROR", err, flush=True)
            continue
        path = work / f"{n}_{a.size}.onnx"
        feeds = sample_inputs(import_model(load_onnx(path), n, e.shapes_for(a.size)), seed=3)
        try:
            m = load(work / f"{n}_{a.size}_cuda")
            got = m.run({k: feeds[k] for k in m.input_names})
        except Exception as ex:
            rows.append(f"| {n} | ERROR: {type(ex).__name__}: {str(ex)[:300]} | | | | |")
            print(n, "ERROR", ex, flush=True)
            continue
        rtol, atol = (1e-2, 1e-2) if _tf32(a.target) else (e.rtol, e.atol)      # as `aotc check` takes tf32
        rows.append(_parity_row(n, m, feeds, got, reference_outputs(path, feeds), rtol, atol, a.runs))
        print(rows[-1], flush=True)
    return "\n".join(rows)


def _parity_row(name: str, m, feeds: dict, got: list, ref: list, rtol: float, atol: float, runs: int) -> str:
    """A table row: the artifact's outputs `got` against the reference's, then the median of
    `runs` invokes after 5 warm-up runs (each copying inputs in and outputs out)."""
    from aotc.check.parity import compare
    reps = [compare(o, x, y, rtol, atol) for o, x, y in zip(m.output_names, got, ref)]
    arrays = [feeds[k] for k in m.input_names]
    for _ in range(5):
        m.run(arrays)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        m.run(arrays)
        ts.append(time.perf_counter() - t0)
    return (f"| {name} | {'PASS' if all(r.passed for r in reps) else 'FAIL'} | "
            f"{max(r.max_abs_err for r in reps):.3g} | {max(r.max_rel_err for r in reps):.3g} | "
            f"{rtol:g} / {atol:g} | {statistics.median(ts) * 1e3:.3f} |")


# ----------------------------------------------------------------------------- carried files
def _compile_file(args):
    path, target, workdir = args
    from aotc.compiler import compile_model
    with np.load(path.with_suffix(".npz")) as z:
        shapes = {k: z[k].shape for k in z.files}
    try:
        compile_model(path, target=target, output_dir=Path(workdir) / f"{path.stem}_cuda", shapes=shapes)
        return path.stem, None
    except Exception as ex:
        return path.stem, f"{type(ex).__name__}: {str(ex)[:400]}"


def files(a) -> str:
    from aotc.api import load
    from aotc.check.runner import reference_outputs
    paths = sorted(Path(a.dir).glob("*.onnx"))
    if not paths:
        raise SystemExit(f"files: no .onnx files in {a.dir}")
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    built = _built(a, "files", _compile_file, [(p, a.target, str(work)) for p in paths], key=lambda r: r[0])
    if a.phase == "build":
        return _build_summary("files", built)
    rows = ["| model | result | max abs err | max rel err | rtol / atol | aotc ms (median) |",
            "|---|---|---|---|---|---|"]
    for p in paths:
        if built[p.stem]:
            rows.append(f"| {p.stem} | ERROR: {built[p.stem]} | | | | |")
            continue
        with np.load(p.with_suffix(".npz")) as z:
            feeds = {k: z[k] for k in z.files}
        try:
            m = load(work / f"{p.stem}_cuda")
            got = m.run({k: feeds[k] for k in m.input_names})
        except Exception as ex:
            rows.append(f"| {p.stem} | ERROR: {type(ex).__name__}: {str(ex)[:300]} | | | | |")
            continue
        rows.append(_parity_row(p.stem, m, feeds, got, reference_outputs(p, feeds), a.rtol, a.atol, a.runs))
        print(rows[-1], flush=True)
    return "\n".join(rows)


# ----------------------------------------------------------------------------- decoders
# the Hugging Face form exported here: name -> (kind, config: None for models/decoders.py's
# tiny one), and the one exported with --size full only (125M parameters)
HF_DECODERS = {"hf_llama": ("llama", None), "hf_gpt2": ("gpt2", None), "hf_llama_125m": ("llama", "small")}
FULL_ONLY = {"hf_llama_125m"}


def _hf_config(name: str):
    from models.decoders import GENAI_SMALL
    kind, config = HF_DECODERS[name]
    return kind, GENAI_SMALL if config == "small" else None


def _genai_head(m, path: Path) -> int:
    """A builder decoder's head size, which its ports leave symbolic (kv_cache_dim): the hidden
    size (its first layer norm's weight) over GroupQueryAttention's num_heads."""
    gqa = next((n for n in m.graph.node if n.op_type == "GroupQueryAttention"), None)
    norm = next((i for i in m.graph.initializer if i.name.endswith("input_layernorm.weight")), None)
    heads = next((x.i for x in gqa.attribute if x.name == "num_heads"), 0) if gqa is not None else 0
    if not heads or norm is None:
        raise SystemExit(f"decode: {path} has past_key_values inputs but no GroupQueryAttention with num_heads "
                         "and input_layernorm weight to size its heads by")
    return norm.dims[0] // heads


def _decoder_sources(a, work: Path) -> dict:
    """name -> (ONNX file, run-time dims): onnxruntime-genai's decoders in --dir (the files with
    past_key_values inputs; their KV buffers --longest long) and the Hugging Face exports with
    past made here (phase build exports them; phase time reads them back)."""
    import onnx
    from models.decoders import dims, export_with_past, genai_dims
    out = {}
    for p in sorted(Path(a.dir).glob("*.onnx")) if a.dir else []:
        m = onnx.load(str(p), load_external_data=False)
        if any(i.name.startswith("past_key_values") for i in m.graph.input):
            out[p.stem] = (p, genai_dims(a.longest, _genai_head(m, p)))
    for name in [n for n in HF_DECODERS if a.size == "full" or n not in FULL_ONLY]:
        path = work / f"{name}.onnx"
        if a.phase != "time":
            kind, config = _hf_config(name)
            export_with_past(kind, path, config=config)
        out[name] = (path, dims(a.longest))
    return out


def _compile_decoder(args):
    name, path, dims, target, workdir, build = args
    from aotc.compiler import compile_model
    try:
        compile_model(path, target=target, output_dir=Path(workdir) / f"{name}_cuda", dims=dims, build=build)
        return name, None
    except Exception as ex:
        return name, f"{type(ex).__name__}: {str(ex)[:400]}"


def _torch_step_ms(name: str, prompt: list, steps: int) -> tuple[float, float]:
    """PyTorch eager on the GPU, the same greedy loop over the same transformers model (its
    DynamicCache): (prefill ms, median step ms), host clock around synchronized steps."""
    import torch
    from transformers import DynamicCache
    from models.decoders import build
    kind, config = _hf_config(name)
    model = build(kind, 0, config)[0].cuda()
    times = []
    with torch.no_grad():
        for _ in range(2):               # (the first loop warms up)
            cache, ids, times = DynamicCache(), torch.tensor([prompt], device="cuda"), []
            for i in range(steps + 1):
                torch.cuda.synchronize()
                t = time.perf_counter()
                out = model(input_ids=ids, past_key_values=cache, use_cache=True)
                ids = out.logits[:, -1:].argmax(-1)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
                cache = out.past_key_values
    return times[0] * 1e3, statistics.median(times[1:]) * 1e3


def _on_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


class _CachesCopied:
    """A loaded artifact without keep_caches: aotc.generate on it copies the caches to the device
    and back around every step (what keeping them there saves: decode's extra column)."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name == "keep_caches":
            raise AttributeError(name)
        return getattr(self._model, name)


def decode(a, build=None) -> str:
    """Each decoder generates --steps tokens after a --prompt-token prompt with aotc.generate's
    loop on the cuda artifact, against ONNX Runtime (CPU) on the same loop: the tokens, then
    timings (medians of --rounds loops after one warm-up loop). `build` replaces nvcc's build
    (tests: the CUDA emulation), and then the decoders compile in this process."""
    import aotc
    from aotc.bench import OrtDecoder
    from tools.llm_bench import loop_timing
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sources = _decoder_sources(a, work)
    if not sources:
        raise SystemExit("decode: no decoders (no --dir files with past_key_values inputs, and --size small "
                         "exports only the tiny Hugging Face ones)")
    jobs = [(n, p, d, a.target, str(work), build) for n, (p, d) in sources.items()]
    if build is None:
        built = _built(a, "decode", _compile_decoder, jobs, key=lambda r: r[0])
        if a.phase == "build":
            return _build_summary("decode", built)
    else:
        built = dict(map(_compile_decoder, jobs))
    rows = ["| decoder | tokens as ORT's | aotc prefill ms | aotc step ms | aotc step ms, caches copied "
            "| ORT (CPU) prefill ms | ORT step ms | PyTorch (GPU) prefill ms | PyTorch step ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, (path, _) in sources.items():
        if built[name]:
            rows.append(f"| {name} | ERROR: {built[name]} | | | | | | | |")
            print(rows[-1], flush=True)
            continue
        try:
            m = aotc.load(work / f"{name}_cuda")
            vocab = int(m.manifest["outputs"][0]["shape"][-1])
            prompt = [int(t) for t in np.random.default_rng(11).integers(0, vocab - 3, a.prompt)]
            engines = {"aotc": aotc.Generator(m), "copied": aotc.Generator(_CachesCopied(m)),
                       "ort": aotc.Generator(OrtDecoder(path, m.manifest))}
            timed = {}
            for e, gen in engines.items():
                loops = [loop_timing(gen, prompt, a.steps) for _ in range(a.rounds + 1)][1:]
                timed[e] = (statistics.median(x[0] for x in loops) * 1e3,
                            statistics.median(t for x in loops for t in x[1]) * 1e3, loops[0][2])
            same = sum(x == y for x, y in zip(timed["aotc"][2], timed["ort"][2]))
            verdict = "PASS" if timed["aotc"][2] == timed["ort"][2] == timed["copied"][2] else "FAIL"
            torch_ms = _torch_step_ms(name, prompt, a.steps) if name.startswith("hf_") and _on_gpu() else None
        except Exception as ex:
            rows.append(f"| {name} | ERROR: {type(ex).__name__}: {str(ex)[:300]} | | | | | | | |")
            print(rows[-1], flush=True)
            continue
        tms = " | ".join(f"{v:.3f}" for v in torch_ms) if torch_ms else "| "
        rows.append(f"| {name} | {verdict} ({same}/{a.steps + 1}) | {timed['aotc'][0]:.3f} | {timed['aotc'][1]:.3f} | "
                    f"{timed['copied'][1]:.3f} | {timed['ort'][0]:.3f} | {timed['ort'][1]:.3f} | {tms} |")
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
    """In a worker process: export one model, compile it with aotc, and (when `warm`) run
    torch.compile on it once, so that its compiled graphs land in inductor's cache for the
    timing pass."""
    name, batch, target, workdir, warm = args
    import torch
    from aotc.compiler import compile_model
    try:
        model, inputs = _torch_model(name, batch)
        path = Path(workdir) / f"t_{name}_{batch}.onnx"
        with torch.no_grad():
            torch.onnx.export(model, inputs, str(path), opset_version=17, dynamo=False)
        compile_model(path, target=target, output_dir=Path(workdir) / f"t_{name}_{batch}_cuda")
        if warm:
            gpu = model.cuda()
            with torch.no_grad():
                torch.compile(gpu)(*(x.cuda() for x in inputs))
        return name, batch, None
    except Exception as ex:       # reported in the table, the others go on
        return name, batch, f"{type(ex).__name__}: {str(ex)[:300]}"


def beside_torch(a) -> str:
    import multiprocessing as mp
    import torch
    from aotc.api import load
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    names = a.models.split(",") if a.models else list(TORCH_MODELS)
    compiled_too = set(a.compile_models.split(",")) if a.compile_models else set(names)
    jobs = [(n, int(b), a.target, str(work), n in compiled_too) for b in a.batches.split(",") for n in names]
    ready = _built(a, "torch", _prepare, jobs, key=lambda r: (r[0], r[1]),
                   pool_kwargs={"mp_context": mp.get_context("spawn")})
    if a.phase == "build":
        return _build_summary("torch", ready)
    tf32 = _tf32(a.target)          # PyTorch gets TF32 exactly when aotc does
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    rows = [f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; float32, "
            f"TF32 {'on' if tf32 else 'off'}; "
            f"target {a.target}; median of "
            f"{a.runs} runs after warm-up, ms. aotc includes copying inputs in and outputs out.", "",
            "| model | batch | PyTorch eager | torch.compile | aotc cuda | eager/aotc | compile/aotc | max abs err |",
            "|---|---|---|---|---|---|---|---|"]
    for name, batch, _, _, timed_compiled in jobs:
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
                comp = None
                if timed_compiled:
                    compiled = torch.compile(gpu)
                    comp = _time_cuda(lambda: compiled(*gin), a.runs)
            m = load(work / f"t_{name}_{batch}_cuda")
            feeds = [x.numpy() for x in inputs]
            got = m.run(feeds)[0]
            diff = float(np.max(np.abs(got - ref.float().cpu().numpy())))
            mine = _time_cuda(lambda: m.run(feeds), a.runs)
            comp_ms, comp_ratio = (f"{comp:.3f}", f"{comp / mine:.2f}") if comp else ("not run", "")
            rows.append(f"| {name} | {batch} | {eager:.3f} | {comp_ms} | {mine:.3f} | {eager / mine:.2f} | "
                        f"{comp_ratio} | {diff:.3g} |")
            torch.cuda.empty_cache()
        except Exception as ex:
            rows.append(f"| {name} | {batch} | | | ERROR | | | {type(ex).__name__}: {str(ex)[:200]} |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


# ----------------------------------------------------------------------------- schedule variants
# each undoes one change made without a GPU (docs/journal/gpu.md "Built without a GPU between the two runs") or tries the
# next one named there (batch-1 tiles of at least 4 x 4 results), plus TF32
DEFAULT_VARIANTS = (
    "im2col-buffers:gemm.im2col_packing=false",
    "tiled-few-rows:gpu.gemv_rows=0",
    "min-4x4-results:gpu.min_results=16",
    "tree-reductions:gpu.shuffle=0",
    "block-results:gpu.warp=0,gpu.shuffle=0",
    "tf32:numerics.tf32=true",
)


def parse_variant(spec: str) -> tuple[str, dict]:
    """'name:table.key=value,...' -> (name, {(table, key): TOML value text})"""
    name, sep, rest = spec.partition(":")
    settings = {}
    for item in rest.split(",") if sep else []:
        lhs, eq, value = item.partition("=")
        table, dot, key = lhs.strip().partition(".")
        if not (eq and dot and table and key and value.strip()):
            raise SystemExit(f"--variant {spec!r}: write NAME:TABLE.KEY=VALUE[,TABLE.KEY=VALUE...]")
        settings[(table, key)] = value.strip()
    if not name or not settings:
        raise SystemExit(f"--variant {spec!r}: write NAME:TABLE.KEY=VALUE[,TABLE.KEY=VALUE...]")
    return name, settings


def variant_target(base: str, name: str, settings: dict, directory: Path) -> str:
    """A target file: the target `base` (cuda:sm_90, cuda,tf32...) with `settings` set in its
    tables, named `name`; checked by loading it back."""
    import tomllib
    from aotc.paths import TARGETS_DIR
    from aotc.targets import load_target
    resolved = load_target(base)
    stem = base.split(",")[0].partition(":")[0]
    src = Path(stem) if stem.endswith(".toml") else TARGETS_DIR / f"{stem}.toml"
    lines = src.read_text().splitlines()
    want = dict(settings)
    want[("", "name")] = f'"{name}"'
    if resolved.arch:
        want[("", "arch")] = "[" + ", ".join(f'"{x}"' for x in resolved.arch) + "]"
    for opt in resolved.options:
        if getattr(resolved.numerics, opt) and ("numerics", opt) not in want:       # options the base name turned on
            want[("numerics", opt)] = "true"
    table, out, done = "", [], set()

    def close(t):          # keys of table t not in the file yet go at its end
        for (tb, key), value in want.items():
            if tb == t and (tb, key) not in done:
                out.append(f"{key} = {value}")
                done.add((tb, key))
    for line in lines:
        head = re.match(r"^\[(\w+)\]\s*$", line)
        if head:
            close(table)
            table = head.group(1)
        else:
            m = re.match(r"^(\w+)\s*=", line)
            if m and (table, m.group(1)) in want:
                line = f"{m.group(1)} = {want[(table, m.group(1))]}"
                done.add((table, m.group(1)))
        out.append(line)
    close(table)
    for t in sorted({tb for tb, _ in want if tb and (tb, _) not in done}):
        out.append(f"[{t}]")
        close(t)
    path = Path(directory) / f"{name}.toml"
    path.write_text("\n".join(out) + "\n")
    got = load_target(str(path))
    for (tb, key), value in settings.items():
        expect = tomllib.loads(f"x = {value}")["x"]
        value = getattr(getattr(got, tb), key) if tb else getattr(got, key)
        if value != expect:
            raise SystemExit(f"variant {name}: {tb}.{key} did not take ({value!r})")
    return str(path)


def _batched_model(name: str, size: str, batch: int, path: Path) -> dict:
    """Write zoo model `name` to `path` (its inputs' and outputs' first dim renamed when batch
    is not 1); returns the input shapes at that batch."""
    import onnx
    from models.zoo import ZOO
    e = ZOO[name]
    m = e.build(size)
    shapes = {k: tuple(v) for k, v in e.shapes_for(size).items()}
    if batch != 1:
        for v in list(m.graph.input) + list(m.graph.output):
            dims = v.type.tensor_type.shape.dim
            if len(dims) and dims[0].dim_value == 1:
                dims[0].ClearField("dim_value")
                dims[0].dim_param = "batch"
        del m.graph.value_info[:]
        shapes = {k: (batch,) + v[1:] for k, v in shapes.items()}
    onnx.save(m, str(path))
    return shapes


def _compile_variant(args):
    name, path, shapes, label, target, build = args
    from aotc.compiler import compile_model
    try:
        compile_model(path, target=target, output_dir=path.with_name(f"{path.stem}_{label}"), shapes=shapes,
                      build=build)
        return name, label, None
    except Exception as ex:        # reported per model and variant, the others go on
        return name, label, f"{type(ex).__name__}: {str(ex)[:300]}"


def variants(a, build=None) -> str:
    """The `variants` table; `build` replaces nvcc's build (tests: the CUDA emulation), and
    then the variants compile in this process, one after another."""
    from aotc.api import load
    from aotc.check.inputs import sample_inputs
    from aotc.check.parity import compare
    from aotc.check.runner import reference_outputs
    from aotc.frontend import import_model, load_onnx
    from models.zoo import ZOO
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    names = a.models.split(",") if a.models else ["resnet50", "bert"]
    specs = [parse_variant(v) for v in (a.variant or DEFAULT_VARIANTS)]
    targets = {"base": a.target}
    for label, settings in specs:
        targets[label] = variant_target(a.target, label, settings, work)
    paths = {n: work / f"v_{n}_{a.size}_b{a.batch}.onnx" for n in names}
    shapes = {n: _batched_model(n, a.size, a.batch, paths[n]) for n in names}
    jobs = [(n, paths[n], shapes[n], label, t, build) for n in names for label, t in targets.items()]
    if build is None:
        built = _built(a, f"variants_b{a.batch}", _compile_variant, jobs, key=lambda r: (r[0], r[1]))
        if a.phase == "build":
            return _build_summary("variants", built)
    else:
        built = {(n, lb): err for n, lb, err in map(_compile_variant, jobs)}
    described = {"base": a.target} | {lb: ", ".join(f"{t}.{k} = {v}" for (t, k), v in st.items()) for lb, st in specs}
    rows = [f"Target {a.target}; batch {a.batch}; median of {a.runs} invokes per variant in {a.rounds} rounds "
            "(the variants' order rotated each round) after warm-up, ms, each invoke copying inputs in and "
            "outputs out. base/variant > 1: the variant is faster.", "",
            "| model | variant | settings | ms | base/variant | parity |", "|---|---|---|---|---|---|"]
    per_round = max(1, a.runs // a.rounds)
    for n in names:
        path = paths[n]
        models, checks = {}, {}
        feeds = None
        for label in targets:
            err = built[(n, label)]
            if err:
                rows.append(f"| {n} | {label} | {described[label]} | | | ERROR: {err} |")
                continue
            try:
                m = load(path.with_name(f"{path.stem}_{label}"))
                if feeds is None:
                    feeds = sample_inputs(import_model(load_onnx(path), n, shapes[n]), seed=3)
                    ref = reference_outputs(path, feeds)
                got = m.run({k: feeds[k] for k in m.input_names})
            except Exception as ex:
                rows.append(f"| {n} | {label} | {described[label]} | | | ERROR: {type(ex).__name__}: {str(ex)[:200]} |")
                continue
            tf32 = _tf32(targets[label])
            rtol, atol = (1e-2, 1e-2) if tf32 else (ZOO[n].rtol, ZOO[n].atol)
            ok = all(compare(o, x, y, rtol, atol).passed for o, x, y in zip(m.output_names, got, ref))
            models[label], checks[label] = m, "PASS" if ok else "FAIL"
        if not models:
            continue
        arrays = {lb: [feeds[k] for k in m.input_names] for lb, m in models.items()}
        for lb, m in models.items():
            for _ in range(5):
                m.run(arrays[lb])
        times = {lb: [] for lb in models}
        order = list(models)
        for r in range(a.rounds):
            for lb in order[r % len(order):] + order[:r % len(order)]:
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    models[lb].run(arrays[lb])
                    times[lb].append(time.perf_counter() - t0)
        med = {lb: statistics.median(ts) * 1e3 for lb, ts in times.items()}
        for lb in models:
            ratio = f"{med['base'] / med[lb]:.2f}" if "base" in med else ""
            rows.append(f"| {n} | {lb} | {described[lb]} | {med[lb]:.3f} | {ratio} | {checks[lb]} |")
            print(rows[-1], flush=True)
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["zoo", "torch", "variants", "files", "decode"])
    ap.add_argument("--dir", default=None, help="files, decode: the folder of NAME.onnx (+ NAME.npz)")
    ap.add_argument("--rtol", type=float, default=1e-4, help="files: the check's tolerances")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--size", default="full", choices=["small", "full"])
    ap.add_argument("--models", default=None)
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--batch", type=int, default=1, help="variants: the batch size")
    ap.add_argument("--rounds", type=int, default=6, help="variants, decode: rounds of timing")
    ap.add_argument("--prompt", type=int, default=48, help="decode: the prompt's tokens")
    ap.add_argument("--steps", type=int, default=64, help="decode: tokens generated after it")
    ap.add_argument("--longest", type=int, default=128, help="decode: the longest sequence the artifacts take")
    ap.add_argument("--variant", action="append", default=None,
                    help="variants: NAME:TABLE.KEY=VALUE[,...] (repeatable; default: DEFAULT_VARIANTS)")
    ap.add_argument("--compile-models", default=None,
                    help="torch: the models also timed under torch.compile (default: all of --models)")
    ap.add_argument("--phase", default="all", choices=["all", "build", "time"],
                    help="build: compile only (and warm torch.compile's cache); time: load what a build "
                         "phase left in --workdir and run the table; all: both")
    ap.add_argument("--workdir", default="build/gpu")
    ap.add_argument("--report", type=Path, default=None)
    a = ap.parse_args()
    text = {"zoo": zoo, "torch": beside_torch, "variants": variants, "files": files, "decode": decode}[a.what](a)
    print(text)
    if a.report:
        a.report.write_text(text + "\n")


if __name__ == "__main__":
    main()
