"""Decoders as onnxruntime-genai's model builder writes them (`python -m
onnxruntime_genai.models.builder -p fp32|int4 -e cpu`), from small random-weight transformers
models saved locally (LLaMA: GQA, RMSNorm, rotary, SwiGLU; Qwen2 with biased projections and
tied embeddings; Phi-3 mini), compiled by aotc at fixed shapes and compared with ONNX Runtime on
the same inputs: the prompt (prefill, batch 2 with a padded second sequence, into the shared
max-length KV buffer the genai runtime passes as past), then one token on that past.

What the builder writes: SimplifiedLayerNormalization (default domain), SkipSimplifiedLayer-
Normalization, GroupQueryAttention on packed QKV with do_rotary and the cos / sin caches,
seqlens_k = ReduceSum(attention_mask) - 1, total_sequence_length = the mask's width; with int4,
MatMulNBits (block 32 symmetric by default, accuracy_level 4) and, with shared_embeddings,
GatherBlockQuantized reading the LM head's packed weights.

The present buffers are compared where ONNX Runtime defines them (each entry's first
seqlens_k + 1 positions: it leaves the rest of the max-length buffer unwritten).

int4 models: the builder writes accuracy_level 4, at which ONNX Runtime quantizes the
activations to int8 blocks, and so does aotc (frontend/contrib_nbits.py, runtime/aotc_nbits.h):
the comparison is with ONNX Runtime on the model as written, and on it set to accuracy_level 0
(float32 activations, the exact product), which aotc computes too."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime_genai.models.builder", reason="onnxruntime-genai (the model builder) is not installed")

import onnxruntime as ort  # noqa: E402

import aotc  # noqa: E402
from aotc.bench import OrtDecoder  # noqa: E402

from models.decoders import GENAI_TINY, genai_build, genai_dims, genai_source  # noqa: E402

HID, LAYERS, HEADS, KV_HEADS, VOCAB = (GENAI_TINY[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                          "num_key_value_heads", "vocab_size"))
HEAD = HID // HEADS
B, PROMPT, MAX_LEN = 2, 5, 24          # the KV buffers: MAX_LEN positions (the genai runtime's max_length)
LENGTHS = (5, 3)                       # each entry's prompt (the second padded on the right)


# name -> (transformers model, builder precision, builder extra options, the ops it must write)
MODELS = {
    "llama_fp32": ("llama", "fp32", [], {"GroupQueryAttention", "SkipSimplifiedLayerNormalization",
                                         "SimplifiedLayerNormalization"}),
    "qwen2_fp32": ("qwen2", "fp32", [], {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"}),
    "phi3_fp32": ("phi3", "fp32", [], {"GroupQueryAttention", "SkipSimplifiedLayerNormalization"}),
    # the builder's int4 defaults: block 32, symmetric (no zero points), accuracy_level 4
    "llama_int4": ("llama", "int4", [], {"MatMulNBits", "GroupQueryAttention"}),
    # block 128 > K = 64, the embeddings read from the LM head's packed weights (symmetric: the
    # builder's asymmetric tied form, onnxruntime-genai 0.18, gathers the float weights
    # reshaped to uint8 with no scales, a model ONNX Runtime refuses to load)
    "qwen2_int4": ("qwen2", "int4", ["shared_embeddings=true", "block_size=128"],
                   {"MatMulNBits", "GatherBlockQuantized", "GroupQueryAttention"}),
    # asymmetric (packed uint8 zero points), block 16
    "phi3_int4": ("phi3", "int4", ["is_symmetric=false", "block_size=16"], {"MatMulNBits", "GroupQueryAttention"}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> the builder's model.onnx, each built on first use."""
    root = tmp_path_factory.mktemp("genai")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            kind, precision, extra, _ = MODELS[name]
            hf = root / f"{kind}_hf"
            if not hf.exists():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    genai_source(kind, hf)
            out = root / name
            cache[name] = genai_build(hf, out, precision, root / "cache", extra)
        return cache[name]
    return get


def _with_accuracy_level(src: Path, dst: Path, level: int) -> Path:
    m = onnx.load(str(src))
    for n in m.graph.node:
        if n.op_type == "MatMulNBits":
            for a in n.attribute:
                if a.name == "accuracy_level":
                    a.i = level
    onnx.save(m, str(dst))
    return dst


def _prefill_feeds(rng) -> dict:
    mask = np.zeros((B, PROMPT), np.int64)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    feeds = {"input_ids": rng.integers(0, VOCAB, (B, PROMPT)).astype(np.int64), "attention_mask": mask}
    for layer in range(LAYERS):
        for kv in ("key", "value"):
            # the genai runtime's shared buffer: max_length positions, nothing in them yet
            feeds[f"past_key_values.{layer}.{kv}"] = np.zeros((B, KV_HEADS, MAX_LEN, HEAD), np.float32)
    return feeds


def _step_feeds(rng, presents: dict) -> dict:
    """One new token per entry after its prompt: the mask grows by a column (the entry's padding
    stays 0), the past is the prefill's present, written up to each entry's length."""
    mask = np.zeros((B, PROMPT + 1), np.int64)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    mask[:, PROMPT] = 1
    feeds = {"input_ids": rng.integers(0, VOCAB, (B, 1)).astype(np.int64), "attention_mask": mask}
    for layer in range(LAYERS):
        for kv in ("key", "value"):
            past = np.zeros((B, KV_HEADS, MAX_LEN, HEAD), np.float32)
            for b, n in enumerate(LENGTHS):
                past[b, :, :n] = presents[f"present.{layer}.{kv}"][b, :, :n]
            feeds[f"past_key_values.{layer}.{kv}"] = past
    return feeds


def _run_aotc(path: Path, feeds: dict, out: Path) -> dict:
    m = aotc.compile(path, target="c", output_dir=out, shapes={k: v.shape for k, v in feeds.items()})
    return dict(zip(m.output_names, m.run(feeds)))


def _run_ort(path: Path, feeds: dict) -> dict:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _compare(got: dict, want: dict, lengths, rtol: float, atol: float) -> None:
    assert set(got) == set(want)
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=rtol, atol=atol)
    for name in want:
        if name.startswith("present."):
            assert got[name].shape == want[name].shape == (B, KV_HEADS, MAX_LEN, HEAD), name
            for b, n in enumerate(lengths):
                np.testing.assert_allclose(got[name][b, :, :n], want[name][b, :, :n], rtol=rtol, atol=atol,
                                           err_msg=name)


def _prefill_then_step(path: Path, ref: Path, tmp_path: Path, rtol: float, atol: float) -> list[tuple]:
    """aotc (on `path`) against ONNX Runtime (on `ref`) for the prompt, then for one token on
    the prompt's present; returns (aotc's logits, ORT's on `path`) for each."""
    rng = np.random.default_rng(7)
    feeds = _prefill_feeds(rng)
    got = _run_aotc(path, feeds, tmp_path / "prefill")
    want = _run_ort(ref, feeds)
    assert np.abs(want["logits"]).max() > 0.5
    _compare(got, want, LENGTHS, rtol, atol)
    runs = [(got["logits"], _run_ort(path, feeds)["logits"])]
    step = _step_feeds(rng, got)
    got = _run_aotc(path, step, tmp_path / "step")
    want = _run_ort(ref, step)
    _compare(got, want, [n + 1 for n in LENGTHS], rtol, atol)
    runs.append((got["logits"], _run_ort(path, step)["logits"]))
    return runs


def _written(path: Path) -> set:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


@pytest.mark.parametrize("name", [k for k in MODELS if k.endswith("_fp32")])
def test_builder_fp32_decoder_matches_onnx_runtime(name, built, tmp_path):
    path = built(name)
    assert MODELS[name][3] <= _written(path), sorted(_written(path))
    _prefill_then_step(path, path, tmp_path, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("level", [4, 0])
@pytest.mark.parametrize("name", [k for k in MODELS if k.endswith("_int4")])
def test_builder_int4_decoder_matches_onnx_runtime(name, level, built, tmp_path):
    """Against ONNX Runtime at the builder's accuracy_level 4 (int8 activations) and with the
    model set to level 0 (the exact product): aotc computes what the model asks for."""
    path = built(name)
    assert MODELS[name][3] <= _written(path), sorted(_written(path))
    levels = {int(a.i) for n in onnx.load(str(path), load_external_data=False).graph.node
              if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"}
    assert levels == {4}, levels
    if level == 0:
        path = _with_accuracy_level(path, tmp_path / "level0.onnx", 0)
    _prefill_then_step(path, path, tmp_path, rtol=1e-4, atol=1e-5)


# prefill and decode from one artifact: the prompt's length and the mask's width are run-time
# dimensions; the KV buffers keep the builder's shared max length (GEN_MAX positions)
GEN_MAX, GEN_PROMPT, GEN_STEPS = 64, 17, 32     # (17 rows: MatMulNBits multiplies the prompt by its GEMM, a step row by row)
GEN_DIMS = genai_dims(GEN_MAX, HEAD)


@pytest.mark.parametrize("name,target", [("llama_fp32", "c"), ("llama_fp32", "native"), ("phi3_fp32", "native"),
                                         ("llama_int4", "native"), ("qwen2_int4", "c"), ("qwen2_int4", "native")])
def test_builder_decoder_generates_like_onnx_runtime(name, target, built, tmp_path):
    """One artifact over sequence lengths 1..64 generates 32 tokens greedily after a 17-token
    prompt (aotc.generate: the prompt in one run, then a token a run, each run's present fed
    back as the next past): the same tokens as ONNX Runtime on the same loop (int4: both at the
    builder's accuracy_level 4, int8 activations)."""
    path = built(name)
    art = aotc.compile(path, target=target, output_dir=tmp_path / "out", dims=GEN_DIMS)
    dims = {d["dim"] for p in art.manifest["inputs"] for d in p.get("dims", [])}
    assert dims == {"sequence_length", "total_sequence_length"}, dims
    # the KV buffers are updated in place (aotc.generate passes one array as past and present)
    shared = {p["name"]: p.get("in_place_of") for p in art.manifest["outputs"] if p["name"].startswith("present")}
    assert shared == {k: k.replace("present", "past_key_values") for k in shared} and len(shared) == 2 * LAYERS
    prompt = [int(t) for t in np.random.default_rng(11).integers(0, VOCAB - 3, GEN_PROMPT)]
    got = aotc.generate(art, prompt, GEN_STEPS)
    want = aotc.generate(OrtDecoder(path, art.manifest), prompt, GEN_STEPS)
    # (not one token repeated: qwen2's tied embeddings make a random model echo its input,
    # and it still moves between two tokens)
    assert len(got) == GEN_STEPS and len(set(got)) > 1, got
    assert got == want
    if name == "qwen2_int4":
        # the tied embeddings gather from a folded Reshape of the LM head's packed weights: the
        # same bytes in memory, stored once (memory/planner.py); where the head's weights are
        # relaid by tiles (native), the gather reads the tiles (passes/caches.py)
        m = onnx.load(str(path))
        inits = {t.name: numpy_helper.to_array(t).nbytes for t in m.graph.initializer}
        head = inits["lm_head.MatMul.weight_Q4"]
        assert art.manifest["weights"]["bytes"] < sum(inits.values()) + head // 2, (inits, art.manifest["weights"])


@pytest.mark.parametrize("target", ["opencl", "cuda"])
def test_builder_int4_decoder_generates_on_gpu_targets(target, built, tmp_path):
    """The int4 decoder's one artifact on opencl (PoCL) and cuda (the CUDA emulation): the
    prompt's MatMulNBits launches its GEMM, each step's the row-by-row kernel (the host
    choosing by the run's rows; at accuracy_level 4 the int8-activation loops); 8 tokens, as
    ONNX Runtime's."""
    from tests.test_run_time_dims_gpu import TARGETS, _compile
    mark = next(p for p in TARGETS if p.values[0] == target).marks
    if mark and mark[0].args[0]:
        pytest.skip(mark[0].kwargs["reason"])
    path = built("llama_int4")
    art = aotc.load(_compile(path, target, tmp_path, dims=GEN_DIMS))
    prompt = [int(t) for t in np.random.default_rng(11).integers(0, VOCAB - 3, GEN_PROMPT)]
    got = aotc.generate(art, prompt, 8)
    assert got == aotc.generate(OrtDecoder(path, art.manifest), prompt, 8)
