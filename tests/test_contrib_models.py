"""Models as ONNX Runtime's own tools write them: small random-weight encoders and decoders
exported by torch.onnx.export, rewritten by onnxruntime.transformers.optimizer (its fusions into
contrib operators), then compiled by aotc and compared with ONNX Runtime on fresh random inputs.
Each also compiles to no more kernels than the same model before the optimizer (aotc's fusion
sees through the contrib operators' rewrites).

Nothing is downloaded: transformers' models come from configs with random weights. In
transformers 5's GPT-2 and ViT the optimizer fuses the LayerNorms, Gelus and skips but not the
attention (their patterns are not the ones it matches), and in none the embeddings; a classic
BERT (the pre-5 Hugging Face form: MatMul + Add projections, a Div by sqrt(head), an additive
(1 - mask) * -10000 mask) written here in torch gives the EmbedLayerNormalization fusion too."""
from __future__ import annotations

import collections
import math
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from aotc.check.runner import run_check
from aotc.compiler import compile_program

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")

B, S, HID, HEADS, VOCAB = 2, 8, 32, 4, 100


class _Linear(torch.nn.Module):
    """x @ W + b as MatMul and Add (the form the optimizer's attention fusion matches; torch's
    Linear on 3-D inputs now exports as Reshape, Gemm, Reshape)."""

    def __init__(self, i, o):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(i, o) * 0.2)
        self.b = torch.nn.Parameter(torch.randn(o) * 0.1)

    def forward(self, x):
        return torch.matmul(x, self.w) + self.b


class _Layer(torch.nn.Module):
    def __init__(self, h, n, ff):
        super().__init__()
        self.n, self.d = n, h // n
        self.q, self.k, self.v, self.o = (_Linear(h, h) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(h, eps=1e-12), torch.nn.LayerNorm(h, eps=1e-12)
        self.f1, self.f2 = _Linear(h, ff), _Linear(ff, h)
        for ln in (self.ln1, self.ln2):
            torch.nn.init.normal_(ln.weight, 1.0, 0.1)
            torch.nn.init.normal_(ln.bias, 0.0, 0.1)

    def heads(self, x):
        return x.view(x.size(0), x.size(1), self.n, self.d).permute(0, 2, 1, 3)

    def forward(self, x, ext):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d) + ext
        ctx = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).contiguous().view(x.size(0), x.size(1), -1)
        x = self.ln1(self.o(ctx) + x)
        return self.ln2(self.f2(torch.nn.functional.gelu(self.f1(x))) + x)


class ClassicBert(torch.nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.word, self.pos, self.tt = (torch.nn.Embedding(VOCAB, HID), torch.nn.Embedding(32, HID),
                                        torch.nn.Embedding(2, HID))
        self.ln = torch.nn.LayerNorm(HID, eps=1e-12)
        self.layers = torch.nn.ModuleList(_Layer(HID, HEADS, 2 * HID) for _ in range(layers))

    def forward(self, ids, mask, tt):
        pos = torch.arange(ids.size(1), dtype=torch.long).unsqueeze(0).expand_as(ids)
        x = self.ln(self.word(ids) + self.pos(pos) + self.tt(tt))
        ext = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            x = layer(x, ext)
        return x


class _LastHidden(torch.nn.Module):
    """A transformers model called with keyword inputs, giving its last hidden state."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args))).last_hidden_state


def _transformers(kind):
    import transformers as tf
    if kind == "bert":
        m = tf.BertModel(tf.BertConfig(attn_implementation="eager", hidden_size=HID, num_hidden_layers=2,
                                       num_attention_heads=HEADS, intermediate_size=2 * HID, vocab_size=VOCAB,
                                       max_position_embeddings=32))
        return _LastHidden(m, ["input_ids", "attention_mask", "token_type_ids"])
    if kind == "gpt2":
        m = tf.GPT2Model(tf.GPT2Config(attn_implementation="eager", n_embd=HID, n_layer=2, n_head=HEADS,
                                       vocab_size=VOCAB, n_positions=32, bos_token_id=0, eos_token_id=0))
        return _LastHidden(m, ["input_ids"])
    m = tf.ViTModel(tf.ViTConfig(attn_implementation="eager", hidden_size=HID, num_hidden_layers=2,
                                 num_attention_heads=HEADS, intermediate_size=2 * HID, image_size=32, patch_size=8))
    return _LastHidden(m, ["pixel_values"])


def _inputs(kind, seed):
    """Example inputs for the export (torch) and fresh ones for the check (numpy), per model."""
    rng = np.random.default_rng(seed)
    if kind == "vit":
        return {"pixel_values": rng.standard_normal((B, 3, 32, 32)).astype(np.float32)}
    feeds = {"input_ids": rng.integers(0, VOCAB, (B, S)).astype(np.int64)}
    if kind != "gpt2":
        mask = np.ones((B, S), np.int64)
        mask[1, int(rng.integers(3, S)):] = 0            # a padded second sequence
        feeds["attention_mask"] = mask
        feeds["token_type_ids"] = rng.integers(0, 2, (B, S)).astype(np.int64)
    return feeds


# model -> (optimizer model_type, its opt_level: 0 is the Python fusions alone, 2 runs ONNX
# Runtime's own graph optimizer first), the contrib operators the optimizer must write
CASES = {
    "classic_bert": ("bert", 0, {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"}),
    "bert": ("bert", 0, {"Attention", "SkipLayerNormalization", "BiasGelu", "LayerNormalization"}),
    "gpt2": ("gpt2", 0, {"SkipLayerNormalization", "FastGelu", "LayerNormalization"}),
    "vit": ("vit", 2, {"SkipLayerNormalization", "BiasGelu", "LayerNormalization"}),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (plain model path, optimized model path), built once for the module."""
    d = tmp_path_factory.mktemp("contrib_models")
    out = {}
    for name, (model_type, level, _) in CASES.items():
        torch.manual_seed(0)
        model = (ClassicBert() if name == "classic_bert" else _transformers(name)).eval()
        feeds = _inputs("bert" if name == "classic_bert" else name, 0)
        plain, opt = d / f"{name}.onnx", d / f"{name}_opt.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, tuple(torch.from_numpy(v) for v in feeds.values()), str(plain),
                              input_names=list(feeds), output_names=["y"], opset_version=14, dynamo=False)
            optimizer.optimize_model(str(plain), model_type=model_type, num_heads=HEADS, hidden_size=HID,
                                     opt_level=level).save_model_to_file(str(opt))
        out[name] = (plain, opt)
    return out


def _ops(path: Path) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node if n.domain in ("com.microsoft", "")
                               and n.op_type not in ("MatMul", "Add", "Reshape", "Transpose"))


@pytest.mark.parametrize("name", list(CASES))
def test_optimized_model_matches_onnx_runtime(name, exported, tmp_path):
    plain, opt = exported[name]
    want = CASES[name][2]
    model = onnx.load(str(opt))
    written = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"} | \
              {n.op_type for n in model.graph.node if n.op_type == "LayerNormalization"}
    assert want <= written, f"the optimizer wrote {sorted(written)}, the test expects {sorted(want)}"
    feeds = _inputs("bert" if name == "classic_bert" else name, 1)       # (not the export's inputs)
    res = run_check(opt, inputs=feeds, output_dir=tmp_path / "out", rtol=1e-4, atol=1e-5)
    assert res.outputs and all(o.passed for o in res.outputs), \
        [(o.name, o.max_abs_err, o.max_rel_err) for o in res.outputs]


@pytest.mark.parametrize("name", list(CASES))
def test_optimized_model_compiles_to_no_more_kernels(name, exported):
    """What the optimizer fused comes apart into ops aotc fuses again: the Attention is one
    kernel (as the exporter's chain becomes), a LayerNormalization one (fewer than the
    exporter's decomposed mean / variance chain), the bias and skip Adds epilogues."""
    plain, opt = exported[name]
    a, b = compile_program(plain), compile_program(opt)
    la, lb = [s.group.label for s in a.steps], [s.group.label for s in b.steps]
    assert len(lb) <= len(la), (la, lb)
    assert sum("Attention" in x for x in lb) == sum("Attention" in x for x in la) == 2


def _quantize_dynamic(src: Path, dst: Path, weights: str) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8 if weights == "int8" else QuantType.QUInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


@pytest.mark.parametrize("weights", ["int8", "uint8"])
def test_quantize_dynamic_encoders_match_onnx_runtime(weights, exported, tmp_path):
    """quantize_dynamic on the optimized encoder writes QAttention and QEmbedLayerNormalization;
    on the plain one MatMulInteger chains, which ONNX Runtime's own graph optimizer (saved with
    optimized_model_filepath) fuses into DynamicQuantizeMatMul, MatMulIntegerToFloat and
    FusedMatMul. The activations' run-time quantization must round as ONNX Runtime's does for
    the outputs to agree this closely."""
    import onnxruntime as ort
    plain, opt = exported["classic_bert"]
    q_opt, q_plain, q_fused = tmp_path / "q_opt.onnx", tmp_path / "q_plain.onnx", tmp_path / "q_fused.onnx"
    _quantize_dynamic(opt, q_opt, weights)
    _quantize_dynamic(plain, q_plain, weights)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(q_fused)
    ort.InferenceSession(str(q_plain), so, providers=["CPUExecutionProvider"])
    for path, want in ((q_opt, {"QAttention", "QEmbedLayerNormalization"}),
                       (q_fused, {"DynamicQuantizeMatMul", "MatMulIntegerToFloat", "FusedMatMul"})):
        written = {n.op_type for n in onnx.load(str(path)).graph.node if n.domain == "com.microsoft"}
        assert want <= written, (path.name, sorted(written))
        feeds = _inputs("bert", 3)
        res = run_check(path, inputs=feeds, output_dir=tmp_path / f"out_{path.stem}", rtol=1e-4, atol=1e-5)
        assert res.outputs and all(o.passed for o in res.outputs), \
            [(o.name, o.max_abs_err, o.max_rel_err) for o in res.outputs]


def test_dynamic_axes_export_compiles_with_bound_shapes(tmp_path):
    """An export with dynamic batch and sequence axes (as users export): the contrib rewrites
    need those dimensions when the model is read, which the user's --shape bindings give
    (run_check binds them from its inputs)."""
    torch.manual_seed(0)
    feeds = _inputs("bert", 4)
    plain, opt = tmp_path / "dyn.onnx", tmp_path / "dyn_opt.onnx"
    axes = {n: {0: "batch", 1: "seq"} for n in feeds}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ClassicBert(layers=1).eval(), tuple(torch.from_numpy(v) for v in feeds.values()), str(plain),
                          input_names=list(feeds), output_names=["y"], opset_version=14, dynamo=False,
                          dynamic_axes=axes)
        optimizer.optimize_model(str(plain), model_type="bert", num_heads=HEADS, hidden_size=HID,
                                 opt_level=0).save_model_to_file(str(opt))
    assert "Attention" in {n.op_type for n in onnx.load(str(opt)).graph.node}
    res = run_check(opt, inputs=feeds, output_dir=tmp_path / "out")
    assert res.outputs and all(o.passed for o in res.outputs), [(o.max_abs_err, o.max_rel_err) for o in res.outputs]
