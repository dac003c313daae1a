"""Decoding speed of a language model: aotc against ONNX Runtime and onnxruntime-genai's
generator, on a LLaMA-style decoder written by onnxruntime-genai's model builder from a random-
weight transformers model (models/decoders.py: GENAI_SMALL, 125M parameters, or with --model 1b
GENAI_1B, 1.01B parameters, hidden 2048), float32 and int4; and "static", the same source through
onnxruntime's mobius builder's standard-ops static cache (float32; TensorScatter into fixed
buffers, opset-24 Attention), which onnxruntime-genai's Generator does not run; and "hf", a model
of the same config exported the Hugging Face way (torch.onnx with past_key_values in and
present.* out, models/decoders.py export_with_past; float32, its own random weights), which
the Generator does not run either.

Each engine runs the same greedy loop in one process, timed in alternating rounds: a prompt of
--prompt tokens (prefill), then --steps single-token steps; before each engine's loop, a pause
(aotc.bench.SETTLE_S) in which the previous engine's thread pool stops spinning (ONNX Runtime's
workers spin for about 30 ms after a run: without the pause, a 2-thread prompt run just after
one of its runs took 124 ms instead of 104). Each engine's model is loaded once and runs a short
loop untimed before the rounds (onnxruntime-genai's first prompt run took 238 ms, its next ones
190: the embedding's pages mapped in). aotc: one artifact with the
sequence as a run-time dim (aotc.generate's Generator, the KV buffers updated in place); ONNX
Runtime: the same loop over an InferenceSession (its presents are new arrays each step, as any
caller of its plain run gets); onnxruntime-genai: its own Generator (append_tokens, then
generate_next_token), the runtime the builder writes models for. Medians over rounds: prefill
milliseconds, decode tokens per second, and the bytes a step reads (weights + the KV cache it
attends to) times tokens per second against this machine's copy bandwidth (numpy, 256 MiB).
Also aotc's compile time and peak memory (a child process) against the weights' bytes.

python -m tools.llm_bench [--model small|1b] [--precision fp32,int4,static,hf] [--threads 1,2] [--prompt 128]
                          [--steps 64] [--rounds 5] [--report docs/PERFORMANCE.md]
(each model has its own section of the report: `make llm-bench`, `make llm-bench-1b`)
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from aotc.bench import SETTLE_S, OrtDecoder, publish_report

MODELS = {"small": "GENAI_SMALL", "1b": "GENAI_1B"}      # --model: models/decoders.py's configs


def markers(model: str) -> tuple[str, str]:
    """The report section's delimiters for --model (the small model's predate the 1B one's)."""
    tag = "llm-bench" if model == "small" else f"llm-bench-{model}"
    return f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"


def copy_bandwidth() -> float:
    """Bytes per second numpy copies (read + write) over 256 MiB, the best of five."""
    a = np.ones(1 << 26, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def loop_timing(gen, prompt: list, steps: int) -> tuple[float, list[float], list[int]]:
    """(prefill seconds, each step's seconds, the tokens) of aotc.Generator's loop on `gen`: the
    prompt's token, then `steps` more, each timed as it is taken."""
    it = gen.tokens(prompt)
    times, tokens = [], []
    for _ in range(steps + 1):
        t = time.perf_counter()
        tokens.append(next(it))
        times.append(time.perf_counter() - t)
    return times[0], times[1:], tokens


def genai_model(folder: Path, threads: int):
    """onnxruntime-genai's model on the builder's folder, its session on `threads` intra-op threads."""
    import onnxruntime_genai as og
    cfg = json.loads((folder / "genai_config.json").read_text())
    cfg["model"]["decoder"]["session_options"]["intra_op_num_threads"] = threads
    cfg["model"]["decoder"]["session_options"]["inter_op_num_threads"] = 1
    (folder / "genai_config.json").write_text(json.dumps(cfg, indent=4))
    return og.Model(str(folder))


def genai_timing(model, prompt: list, steps: int, longest: int):
    """The same with onnxruntime-genai's Generator on its model (genai_model), loaded once for
    all rounds as the other engines are (a model's first prompt run also maps its weights in)."""
    import onnxruntime_genai as og
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=longest, do_sample=False)
    gen = og.Generator(model, params)
    t = time.perf_counter()
    gen.append_tokens(prompt)
    prefill = time.perf_counter() - t
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        gen.generate_next_token()
        times.append(time.perf_counter() - t)
    tokens = list(gen.get_sequence(0))[len(prompt):]
    return prefill, times, tokens


def compile_measured(path: Path, out: Path, dims: dict, threads: int) -> tuple[float, float]:
    """aotc's compile in a child process: (seconds, peak resident bytes)."""
    # (the child reports its own peak, VmHWM: RUSAGE_CHILDREN is the largest of every child so far,
    # and a child's ru_maxrss starts from this process's size at the fork)
    # (compile_model: the compile alone, where aotc.compile goes on to load the artifact)
    code = ("import sys, json; from aotc.compiler import compile_model; compile_model(sys.argv[1], target='native', "
            "output_dir=sys.argv[2], "
            "name='llm', threads=int(sys.argv[4]), dims={k: tuple(v) for k, v in json.loads(sys.argv[3]).items()}); "
            "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))")
    t = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", code, str(path), str(out), json.dumps(dims), str(threads)],
                         check=True, capture_output=True, text=True)
    secs = time.perf_counter() - t
    return secs, 1024.0 * int(run.stdout.split()[-1])


def bench(precision: str, threads: list[int], prompt_len: int, steps: int, rounds: int, root: Path,
          cfg: dict) -> list[dict]:
    import aotc
    from models.decoders import (dims as hf_dims, export_with_past, genai_build, genai_dims, genai_source,
                                 static_cache_build, static_cache_dims)
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    longest = prompt_len + steps + 1
    source = root / "source"
    if not source.exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            genai_source("llama", source, cfg)
    folder = root / precision
    if precision == "static":
        path, dims = static_cache_build(source, folder, longest), static_cache_dims(longest)
    elif precision == "hf":
        path = folder / "model.onnx"
        if not path.exists():
            export_with_past("llama", path, config=cfg)
        dims = hf_dims(longest)
    else:
        path, dims = genai_build(source, folder, precision, root / "cache"), genai_dims(longest, head)
    weights = sum(f.stat().st_size for f in folder.glob("model.onnx*"))
    out = root / f"aotc_{precision}"
    secs, peak = compile_measured(path, out, dims, max(threads))
    art_weights = aotc.load(out).manifest["weights"]["bytes"]
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, cfg["vocab_size"] - 3, prompt_len)]
    kv_per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head * 4
    bandwidth = copy_bandwidth()
    results = []
    for t in threads:
        model = aotc.load(out, threads=t)
        gens = {"aotc": aotc.Generator(model), "ort": aotc.Generator(OrtDecoder(path, model.manifest, t))}
        genai = genai_model(folder, t) if precision in ("fp32", "int4") else None
        if genai:
            genai_timing(genai, prompt, 1, longest)              # (warm-up, as the others' below)
        for g in gens.values():
            loop_timing(g, prompt, 1)
        runs: dict[str, list] = {k: [] for k in (*gens, *(["ort-genai"] if genai else []))}
        for _ in range(rounds):              # alternating, so that the machine's slow spells fall on all
            for k, g in gens.items():
                time.sleep(SETTLE_S)
                runs[k].append(loop_timing(g, prompt, steps))
            if genai:
                time.sleep(SETTLE_S)
                runs["ort-genai"].append(genai_timing(genai, prompt, steps, longest))
        row = {"precision": precision, "threads": t, "params_bytes": weights, "artifact_weights": art_weights,
               "compile_s": secs, "compile_peak": peak, "bandwidth": bandwidth}
        for k, rs in runs.items():
            step = statistics.median(x for _, times, _ in rs for x in times)
            # bytes a step reads: the weights, and the cache up to the middle of the decode
            cache = kv_per_token * (prompt_len + steps // 2)
            row[k] = {"prefill_ms": 1e3 * statistics.median(p for p, _, _ in rs), "tokens_per_s": 1.0 / step,
                      "bandwidth_fraction": (art_weights + cache) / step / bandwidth, "tokens": rs[0][2][:16]}
        same = runs["aotc"][0][2] == runs["ort"][0][2]
        row["same_tokens_as_ort"] = same
        print(f"{precision} t={t}: " + ", ".join(f"{k} prefill {row[k]['prefill_ms']:.1f} ms, "
                                                  f"{row[k]['tokens_per_s']:.1f} tok/s" for k in runs)
              + f"; same tokens as ORT: {same}", file=sys.stderr)
        results.append(row)
    return results


def report(results: list[dict], prompt_len: int, steps: int, model: str, cfg: dict) -> str:
    from models.decoders import parameters
    target = "make llm-bench" if model == "small" else f"make llm-bench-{model}"
    L = [markers(model)[0], "",
         f"Decoding with a KV cache (tools/llm_bench.py, `{target}`): a {prompt_len}-token prompt, "
         f"then {steps} greedy steps, medians over rounds alternating between engines in one process. "
         f"The model: onnxruntime-genai's builder on a random-weight LLaMA-style model of "
         f"{parameters(cfg) / 1e6:.0f}M parameters (hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
         f"GQA {cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads, vocabulary {cfg['vocab_size']}). "
         "aotc: one artifact, the sequence a "
         "run-time dim, the KV buffers updated in place; ORT: an InferenceSession under the same loop; "
         "ORT GenAI: onnxruntime-genai's Generator. int4: the builder's block-32 symmetric weights at its "
         "accuracy_level 4 (int8 activations in ONNX Runtime and in aotc: runtime/aotc_nbits.h, VNNI "
         "where the CPU has it). static: the same source model through onnxruntime's mobius builder "
         "(`mobius build --static-cache`, float32: TensorScatter into fixed KV buffers, opset-24 Attention; "
         "aotc updates them in place), which ORT GenAI does not run (-); hf: a model of the same config "
         "exported by torch.onnx with past_key_values (the Hugging Face form: the cache grows by a Concat "
         "each step; aotc updates it in place, ORT returns new presents), its own random weights, "
         "which ORT GenAI does not run either. Bandwidth: (weights + cache) bytes a step reads x tokens/s over numpy's copy "
         "bandwidth on this machine (one thread's: two threads can exceed 1).", "",
         "| weights | threads | prefill ms aotc / ORT / ORT GenAI | tokens/s aotc / ORT / ORT GenAI | "
         "aotc / best other | aotc's bandwidth fraction |",
         "|---|---|---|---|---|---|"]
    def cell(r, k, what):
        return f"{r[k][what]:.1f}" if k in r else "-"
    for r in results:
        others = max(r[k]["tokens_per_s"] for k in ("ort", "ort-genai") if k in r)
        L.append(f"| {r['precision']} | {r['threads']} | {r['aotc']['prefill_ms']:.1f} / {r['ort']['prefill_ms']:.1f} / "
                 f"{cell(r, 'ort-genai', 'prefill_ms')} | {r['aotc']['tokens_per_s']:.1f} / "
                 f"{r['ort']['tokens_per_s']:.1f} / {cell(r, 'ort-genai', 'tokens_per_s')} | "
                 f"{r['aotc']['tokens_per_s'] / others:.2f} | {r['aotc']['bandwidth_fraction']:.2f} |")
    L += ["", "| weights | ONNX file bytes | artifact weight bytes | compile s | compile peak memory | peak / file |",
          "|---|---|---|---|---|---|"]
    for r in {r["precision"]: r for r in results}.values():
        L.append(f"| {r['precision']} | {r['params_bytes'] / 1e6:.0f} MB | {r['artifact_weights'] / 1e6:.0f} MB | "
                 f"{r['compile_s']:.0f} | {r['compile_peak'] / 1e9:.2f} GB | {r['compile_peak'] / r['params_bytes']:.1f} |")
    same = {r["precision"]: r["same_tokens_as_ort"] for r in results}
    L += ["", "Greedy tokens identical to ONNX Runtime's: " + ", ".join(f"{k} {'yes' if v else 'no'}"
                                                                      for k, v in same.items()) + "."]
    if not same.get("int4", True):
        L += ["(int4: with int8 activations a last-bit difference in an activation can move its int8 value "
              "a step, and the model amplifies that: two aotc builds of the 125M model differing only in the order "
              "of float sums, the VNNI product and the kernel loops, differ by 1.3% in the prompt's logits, as "
              "aotc and ONNX Runtime do. The tiny decoders of `make test` generate ONNX Runtime's tokens.)"]
    L += ["", markers(model)[1]]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="small")
    ap.add_argument("--precision", default="fp32,int4,static,hf",
                    help="comma-separated: fp32, int4 (the genai builder's), static (mobius's static cache), "
                         "hf (torch.onnx's export with past_key_values)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=Path, default=None, help="where the models are built (default: a temporary folder)")
    ap.add_argument("--report", type=Path, default=None, help="a Markdown file whose llm-bench section to replace")
    a = ap.parse_args(argv)
    threads = [int(t) for t in a.threads.split(",")]
    import models.decoders
    cfg = getattr(models.decoders, MODELS[a.model])
    with tempfile.TemporaryDirectory() as tmp:
        root = a.work or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        results = []
        for p in a.precision.split(","):
            results += bench(p, threads, a.prompt, a.steps, a.rounds, root, cfg)
    text = report(results, a.prompt, a.steps, a.model, cfg)
    publish_report(text, a.report, *markers(a.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
