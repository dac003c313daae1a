"""Language-model decoding (issue 31): a decoder compiled once with run-time dimensions runs
its prompt and every one-token step, generating the same greedy tokens as ONNX Runtime.

The forms here: Hugging Face models exported with past_key_values (models/decoders.py:
torch.onnx's TorchScript exporter on transformers' LLaMA and GPT-2 with random weights; the
cache's length a run-time dim from 0, the prompt's run with an empty one, each step's present
the next step's past), and onnxruntime's mobius builder's standard-ops static cache (fixed
buffers updated by TensorScatter at write_indices, opset-24 Attention over nonpad_kv_seqlen of
them). onnxruntime-genai's model builder's decoders (the shared max-length buffer):
tests/test_contrib_genai.py. The example app in C (examples/llm/generate.c) runs all three."""
from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import aotc  # noqa: E402
from models import decoders  # noqa: E402
from aotc.bench import OrtDecoder  # noqa: E402

LONGEST, PROMPT, STEPS = 64, 20, 32


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    cache = {}

    def get(kind: str):
        if kind not in cache:
            cache[kind] = decoders.export_with_past(kind, root / f"{kind}.onnx")
        return cache[kind]
    return get


@pytest.mark.parametrize("kind,target", [("llama", "native"), ("llama", "opencl"), ("gpt2", "native")])
def test_exported_decoder_generates_like_onnx_runtime(kind, target, exported, tmp_path):
    """One artifact for up to 64 tokens (past 0..63, seq 1..64): a 20-token prompt on an empty
    cache, then 32 tokens, each step's present fed back: ONNX Runtime's tokens. On opencl
    (PoCL) the caches stay on the device from the prompt to the last token (keep_caches)."""
    if target == "opencl":
        from tests.test_opencl import _opencl_missing
        if _opencl_missing():
            pytest.skip(_opencl_missing())
    path = exported(kind)
    art = aotc.compile(path, target=target, output_dir=tmp_path / "out", dims=decoders.dims(LONGEST))
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, 250, PROMPT)]
    got = aotc.generate(art, prompt, STEPS)
    assert len(got) == STEPS and len(set(got)) > 3, got          # (not one token repeated)
    assert got == aotc.generate(OrtDecoder(path, art.manifest), prompt, STEPS)


def test_generate_checks_its_decoder(exported, tmp_path):
    """A cache that cannot start empty, and a prompt longer than the artifact takes, are refused
    with the fix named."""
    path = exported("llama")
    art = aotc.compile(path, target="c", output_dir=tmp_path / "one",
                       dims={"batch": (1, 1), "seq": (1, 8), "total": (1, 16), "past": (1, 15)})
    with pytest.raises(aotc.AotcError, match="takes lengths 1..15: a prompt starts with an empty one") as e:
        aotc.generate(art, [1, 2, 3], 4)
    assert e.value.hint == "compile with --dim past=0..15"
    art = aotc.compile(path, target="c", output_dir=tmp_path / "two", dims=decoders.dims(16))
    with pytest.raises(aotc.AotcError, match="17 tokens: the artifact takes at most 16"):
        aotc.generate(art, list(range(10)), 8)


def test_a_steps_results_outlive_the_next_step(exported, tmp_path):
    """Generator.step writes every step's logits into one array, and the artifact returns its
    run-time-sized outputs (the presents) as views: what one step returned is unchanged by the
    step after it (two one-token steps write the same row), and the logits are ONNX Runtime's.
    Its steps through a Binding (the ports bound once) give exactly what run() gives."""
    path = exported("llama")
    art = aotc.compile(path, target="native", output_dir=tmp_path / "out", dims=decoders.dims(16))
    prompt = [int(t) for t in np.random.default_rng(8).integers(0, 250, 6)]
    plain = aotc.Generator(art)
    plain._bindable = False                  # (each step through CompiledModel.run)
    assert aotc.Generator(art)._bindable
    got, simple, want = [], [], []
    for gen, out in ((aotc.Generator(art), got), (plain, simple), (aotc.Generator(OrtDecoder(path, art.manifest)), want)):
        logits, caches = gen.step(prompt, 0, gen.empty_caches())
        for past in range(len(prompt), len(prompt) + 2):
            out.append((logits, caches, logits.copy(), {k: v.copy() for k, v in caches.items()}))
            logits, caches = gen.step([int(np.argmax(logits))], past, caches)
        out.append((logits, caches, logits, caches))
    for (logits, caches, then, caches_then), (ref, *_), (run, run_caches, *_) in zip(got, want, simple):
        assert np.array_equal(logits, then)
        assert all(np.array_equal(caches[k], caches_then[k]) for k in caches)
        np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)
        assert np.array_equal(logits, run) and all(np.array_equal(caches[k], run_caches[k]) for k in caches)
    assert not np.allclose(got[1][0], got[2][0])


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_exported_cache_grows_in_place(kind, exported, tmp_path):
    """A Hugging Face export's cache (Concat of past and new, GQA's repeat_kv after it for LLaMA)
    becomes its Attention node's past and present (passes/attention.py): nothing but that node
    reads a past, and each present may be its past's array. Given one array per cache at the
    present's largest shape (filled with NaN: no position may be read before it is written), a
    prompt and three steps each return ONNX Runtime's logits and presents, the presents views
    of those arrays; given two arrays, or the present's array holding the past densely (copied
    then), the same."""
    from aotc.compiler import compile_program
    path = exported(kind)
    dims = decoders.dims(16)
    graph = compile_program(path, target="native", dims=dims).graph
    readers = graph.consumers()
    pasts = [n for n in graph.inputs if n.startswith("past_key_values")]
    assert pasts and all([r.op_type for r in readers[n]] == ["Attention"] for n in pasts)
    made = graph.producers()
    assert all(made[n].op_type == "Attention" for n in graph.outputs if n.startswith("present"))
    assert not any(n.op_type == "Expand" and len(graph.values[n.outputs[0]].shape) == 5 for n in graph.nodes)
    art = aotc.compile(path, target="native", output_dir=tmp_path / "out", dims=dims)
    outs = {p["name"]: p for p in art.manifest["outputs"]}
    in_place = {p["in_place_of"]: p["name"] for p in outs.values() if p.get("in_place_of")}
    assert sorted(in_place) == sorted(pasts)
    ref = OrtDecoder(path, art.manifest)
    rng = np.random.default_rng(11)
    full = {k: np.full(outs[v]["shape"], np.nan, np.float32) for k, v in in_place.items()}
    shape = tuple(art.manifest["inputs"][art.input_names.index(pasts[0])]["shape"])
    caches = {k: full[k][:1, :, :0] for k in pasts}
    ref_caches = {k: np.zeros((1, shape[1], 0, shape[3]), np.float32) for k in pasts}
    done = 0
    for n in (5, 1, 1, 1):
        ids = rng.integers(0, 250, (1, n))
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, done + n), np.int64),
                 "position_ids": np.arange(done, done + n)[None]}
        want = dict(zip(art.output_names, ref.run({**feeds, **ref_caches})))
        got = dict(zip(art.output_names, art.run({**feeds, **caches}, into={in_place[k]: full[k] for k in pasts})))
        two = dict(zip(art.output_names, art.run({**feeds, **{k: v.copy() for k, v in caches.items()}})))
        buf = np.full(outs[in_place[pasts[0]]]["shape"], np.nan, np.float32)
        dense = buf.reshape(-1)[:caches[pasts[0]].size].reshape(caches[pasts[0]].shape)
        dense[...] = caches[pasts[0]]
        copied = dict(zip(art.output_names, art.run({**feeds, **caches, pasts[0]: dense}, into={in_place[pasts[0]]: buf})))
        for out in (got, two, copied):
            np.testing.assert_allclose(out["logits"], want["logits"], rtol=1e-4, atol=1e-4)
            for k in pasts:
                np.testing.assert_allclose(out[in_place[k]], want[in_place[k]], rtol=1e-5, atol=1e-5)
        for k in pasts:          # (where the header says they lie: a row of the largest shape each)
            assert np.array_equal(got[in_place[k]], full[k][:1, :, :done + n])
            assert np.isnan(full[k][:, :, done + n:]).all()
        caches = {k: got[in_place[k]] for k in pasts}
        ref_caches = {k: want[in_place[k]] for k in pasts}
        done += n


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory):
    """mobius's static-cache decoders of models/decoders.py's LLaMA / Phi-3 sources (buffers of
    LONGEST tokens), built once per kind."""
    pytest.importorskip("mobius", reason="mobius-onnx (onnxruntime's mobius builder) is not installed")
    root = tmp_path_factory.mktemp("static")
    cache = {}

    def get(kind: str):
        if kind not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                decoders.genai_source(kind, root / f"{kind}-hf")
            cache[kind] = decoders.static_cache_build(root / f"{kind}-hf", root / kind, LONGEST)
        return cache[kind]
    return get


def _transformers_tokens(source: Path, prompt: list, steps: int) -> list:
    """transformers' own greedy generate on the saved source model (its dynamic cache)."""
    import torch
    import transformers as tf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tf.AutoModelForCausalLM.from_pretrained(source).eval()
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("kind,target", [("llama", "native"), ("phi3", "c")])
def test_static_cache_decoder_generates_like_onnx_runtime(kind, target, static_cache, tmp_path):
    """The standard-ops static-cache form (mobius build --static-cache): the buffers are updated
    in place (one array as input and output), the prompt and every step run on one artifact and
    generate ONNX Runtime's tokens."""
    path = static_cache(kind)
    art = aotc.compile(path, target=target, output_dir=tmp_path / "out", dims=decoders.static_cache_dims(LONGEST))
    caches = {p["name"]: p.get("in_place_of") for p in art.manifest["outputs"] if p["name"] != "logits"}
    assert caches and all(v == k.removeprefix("updated_") for k, v in caches.items()), caches
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, 250, PROMPT)]
    got = aotc.generate(art, prompt, STEPS)
    assert len(got) == STEPS and len(set(got)) > 3, got
    assert got == aotc.generate(OrtDecoder(path, art.manifest), prompt, STEPS)
    if kind == "llama":
        # the loop's feeds (write_indices = the tokens before, nonpad_kv_seqlen = after) are the
        # builder's contract: the same tokens as the source model's own generate. (mobius's Phi-3
        # graph parts from transformers' after the first token with or without its cache: ONNX
        # Runtime and aotc agree on it.)
        assert got == _transformers_tokens(path.parent.parent / f"{kind}-hf", prompt, STEPS)
    with pytest.raises(aotc.AotcError, match=f"at most {LONGEST}"):
        aotc.generate(art, prompt, LONGEST)


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llm" / "generate.c"


def _example_app(artifact: Path, tmp_path: Path) -> Path:
    """examples/llm/generate.c built against the artifact (compiled with --name llm), warnings
    as errors."""
    exe = tmp_path / "generate"
    cc = shutil.which("cc") or shutil.which("gcc")
    build = subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{artifact}", str(EXAMPLE),
                            f"-L{artifact}", "-lllm", f"-Wl,-rpath,{artifact}", "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return exe


def _run_example(exe: Path, prompt: list, steps: int) -> list:
    run = subprocess.run([str(exe), "-n", str(steps), *map(str, prompt)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    ids, speed = run.stdout.splitlines()
    assert re.fullmatch(rf"prefill: {len(prompt)} tokens in [0-9.]+ ms; decode: {steps - 1} tokens in [0-9.]+ ms, "
                        r"[0-9.]+ tokens/s", speed), speed
    return [int(t) for t in ids.split()]


def _example_generates_like_onnx_runtime(path: Path, dims: dict, tmp_path: Path) -> None:
    """The decoder at `path` compiled with `dims` (--name llm), the example app built against
    it: its greedy ids after a 20-token prompt are ONNX Runtime's under aotc.generate's loop."""
    out = tmp_path / "llm"
    aotc.compile(path, target="native", output_dir=out, name="llm", dims=dims)
    prompt = [int(t) for t in np.random.default_rng(9).integers(0, 250, PROMPT)]
    got = _run_example(_example_app(out, tmp_path), prompt, STEPS)
    assert got == aotc.generate(OrtDecoder(path, aotc.load(out).manifest), prompt, STEPS)


def test_c_example_generates_like_onnx_runtime(exported, tmp_path):
    """The example app in C (examples/llm/generate.c), built against a Hugging Face LLaMA export
    compiled with a growing past: the prompt's ids in, ONNX Runtime's greedy ids out."""
    _example_generates_like_onnx_runtime(exported("llama"), decoders.dims(LONGEST), tmp_path)


def test_c_example_runs_a_genai_builder_decoder(tmp_path):
    """The same app on onnxruntime-genai's model builder's LLaMA (int4, the shared max-length KV
    buffer, accuracy_level 4: int8 activations in both)."""
    pytest.importorskip("onnxruntime_genai.models.builder", reason="onnxruntime-genai (the model builder) is not installed")
    from tests.test_contrib_genai import GEN_DIMS
    hf = tmp_path / "hf"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decoders.genai_source("llama", hf)
    path = decoders.genai_build(hf, tmp_path / "built", "int4", tmp_path / "cache")
    _example_generates_like_onnx_runtime(path, GEN_DIMS, tmp_path)


def test_c_example_runs_a_static_cache_decoder(static_cache, tmp_path):
    """The same app on mobius's static-cache LLaMA: write_indices and nonpad_kv_seqlen fed,
    key_cache.N updated in place as updated_key_cache.N."""
    _example_generates_like_onnx_runtime(static_cache("llama"), decoders.static_cache_dims(LONGEST), tmp_path)
