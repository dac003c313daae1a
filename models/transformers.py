"""Transformers written node for node the way `torch.onnx.export` writes the Hugging Face models:
BERT (encoder), GPT-2 (decoder with causal mask and tied LM head), ViT (patch Conv + encoder).

Shapes flow the exporter's way too: every `x.view(...)` is Shape -> Gather -> Unsqueeze ->
Concat -> Reshape, position ids are Slices of a registered buffer (BERT) or a Range on the
sequence length (GPT-2), `expand(batch, -1, -1)` goes through Equal/Where. With static input
shapes all of that folds at compile time. Weights follow the HF initialisation: normal(0, 0.02),
LayerNorm scales near 1, so activations keep realistic magnitudes through every layer.

size="full" builds the real configurations (BERT-base, GPT-2 small, ViT-tiny/16);
size="small" the same graphs with tiny dimensions.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from .builder import ModelBuilder

F32, I64 = np.float32, np.int64
FINFO_MIN = float(np.finfo(np.float32).min)

CONFIGS = {
    "bert": {
        "full": dict(vocab=30522, hidden=768, layers=12, heads=12, ffn=3072, max_pos=512, type_vocab=2),
        "small": dict(vocab=100, hidden=64, layers=2, heads=4, ffn=128, max_pos=32, type_vocab=2),
    },
    "gpt2": {
        "full": dict(vocab=50257, hidden=768, layers=12, heads=12, n_pos=1024),
        "small": dict(vocab=100, hidden=64, layers=2, heads=4, n_pos=32),
    },
    "vit": {
        "full": dict(image=224, patch=16, hidden=192, layers=12, heads=3, ffn=768, labels=1000),
        "small": dict(image=32, patch=8, hidden=32, layers=2, heads=2, ffn=64, labels=10),
    },
}


class _Exporter:
    """ModelBuilder plus the node patterns torch.onnx.export emits for common PyTorch idioms."""

    def __init__(self, name: str, seed: int):
        self.b = ModelBuilder(name, opset=17, seed=seed)
        self.rng = self.b.rng

    # -- parameters ------------------------------------------------------------------------
    def normal(self, shape, hint: str, std: float = 0.02) -> str:
        return self.b.const((self.rng.standard_normal(shape, dtype=np.float32) * std).astype(F32), hint)

    def ln_params(self, d: int) -> tuple[str, str]:
        g = (1.0 + 0.1 * self.rng.standard_normal(d, dtype=np.float32)).astype(F32)
        return self.b.const(g, "ln_weight"), self.normal((d,), "ln_bias")

    # -- exporter idioms -------------------------------------------------------------------
    def k(self, value) -> str:
        """A small constant as a Constant node (int64 unless it is a float)."""
        arr = np.asarray(value, dtype=F32 if isinstance(value, float) else I64)
        return self.b.constant_node(arr)

    def size(self, x: str, dim: int) -> str:
        """x.size(dim): Shape -> Gather (a scalar)."""
        return self.b.op("Gather", [self.b.op("Shape", [x]), self.k(dim)], axis=0)

    def unsqueeze0(self, scalar: str) -> str:
        return self.b.op("Unsqueeze", [scalar, self.k([0])])

    def view(self, x: str, dims: list) -> str:
        """x.view(*dims): dims are Python ints or scalar tensor names (from size())."""
        parts = [self.unsqueeze0(d) if isinstance(d, str) else self.k([d]) for d in dims]
        return self.b.op("Reshape", [x, self.b.op("Concat", parts, axis=0)])

    def linear(self, x: str, din: int, dout: int, hint: str) -> str:
        """nn.Linear on a 3-D input: MatMul by the transposed weight, then Add(bias, y)."""
        w = self.normal((din, dout), f"{hint}_weight")
        y = self.b.op("MatMul", [x, w])
        return self.b.op("Add", [self.normal((dout,), f"{hint}_bias"), y])

    def layernorm(self, x: str, d: int, eps: float, out: str | None = None) -> str:
        g, beta = self.ln_params(d)
        return self.b.op("LayerNormalization", [x, g, beta], axis=-1, epsilon=eps,
                         outputs=[out] if out else None)

    def gelu_erf(self, x: str) -> str:
        """0.5 * x * (1 + erf(x / sqrt(2)))"""
        b = self.b
        e = b.op("Erf", [b.op("Div", [x, self.k(1.4142135381698608)])])
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, self.k(1.0)])]), self.k(0.5)])

    def gelu_tanh(self, x: str) -> str:
        """gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))"""
        b = self.b
        cube = b.op("Pow", [x, self.k(3.0)])
        inner = b.op("Add", [x, b.op("Mul", [self.k(0.044715), cube])])
        t = b.op("Tanh", [b.op("Mul", [self.k(math.sqrt(2.0 / math.pi)), inner])])
        return b.op("Mul", [b.op("Mul", [self.k(0.5), x]), b.op("Add", [self.k(1.0), t])])

    def split_heads(self, x: str, heads: int, hd: int, perm) -> str:
        """x.view(b, s, heads, hd).permute(perm)"""
        r = self.view(x, [self.size(x, 0), self.size(x, 1), heads, hd])
        return self.b.op("Transpose", [r], perm=perm)

    def merge_heads(self, ctx: str, hidden: int) -> str:
        """ctx.permute(0, 2, 1, 3).contiguous().view(b, s, hidden)"""
        t = self.b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        return self.view(t, [self.size(t, 0), self.size(t, 1), hidden])

    def attention(self, q: str, k: str, v: str, heads: int, hd: int, hidden: int, mask=None, causal=None) -> str:
        b = self.b
        qh = self.split_heads(q, heads, hd, [0, 2, 1, 3])
        kt = self.split_heads(k, heads, hd, [0, 2, 3, 1])        # permute + transpose(-1, -2), fused
        vh = self.split_heads(v, heads, hd, [0, 2, 1, 3])
        scores = b.op("Div", [b.op("MatMul", [qh, kt]), self.k(float(math.sqrt(hd)))])
        if causal is not None:
            scores = causal(qh, kt, scores)
        if mask is not None:
            scores = b.op("Add", [scores, mask])
        probs = b.op("Softmax", [scores], axis=-1)
        return self.merge_heads(b.op("MatMul", [probs, vh]), hidden)


# ----------------------------------------------------------------------------- BERT
def bert(size: str = "small"):
    c = CONFIGS["bert"][size]
    H, nh = c["hidden"], c["heads"]
    hd = H // nh
    e = _Exporter("bert", seed=11)
    b = e.b
    ids = b.input("input_ids", ["batch", "sequence"], I64)
    mask = b.input("attention_mask", ["batch", "sequence"], I64)

    # embeddings: position / token-type ids are slices of registered buffers
    seq = e.size(ids, 1)
    pos_buf = b.const(np.arange(c["max_pos"], dtype=I64)[None, :], "position_ids")
    tt_buf = b.const(np.zeros((1, c["max_pos"]), I64), "token_type_ids")

    def first_seq(buf):
        return b.op("Slice", [buf, e.k([0]), e.unsqueeze0(seq), e.k([1]), e.k([1])])

    tt_ids = b.op("Expand", [first_seq(tt_buf), b.op("Concat", [e.unsqueeze0(e.size(ids, 0)), e.unsqueeze0(seq)],
                                                           axis=0)])
    words = b.op("Gather", [e.normal((c["vocab"], H), "word_embeddings"), ids], axis=0)
    types = b.op("Gather", [e.normal((c["type_vocab"], H), "token_type_embeddings"), tt_ids], axis=0)
    pos = b.op("Gather", [e.normal((c["max_pos"], H), "position_embeddings"), first_seq(pos_buf)], axis=0)
    h = e.layernorm(b.op("Add", [b.op("Add", [words, types]), pos]), H, 1e-12)

    # extended attention mask: (1 - mask[:, None, None, :]) * finfo.min
    m = b.op("Unsqueeze", [b.op("Unsqueeze", [mask, e.k([1])]), e.k([2])])
    m = b.op("Cast", [m], to=1)
    m = b.op("Mul", [b.op("Sub", [e.k(1.0), m]), e.k(FINFO_MIN)])

    for layer in range(c["layers"]):
        q, k, v = (e.linear(h, H, H, n) for n in ("query", "key", "value"))
        ctx = e.attention(q, k, v, nh, hd, H, mask=m)
        h = e.layernorm(b.op("Add", [e.linear(ctx, H, H, "attn_out"), h]), H, 1e-12)
        ff = e.linear(e.gelu_erf(e.linear(h, H, c["ffn"], "intermediate")), c["ffn"], H, "output")
        last = layer == c["layers"] - 1
        h = e.layernorm(b.op("Add", [ff, h]), H, 1e-12, out="last_hidden_state" if last else None)

    # pooler: tanh(dense(h[:, 0]))
    first = b.op("Gather", [h, e.k(0)], axis=1)
    pooled = b.op("Gemm", [first, e.normal((H, H), "pooler_weight"), e.normal((H,), "pooler_bias")],
                  alpha=1.0, beta=1.0, transB=1)
    b.op("Tanh", [pooled], outputs=["pooler_output"])
    b.output("last_hidden_state", ["batch", "sequence", H])
    b.output("pooler_output", ["batch", H])
    return b.build()


# ----------------------------------------------------------------------------- GPT-2
def gpt2(size: str = "small"):
    c = CONFIGS["gpt2"][size]
    D, nh = c["hidden"], c["heads"]
    hd = D // nh
    e = _Exporter("gpt2", seed=12)
    b = e.b
    ids = b.input("input_ids", ["batch", "sequence"], I64)
    seq = e.size(ids, -1)
    position_ids = b.op("Unsqueeze", [b.op("Range", [e.k(0), seq, e.k(1)]), e.k([0])])
    wte = e.normal((c["vocab"], D), "wte")
    h = b.op("Add", [b.op("Gather", [wte, ids], axis=0),
                     b.op("Gather", [e.normal((c["n_pos"], D), "wpe", std=0.01), position_ids], axis=0)])
    bias_buf = b.const(np.tril(np.ones((c["n_pos"], c["n_pos"]), np.bool_))[None, None], "attn_bias")

    def conv1d(x, nx, nf, hint):
        """HF Conv1D: addmm(bias, x.view(-1, nx), weight).view(*x.size()[:-1], nf)"""
        x2 = e.view(x, [-1, e.size(x, -1)])
        y = b.op("Gemm", [x2, e.normal((nx, nf), f"{hint}_weight"), e.normal((nf,), f"{hint}_bias")],
                 alpha=1.0, beta=1.0)
        return e.view(y, [e.size(x, 0), e.size(x, 1), nf])

    def causal(q, k, scores):
        """bias[:, :, key_len - query_len : key_len, :key_len], then where(mask, scores, finfo.min)"""
        ql, kl = e.size(q, -2), e.size(k, -1)
        start = b.op("Sub", [kl, ql])
        m = b.op("Slice", [bias_buf, e.unsqueeze0(start), e.unsqueeze0(kl), e.k([2]), e.k([1])])
        m = b.op("Slice", [m, e.k([0]), e.unsqueeze0(kl), e.k([3]), e.k([1])])
        return b.op("Where", [m, scores, e.k(FINFO_MIN)])

    for _ in range(c["layers"]):
        x = e.layernorm(h, D, 1e-5)
        q, k, v = b.op("Split", [conv1d(x, D, 3 * D, "c_attn"), e.k([D, D, D])], n_out=3, axis=2)
        a = e.attention(q, k, v, nh, hd, D, causal=causal)
        h = b.op("Add", [conv1d(a, D, D, "attn_c_proj"), h])
        x = e.layernorm(h, D, 1e-5)
        ff = conv1d(e.gelu_tanh(conv1d(x, D, 4 * D, "c_fc")), 4 * D, D, "mlp_c_proj")
        h = b.op("Add", [h, ff])
    h = e.layernorm(h, D, 1e-5)
    # tied LM head: the embedding matrix, transposed
    b.op("MatMul", [h, b.op("Transpose", [wte], perm=[1, 0])], outputs=["logits"])
    b.output("logits", ["batch", "sequence", c["vocab"]])
    return b.build()


# ----------------------------------------------------------------------------- ViT
def vit(size: str = "small"):
    c = CONFIGS["vit"][size]
    D, nh, p = c["hidden"], c["heads"], c["patch"]
    hd = D // nh
    n_patches = (c["image"] // p) ** 2
    e = _Exporter("vit", seed=13)
    b = e.b
    px = b.input("pixel_values", ["batch", 3, c["image"], c["image"]])

    # patch embedding: Conv(kernel = stride = patch), flatten(2), transpose(1, 2)
    w = e.normal((D, 3, p, p), "patch_weight")
    y = b.op("Conv", [px, w, e.normal((D,), "patch_bias")], kernel_shape=[p, p], strides=[p, p],
             pads=[0, 0, 0, 0], dilations=[1, 1], group=1)
    y = e.view(y, [e.size(y, 0), e.size(y, 1), -1])
    x = b.op("Transpose", [y], perm=[0, 2, 1])

    # cls_token.expand(batch, -1, -1): the exporter maps -1 to 1 through Equal/Where
    shape = b.op("Concat", [e.unsqueeze0(e.size(px, 0)), e.k([-1]), e.k([-1])], axis=0)
    ones = b.op("ConstantOfShape", [b.op("Shape", [shape])],
                value=numpy_helper.from_array(np.array([1], I64)))
    shape = b.op("Where", [b.op("Equal", [shape, e.k(-1)]), ones, shape])
    cls = b.op("Expand", [e.normal((1, 1, D), "cls_token"), shape])
    x = b.op("Concat", [cls, x], axis=1)
    x = b.op("Add", [x, e.normal((1, n_patches + 1, D), "position_embeddings")])

    for _ in range(c["layers"]):
        a = e.layernorm(x, D, 1e-12)
        q, k, v = (e.linear(a, D, D, n) for n in ("query", "key", "value"))
        x = b.op("Add", [e.linear(e.attention(q, k, v, nh, hd, D), D, D, "attn_out"), x])
        a = e.layernorm(x, D, 1e-12)
        ff = e.linear(e.gelu_erf(e.linear(a, D, c["ffn"], "intermediate")), c["ffn"], D, "output")
        x = b.op("Add", [ff, x])
    x = e.layernorm(x, D, 1e-12)
    cls_out = b.op("Gather", [x, e.k(0)], axis=1)
    b.op("Gemm", [cls_out, e.normal((c["labels"], D), "classifier_weight"), e.normal((c["labels"],), "classifier_bias")],
         outputs=["logits"], alpha=1.0, beta=1.0, transB=1)
    b.output("logits", ["batch", c["labels"]])
    return b.build()
