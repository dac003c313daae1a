"""ONNX Runtime's contrib operators (domain com.microsoft, and the few it registers in the default
domain) as graphs of ai.onnx operators, so that the models ONNX Runtime's own tools write (the
transformers optimizer, the quantizers, onnxruntime-genai's model builder) compile as the
exporters' models do. Each such node is replaced, when the model is read, by default-domain nodes
that compute what ONNX Runtime's CPU kernels compute (its docs/ContribOperators.md is the
specification; where the two differ, the kernels are the reference `aotc check` compares with).

    Gelu, BiasGelu, FastGelu    Gelu (opset 20; FastGelu's tanh form), after the bias Add
    QuickGelu                   x * Sigmoid(alpha * x)
    BiasAdd, BiasSplitGelu      Adds; the two halves of the last axis, left * Gelu(right)
    SkipLayerNormalization      the sum (input + skip + bias) -> LayerNormalization
    SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization   RMSNormalization (opset 23)
    LayerNormalization-1        (default domain, models of opset < 17) ONNX's LayerNormalization-17
    EmbedLayerNormalization     Gathers of the word, position and segment tables, LayerNormalization;
                                mask_index = ReduceSum of the mask
    FusedMatMul                 Transposes (batch and matrix), MatMul, the alpha Mul
    FusedGemm, FusedConv        Gemm / Conv (+ Z) and the activation node
    GroupNorm                   NHWC -> GroupNormalization (opset 21) -> NHWC, optional Swish
    Attention                   one MatMul of the packed QKV weights, Split, then ONNX's Attention
                                (opset 23: one kernel) with every mask_index form as its float mask
    MultiHeadAttention          ONNX's Attention, after the bias, unpacking and mask
    RotaryEmbedding             ONNX's RotaryEmbedding (opset 23; its own input order)

The masks are additive, with ONNX Runtime's mask_filter_value (-10000 by default) where a key is
hidden, as its kernels compute them: so a fully masked row gives what ONNX Runtime gives (the
softmax of its scores less 10000 each), not the zeros of a -inf mask.

Every attribute and optional input these operators have is either computed or refused by name
(Emit.refuse); CONTRIB_REFUSED lists the refusals for docs/ONNX_SUPPORT.md.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ..errors import ModelError, ShapeError
from ..ir.internal import OPSET_ATTR
from .emit import EMIT_OPSET, Emit, Deferred, text

MS = "com.microsoft"


# ------------------------------------------------------------------------------------ helpers
def _at(e: Emit, opset: int, op_type: str, inputs: list, out: str | None = None, n_out: int = 1,
        hint: str | None = None, **attrs):
    """A node of an op (or form) newer than EMIT_OPSET, marked with the opset that defines it.
    Returns its output name, or the list of its outputs when n_out > 1 (names given in `out`)."""
    if n_out == 1:
        outs = [out or e.name(hint or op_type.lower())]
    else:
        outs = list(out) if out else [e.name(f"{hint or op_type.lower()}{k}") for k in range(n_out)]
    e.nodes.append(helper.make_node(op_type, inputs, outs, **attrs, **{OPSET_ATTR: opset}))
    return outs[0] if n_out == 1 else outs


def _in(e: Emit, k: int) -> str | None:
    """Input k of the node, or None when it is absent or left empty."""
    ins = e.node.input
    return ins[k] if len(ins) > k and ins[k] else None


def _out(e: Emit, k: int) -> str | None:
    outs = e.node.output
    return outs[k] if len(outs) > k and outs[k] else None


def _shape(e: Emit, value: str) -> tuple:
    """The static shape of `value` (ints; a dim the model leaves symbolic is None); raises
    Deferred while it is not known (an output of another node not yet rewritten)."""
    t = e.types.get(value)
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        raise Deferred(value)
    return tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim)


def _known(e: Emit, value: str, what: str) -> tuple:
    """The shape of `value`, every dim known; raises Deferred while one is not: a value the
    model declares with symbolic dims is known once the rewrites before it are done and shape
    inference follows the user's --shape bindings there (rewrite.py says which stayed unknown)."""
    s = _shape(e, value)
    if any(d is None for d in s):
        raise Deferred(value)
    return s


def _declared(e: Emit, value: str) -> list:
    """The shape of `value` for a declaration: ints, and the names of the dims it leaves
    symbolic (None where unnamed); raises Deferred while its rank is not known."""
    _shape(e, value)
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
            for d in e.types[value].tensor_type.shape.dim]


def _agrees(shape: tuple, want: tuple) -> bool:
    """`shape` is `want` where both are known (None: a run-time or don't-care dim)."""
    return len(shape) == len(want) and all(a is None or b is None or a == b for a, b in zip(shape, want))


def _extent(e: Emit, x: str, axis: int, size: int | None) -> str:
    """Dim `axis` of `x` as a [1] int64 tensor: a constant where known, else read by Shape (the
    symbolic folding turns it into the run-time dim)."""
    if size is not None:
        return _ints(e, [size])
    return e.op("Shape", [x], start=axis, end=axis + 1)


def _arange(e: Emit, extent: str, size: int | None) -> str:
    """0, 1, ..., n - 1 for the [1] tensor `extent` = n (a constant where n is known)."""
    if size is not None:
        return _ints(e, np.arange(size))
    return e.op("Range", [_ints(e, 0), e.op("Squeeze", [extent, _ints(e, [0])]), _ints(e, 1)])


def _floats(e: Emit, v) -> str:
    return e.const(np.asarray(v, np.float32))


def _ints(e: Emit, v) -> str:
    return e.const(np.asarray(v, np.int64))


def _reject_attrs(e: Emit, a: dict, known: set) -> None:
    """Attributes the operator's schema does not define are an error, not silently ignored."""
    extra = sorted(set(a) - known)
    if extra:
        raise ModelError(f"{e.label}: attribute(s) {', '.join(extra)} are not defined for "
                         f"{e.node.domain or 'ai.onnx'}.{e.node.op_type}")


def _reject_outputs(e: Emit, start: int, what: str) -> None:
    for k in range(start, len(e.node.output)):
        if e.node.output[k]:
            e.refuse(f"output {k} ({what})")


def _reshape(e: Emit, x: str, shape, out: str | None = None) -> str:
    return e.op("Reshape", [x, _ints(e, shape)], out=out)


# ------------------------------------------------------------------------------- activations
def _gelu(e: Emit, a: dict):
    _reject_attrs(e, a, set())
    _at(e, 20, "Gelu", [e.node.input[0]], out=e.node.output[0])


def _bias_gelu(e: Emit, a: dict):
    _reject_attrs(e, a, set())
    _at(e, 20, "Gelu", [e.op("Add", [e.node.input[0], e.node.input[1]])], out=e.node.output[0])


def _fast_gelu(e: Emit, a: dict):
    # ONNX Runtime: x * 0.5 * (1 + tanh(0.7978845608 * (x + 0.044715 x^3))), of x + bias: Gelu's
    # tanh approximation, the same formula
    _reject_attrs(e, a, set())
    x = e.node.input[0]
    if _in(e, 1):
        x = e.op("Add", [x, e.node.input[1]])
    _at(e, 20, "Gelu", [x], out=e.node.output[0], approximate="tanh")


def _quick_gelu(e: Emit, a: dict):
    _reject_attrs(e, a, {"alpha"})
    x = e.node.input[0]
    alpha = float(a.get("alpha", 1.702))
    e.op("Mul", [x, e.op("Sigmoid", [e.op("Mul", [x, _floats(e, alpha)])])], out=e.node.output[0])


def _bias_add(e: Emit, a: dict):
    _reject_attrs(e, a, set())
    x, bias, skip = e.node.input[:3]
    e.op("Add", [e.op("Add", [x, bias]), skip], out=e.node.output[0])


def _bias_split_gelu(e: Emit, a: dict):
    _reject_attrs(e, a, set())
    x, bias = e.node.input[:2]
    d = _known(e, bias, "bias")
    if len(d) != 1 or d[0] % 2:
        raise ShapeError(f"{e.label}: bias {d} must be 1-D of an even length")
    s = e.op("Add", [x, bias])
    half = d[0] // 2
    left = e.op("Slice", [s, _ints(e, [0]), _ints(e, [half]), _ints(e, [-1])])
    right = e.op("Slice", [s, _ints(e, [half]), _ints(e, [d[0]]), _ints(e, [-1])])
    e.op("Mul", [left, _at(e, 20, "Gelu", [right])], out=e.node.output[0])


# ---------------------------------------------------------------------------- normalizations
def _inv_std(e: Emit, centred: str, eps: float, out: str | None) -> str:
    """1 / sqrt(mean(centred^2) + eps) over the last axis, kept: [..., 1]."""
    var = e.reduce("ReduceMean", e.op("Mul", [centred, centred]), -1)
    return e.op("Reciprocal", [e.op("Sqrt", [e.op("Add", [var, _floats(e, eps)])])], out=out)


def _skip_sum(e: Emit, bias_at: int) -> str:
    """input + skip (+ bias), written to output 3 (input_skip_bias_sum) when the node has it."""
    x, skip = e.node.input[:2]
    s = e.op("Add", [x, skip])
    if _in(e, bias_at):
        s = e.op("Add", [s, e.node.input[bias_at]])
    if _out(e, 3):
        e.op("Identity", [s], out=_out(e, 3))
    return s


def _skip_layer_norm(e: Emit, a: dict):
    _reject_attrs(e, a, {"epsilon"})
    eps = float(a.get("epsilon", 1e-12))      # (ONNX Runtime's kernel default; the fusions always set it)
    s = _skip_sum(e, 4)
    gamma = e.node.input[2]
    beta = _in(e, 3)
    ln_in = [s, gamma] + ([beta] if beta else [])
    mean, inv = _out(e, 1), _out(e, 2)
    outs = [e.node.output[0], mean or e.name("mean"), inv or e.name("inv_std")]
    e.nodes.append(helper.make_node("LayerNormalization", ln_in, outs if (mean or inv) else outs[:1],
                                    axis=-1, epsilon=eps, **{OPSET_ATTR: EMIT_OPSET}))


def _rms(e: Emit, x: str, scale: str, eps: float, axis: int, y: str, inv: str | None):
    _at(e, 23, "RMSNormalization", [x, scale], out=y, axis=axis, epsilon=eps)
    if inv:
        if axis != -1:
            e.refuse("output inv_std_var with an axis other than -1")
        _inv_std(e, x, eps, inv)


def _skip_simplified_layer_norm(e: Emit, a: dict):
    _reject_attrs(e, a, {"epsilon"})
    eps = float(a.get("epsilon", 1e-12))
    s = _skip_sum(e, 3)
    if _out(e, 1):
        e.refuse("output 1 (mean: a simplified layer norm has none; ONNX Runtime leaves it unwritten)")
    _rms(e, s, e.node.input[2], eps, -1, e.node.output[0], _out(e, 2))


def _simplified_layer_norm(e: Emit, a: dict):
    _reject_attrs(e, a, {"axis", "epsilon", "stash_type"})
    if int(a.get("stash_type", 1)) != 1:
        e.refuse(f"stash_type {int(a['stash_type'])} (statistics are computed in float32)")
    axis = int(a.get("axis", -1))
    _rms(e, e.node.input[0], e.node.input[1], float(a.get("epsilon", 1e-5)), axis, e.node.output[0], _out(e, 1))


def _layer_norm_1(e: Emit, a: dict):
    """ONNX Runtime's LayerNormalization of the default domain, opset 1 (it predates ONNX's
    own, opset 17, which computes the same with the same attributes and outputs)."""
    _reject_attrs(e, a, {"axis", "epsilon", "stash_type"})
    outs = list(e.node.output)
    e.nodes.append(helper.make_node("LayerNormalization", list(e.node.input), outs, **a,
                                    **{OPSET_ATTR: EMIT_OPSET}))


def _embed_layer_norm(e: Emit, a: dict):
    _reject_attrs(e, a, {"epsilon", "mask_index_type"})
    embed_core(e, a, *(_in(e, k) for k in range(9)))


def embed_core(e: Emit, a: dict, ids, seg_ids, words, pos_table, seg_table, gamma, beta, mask, pos_ids):
    """EmbedLayerNormalization (and QEmbedLayerNormalization, on its dequantized tables)."""
    eps = float(a.get("epsilon", 1e-12))
    if ids is None or words is None or pos_table is None or gamma is None or beta is None:
        raise ModelError(f"{e.label}: input_ids, word_embedding, position_embedding, gamma and beta are required")
    if (seg_ids is None) != (seg_table is None):
        raise ModelError(f"{e.label}: segment_ids and segment_embedding must be given together")
    B, S = _known(e, ids, "input_ids")
    emb = e.op("Gather", [words, ids], axis=0)
    if pos_ids is None:
        pos = e.unsqueeze(e.op("Slice", [pos_table, _ints(e, [0]), _ints(e, [S]), _ints(e, [0])]), 0)
    else:
        pos = e.op("Gather", [pos_table, pos_ids], axis=0)     # (batch or 1, seq): broadcast by the Add
    emb = e.op("Add", [emb, pos])
    if seg_ids is not None:
        emb = e.op("Add", [emb, e.op("Gather", [seg_table, seg_ids], axis=0)])
    if _out(e, 2):
        e.op("Identity", [emb], out=_out(e, 2))
    e.nodes.append(helper.make_node("LayerNormalization", [emb, gamma, beta], [e.node.output[0]], axis=-1,
                                    epsilon=eps, **{OPSET_ATTR: EMIT_OPSET}))
    if _out(e, 1):
        if int(a.get("mask_index_type", 1)) != 1:
            e.refuse(f"mask_index_type {int(a['mask_index_type'])} with a mask_index output")
        if mask is None:
            # (ONNX Runtime writes zeros: "no mask", which its Attention reads as every key)
            e.op("Identity", [e.const(np.zeros(B, np.int32))], out=_out(e, 1))
        else:
            m = e.op("Cast", [mask], to=TensorProto.INT32)
            e.reduce("ReduceSum", m, 1, out=_out(e, 1), keepdims=0)


# ------------------------------------------------------------------------ matmul, gemm, conv
def _fused_matmul(e: Emit, a: dict):
    _reject_attrs(e, a, {"alpha", "transA", "transB", "transBatchA", "transBatchB"})
    if int(a.get("transBatchA", 0)) or int(a.get("transBatchB", 0)):
        ra, rb = e.rank(e.node.input[0]), e.rank(e.node.input[1])
        if ra != rb or ra < 3:          # (as ONNX Runtime's kernel requires)
            raise ModelError(f"{e.label}: with transBatchA or transBatchB, A and B must have one rank of at least "
                             f"3, not {ra} and {rb}")
    outs = []
    for k, (t, tb) in enumerate(((int(a.get("transA", 0)), int(a.get("transBatchA", 0))),
                                 (int(a.get("transB", 0)), int(a.get("transBatchB", 0))))):
        x = e.node.input[k]
        r = e.rank(x)
        if r == 1 and (t or tb):
            e.refuse(f"transA / transB / transBatch on a 1-D {'AB'[k]}")
        perm = list(range(r))
        if tb and r > 2:
            # ONNX Runtime's transBatch: axis 0 swaps places with axes 1 .. r-2 (the other batch
            # axes and the rows): [b0, b1, ..., M, K] -> [b1, ..., M, b0, K]
            perm = list(range(1, r - 1)) + [0, r - 1]
        if t and r >= 2:
            perm[-1], perm[-2] = perm[-2], perm[-1]
        if perm != list(range(r)):
            x = e.op("Transpose", [x], perm=perm)
        outs.append(x)
    y = e.op("MatMul", outs)
    alpha = float(a.get("alpha", 1.0))
    if alpha != 1.0:
        y = e.op("Mul", [y, _floats(e, alpha)])
    e.op("Identity", [y], out=e.node.output[0])


# activation name -> (ONNX op, [(ONNX attribute, default)] read in order from the parameters)
_ACTIVATIONS = {
    "Relu": ("Relu", []), "Tanh": ("Tanh", []), "Sigmoid": ("Sigmoid", []),
    "LeakyRelu": ("LeakyRelu", [("alpha", 0.01)]), "HardSigmoid": ("HardSigmoid", [("alpha", 0.2), ("beta", 0.5)]),
    "Elu": ("Elu", [("alpha", 1.0)]), "ThresholdedRelu": ("ThresholdedRelu", [("alpha", 1.0)]),
    "Softplus": ("Softplus", []), "Softsign": ("Softsign", []), "Clip": ("Clip", []),
}


def _activation(e: Emit, x: str, name: str, params: list, out: str):
    if name not in _ACTIVATIONS:
        e.refuse(f"activation {name!r}", f"compiled activations: {', '.join(sorted(_ACTIVATIONS))}")
    op, attrs = _ACTIVATIONS[name]
    if op == "Clip":
        if len(params) != 2:
            raise ModelError(f"{e.label}: a Clip activation takes two parameters (min, max), got {len(params)}")
        e.op("Clip", [x, _floats(e, params[0]), _floats(e, params[1])], out=out)
        return
    if len(params) > len(attrs):
        raise ModelError(f"{e.label}: activation {name} takes {len(attrs)} parameter(s), got {len(params)}")
    kw = {k: float(params[i]) if i < len(params) else d for i, (k, d) in enumerate(attrs)}
    e.op(op, [x], out=out, **kw)


_GEMM_ATTRS = {"alpha", "beta", "transA", "transB"}


def _fused_gemm(e: Emit, a: dict):
    _reject_attrs(e, a, _GEMM_ATTRS | {"activation", "activation_alpha", "activation_beta", "activation_gamma"})
    act = text(a.get("activation", ""))
    if not act:       # (ONNX Runtime's kernel fails to load such a node: "unknown kernel type")
        raise ModelError(f"{e.label} has no activation", "a Gemm without one is ONNX's Gemm")
    y = e.op("Gemm", list(e.node.input), **{k: a[k] for k in _GEMM_ATTRS if k in a})
    if "activation_gamma" in a:
        e.refuse("activation_gamma (no compiled activation takes a third parameter)")
    params = [a[k] for k in ("activation_alpha", "activation_beta") if k in a]
    if "activation_beta" in a and "activation_alpha" not in a:
        e.refuse("activation_beta without activation_alpha")
    _activation(e, y, act, params, e.node.output[0])


_CONV_ATTRS = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}


def _fused_conv(e: Emit, a: dict):
    _reject_attrs(e, a, _CONV_ATTRS | {"activation", "activation_params"})
    ins = [i for i in e.node.input[:3]]
    while ins and not ins[-1]:
        ins.pop()
    y = e.op("Conv", ins, **{k: (text(a[k]) if k == "auto_pad" else a[k]) for k in _CONV_ATTRS if k in a})
    if _in(e, 3):                 # Z: added before the activation, as ONNX Runtime's kernel sums it
        y = e.op("Add", [y, e.node.input[3]])
    act = text(a.get("activation", ""))
    if not act or act == "Identity":
        e.op("Identity", [y], out=e.node.output[0])
    else:
        _activation(e, y, act, list(a.get("activation_params", [])), e.node.output[0])


def _group_norm(e: Emit, a: dict):
    _reject_attrs(e, a, {"activation", "channels_last", "epsilon", "groups"})
    x, gamma, beta = e.node.input[:3]
    last = int(a.get("channels_last", 1))
    act = int(a.get("activation", 0))
    if act not in (0, 1):
        raise ModelError(f"{e.label}: activation {act} is not 0 (none) or 1 (Swish)")
    if "groups" not in a or "epsilon" not in a:
        raise ModelError(f"{e.label}: attributes groups and epsilon are required")
    r = e.rank(x)
    if r != 4:
        e.refuse(f"a {r}-D input (GroupNorm takes 4-D images)")
    if last:
        x = e.op("Transpose", [x], perm=[0, 3, 1, 2])
    y = _at(e, 21, "GroupNormalization", [x, gamma, beta], num_groups=int(a["groups"]),
            epsilon=float(a["epsilon"]))
    if act:
        y = e.op("Mul", [y, e.op("Sigmoid", [y])])
    if last:
        y = e.op("Transpose", [y], perm=[0, 2, 3, 1])
    e.op("Identity", [y], out=e.node.output[0])


# ---------------------------------------------------------------------------------- attention
def _key_mask(e: Emit, mask: str, B: int, S: int, T: int, fill: float) -> str | None:
    """ONNX Runtime's mask_index / key_padding_mask as an additive float mask, broadcast against
    scores (B, heads, S, T): `fill` where a key is hidden, 0 elsewhere. None: no mask (a dummy)."""
    shp = _known(e, mask, "mask_index")
    f = _floats(e, fill)
    zero = _floats(e, 0.0)
    keys = _ints(e, np.arange(T).reshape(1, T))
    if len(shp) == 1 and shp[0] in (B, 2 * B):
        m = e.op("Cast", [mask], to=TensorProto.INT64)
        ends = m if shp[0] == B else e.op("Slice", [m, _ints(e, [0]), _ints(e, [B]), _ints(e, [0])])
        end = e.unsqueeze(ends, 1)      # (B, 1)
        hidden = e.op("GreaterOrEqual", [keys, end])
        if shp[0] == 2 * B:           # exclusive ends, then inclusive starts (left padding)
            start = e.unsqueeze(e.op("Slice", [m, _ints(e, [B]), _ints(e, [2 * B]), _ints(e, [0])]), 1)
            hidden = e.op("Or", [hidden, e.op("Less", [keys, start])])
        return _reshape(e, e.op("Where", [hidden, f, zero]), [B, 1, 1, T])
    if len(shp) == 1:
        e.refuse(f"a mask_index of shape {shp} (the (3 * batch + 2) form, or another length than batch or "
                 "2 * batch)")
    if len(shp) == 2 and shp[1] == 1 and shp[0] in (1, B):
        return None                    # ONNX Runtime's dummy mask: the same as none
    if len(shp) == 2 or len(shp) == 3:
        if shp[-1] != T or shp[0] != B or (len(shp) == 3 and shp[1] != S):
            raise ShapeError(f"{e.label}: mask {shp} does not fit batch {B}, sequence {S}, total sequence {T}")
        hidden = e.op("Equal", [e.op("Cast", [mask], to=TensorProto.INT64), _ints(e, 0)])
        w = e.op("Where", [hidden, f, zero])
        return _reshape(e, w, [B, 1, 1, T] if len(shp) == 2 else [B, 1, S, T])
    if len(shp) == 4:
        e.refuse(f"a 4-D (Megatron) mask_index {shp}", "ONNX Runtime's CPU kernel does not compute it either")
    e.refuse(f"a {len(shp)}-D mask_index {shp}")


def _causal(e: Emit, S: int, T: int, fill: float) -> str:
    """`fill` where key j comes after query i's position (past + i), as a (1, 1, S, T) constant."""
    past = T - S
    m = np.where(np.arange(T)[None, :] > past + np.arange(S)[:, None], np.float32(fill), np.float32(0))
    return e.const(m.reshape(1, 1, S, T).astype(np.float32), "causal")


def _sum_masks(e: Emit, parts: list) -> str | None:
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = e.op("Add", [out, p])
    return out


def _attention23(e: Emit, q: str, k: str, v: str, mask: str | None, past_k: str | None, past_v: str | None,
                 heads: int, kv_heads: int, scale, y: str, present_k: str | None, present_v: str | None):
    ins = [q, k, v, mask or "", past_k or "", past_v or ""]
    while ins and not ins[-1]:
        ins.pop()
    outs = [y, present_k or "", present_v or ""]
    while not outs[-1]:
        outs.pop()
    kw = {"q_num_heads": heads, "kv_num_heads": kv_heads}
    if scale is not None:
        kw["scale"] = float(scale)
    e.nodes.append(helper.make_node("Attention", ins, outs, **kw, **{OPSET_ATTR: 23}))


_ATTENTION_ATTRS = {"do_rotary", "mask_filter_value", "num_heads", "past_present_share_buffer", "qkv_hidden_sizes",
                    "rotary_embedding_dim", "scale", "unidirectional"}


def _attention(e: Emit, a: dict):
    _reject_attrs(e, a, _ATTENTION_ATTRS)
    x, w = e.node.input[:2]
    bias = _in(e, 2)

    def project(part_cols):
        p = e.op("MatMul", [x, e.op("Slice", [w, *part_cols])])
        if bias is not None:
            p = e.op("Add", [p, e.op("Slice", [bias, part_cols[0], part_cols[1], _ints(e, [0])])])
        return p
    attention_core(e, a, x, _known(e, w, "weights"), project, mask=_in(e, 3), past=_in(e, 4),
                   attn_bias=_in(e, 5), past_len=_in(e, 6))


def attention_core(e: Emit, a: dict, x: str, wsh: tuple, project, mask, past, attn_bias, past_len):
    """Attention and QAttention after their input projection: `project(cols)` gives the product
    of x with the weights' columns cols (Slice starts, ends, axes: one MatMul per part, so that a
    constant weight's Slice folds and each product lands where the attention reads it, no Split
    copying a packed product); then ONNX's Attention with ORT's masks."""
    if int(a.get("do_rotary", 0)):
        e.refuse("do_rotary=1 (rotary embedding inside Attention)")
    if int(a.get("past_present_share_buffer", 0)):
        e.refuse("past_present_share_buffer=1 (a past of max_sequence_length with past_sequence_length)")
    if past_len:
        e.refuse("input past_sequence_length")
    if "num_heads" not in a:
        raise ModelError(f"{e.label}: attribute num_heads is required")
    N = int(a["num_heads"])
    B, S, _ = _known(e, x, "input")
    sizes = [int(v) for v in a.get("qkv_hidden_sizes", [])] or [wsh[1] // 3] * 3
    if len(wsh) != 2 or len(sizes) != 3 or sum(sizes) != wsh[1] or sizes[0] != sizes[1] or any(s % N for s in sizes):
        raise ShapeError(f"{e.label}: weights {wsh} do not split into Q, K, V of {sizes} for {N} heads")
    if past is not None and len(set(sizes)) != 1:
        raise ShapeError(f"{e.label}: with a past, Q, K and V must have one hidden size (qkv_hidden_sizes {sizes})")
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    q, k, v = (project((_ints(e, [s0]), _ints(e, [s0 + n]), _ints(e, [1]))) for s0, n in zip(starts, sizes))
    P, past_k, past_v = 0, None, None
    if past is not None:
        psh = _known(e, past, "past")
        if len(psh) != 5 or psh[0] != 2 or psh[1] != B or psh[2] != N or psh[4] != sizes[0] // N:
            raise ShapeError(f"{e.label}: past {psh} is not (2, {B}, {N}, past, {sizes[0] // N})")
        P = psh[3]
        past_k, past_v = (e.op("Squeeze", [e.op("Slice", [past, _ints(e, [i]), _ints(e, [i + 1]), _ints(e, [0])]),
                                          _ints(e, [0])]) for i in (0, 1))
    T = P + S
    fill = float(a.get("mask_filter_value", -10000.0))
    parts = [_key_mask(e, mask, B, S, T, fill) if mask is not None else None]
    if int(a.get("unidirectional", 0)):
        parts.append(_causal(e, S, T, fill))
    if attn_bias is not None:
        parts.append(attn_bias)
    present = _out(e, 1)
    pk = pv = None
    if present:
        pk, pv = e.name("present_key"), e.name("present_value")
    _attention23(e, q, k, v, _sum_masks(e, parts), past_k, past_v, N, N, a.get("scale"), e.node.output[0], pk, pv)
    if present:
        e.op("Concat", [e.unsqueeze(pk, 0), e.unsqueeze(pv, 0)], out=present, axis=0)


def _mha(e: Emit, a: dict):
    _reject_attrs(e, a, {"mask_filter_value", "num_heads", "scale", "unidirectional"})
    if "num_heads" not in a:
        raise ModelError(f"{e.label}: attribute num_heads is required")
    N = int(a["num_heads"])
    q, k, v, bias, kpm, attn_bias, past_k, past_v = (_in(e, i) for i in range(8))
    for i, what in ((8, "past_sequence_length"), (9, "cache_indirection")):
        if _in(e, i):
            e.refuse(f"input {what}")
    _reject_outputs(e, 3, "qk")
    qsh = _known(e, q, "query")
    if len(qsh) == 5:                          # packed QKV: (B, S, N, 3, H)
        if k or v:
            raise ModelError(f"{e.label}: a packed (B, S, N, 3, H) query takes no key or value")
        B, S, n, three, H = qsh
        if n != N or three != 3:
            raise ShapeError(f"{e.label}: packed query {qsh} is not (batch, seq, {N}, 3, head)")
        if bias:
            # the bias is (Q's, K's, V's), each N x H: as the packed (N, 3, H)
            q = e.op("Add", [q, e.op("Transpose", [_reshape(e, bias, [3, N, H])], perm=[1, 0, 2])])
            bias = None
        parts = [e.op("Slice", [q, _ints(e, [i]), _ints(e, [i + 1]), _ints(e, [3])]) for i in range(3)]
        q, k, v = (_reshape(e, p, [B, S, N * H]) for p in parts)
        ksh = (B, S, N * H)
        Dv = N * H
    else:
        if len(qsh) != 3:
            raise ShapeError(f"{e.label}: query {qsh} must be (batch, seq, hidden) or packed (B, S, N, 3, H)")
        B, S, D = qsh
        if D % N:
            raise ShapeError(f"{e.label}: query hidden size {D} is not a multiple of {N} heads")
        H = D // N
        if k is None:
            raise ModelError(f"{e.label}: key is required unless the query packs Q, K and V")
        ksh = _known(e, k, "key")
    Dq = N * H
    if len(ksh) == 5:                          # packed KV: (B, L, N, 2, H)
        if v:
            raise ModelError(f"{e.label}: a packed (B, L, N, 2, H) key takes no value")
        if ksh[2] != N or ksh[3] != 2 or ksh[4] != H:
            raise ShapeError(f"{e.label}: packed key {ksh} is not (batch, kv_seq, {N}, 2, {H})")
        L = ksh[1]
        parts = [e.op("Slice", [k, _ints(e, [i]), _ints(e, [i + 1]), _ints(e, [3])]) for i in range(2)]
        k, v = (_reshape(e, p, [B, L, Dq]) for p in parts)
        Dv = Dq
        if bias:
            e.refuse("bias with a packed key and value")
    elif len(ksh) == 4:                        # key and value already (B, N, L, H): no bias on them
        if bias:
            e.refuse("bias with a 4-D (B, N, L, H) key and value")
        if past_k or past_v:
            raise ModelError(f"{e.label}: a 4-D key / value is the past itself: it takes no past_key / past_value")
        vsh = _known(e, v, "value")
        L, Dv = ksh[2], vsh[3] * N
        if ksh[:2] != (B, N) or ksh[3] != H or vsh[:3] != (B, N, L):
            raise ShapeError(f"{e.label}: key {ksh} / value {vsh} are not (batch, {N}, kv_seq, head)")
        # (ONNX's Attention reads 4-D K / V only with a 4-D Q)
        q = e.op("Transpose", [_reshape(e, q, [B, S, N, H])], perm=[0, 2, 1, 3])
    elif len(ksh) == 3:
        L = ksh[1]
        if v is None:
            raise ModelError(f"{e.label}: a 3-D key needs a value")
        if len(qsh) != 5:
            Dv = _known(e, v, "value")[2]
    else:
        raise ShapeError(f"{e.label}: key {ksh} is not 3-D, 4-D (B, N, L, H) or packed 5-D")
    if bias:
        bsh = _known(e, bias, "bias")
        if bsh != (Dq + Dq + Dv,):
            raise ShapeError(f"{e.label}: bias {bsh} is not ({Dq + Dq + Dv},)")
        bq, bk, bv = (e.op("Slice", [bias, _ints(e, [s0]), _ints(e, [s1]), _ints(e, [0])])
                      for s0, s1 in ((0, Dq), (Dq, 2 * Dq), (2 * Dq, 2 * Dq + Dv)))
        q, k, v = e.op("Add", [q, bq]), e.op("Add", [k, bk]), e.op("Add", [v, bv])
    P = 0
    if past_k or past_v:
        if not (past_k and past_v):
            raise ModelError(f"{e.label}: past_key and past_value must be given together")
        P = _known(e, past_k, "past_key")[2]
    T = P + L
    fill = float(a.get("mask_filter_value", -10000.0))
    parts = [_key_mask(e, kpm, B, S, T, fill) if kpm else None]
    if int(a.get("unidirectional", 0)):
        parts.append(_causal(e, S, T, fill))
    if attn_bias:
        parts.append(attn_bias)
    y = e.node.output[0]
    four = len(ksh) == 4
    y4 = e.name("y4") if four else y
    _attention23(e, q, k, v, _sum_masks(e, parts), past_k, past_v, N, N, a.get("scale"), y4,
                 _out(e, 1), _out(e, 2))
    if four:
        _reshape(e, e.op("Transpose", [y4], perm=[0, 2, 1, 3]), [B, S, Dv], out=y)


_GQA_ATTRS = {"num_heads", "kv_num_heads", "scale", "softcap", "do_rotary", "rotary_interleaved",
              "local_window_size", "smooth_softmax", "qk_output"}


def _gqa(e: Emit, a: dict):
    """GroupQueryAttention (batch and sequence may be run-time dims: the sizes it needs are
    read by Shape where they are not numbers): the new keys and values are written into the
    present buffers at each batch entry's past length (TensorScatter), and every query sees the
    keys up to its own position (past + i), within the entry's total length (seqlens_k + 1) and
    the local window. Both read at run time, as ONNX Runtime does: a prompt (S equal to
    total_sequence_length) has no past; otherwise past = seqlens_k + 1 - S. The present length
    is the past buffer's (ONNX Runtime's shared max-length buffer), or past + S where the
    model's declared present_key says so (a past that grows each step)."""
    _reject_attrs(e, a, _GQA_ATTRS)
    for k in ("num_heads", "kv_num_heads"):
        if k not in a:
            raise ModelError(f"{e.label}: attribute {k} is required")
    N, KV = int(a["num_heads"]), int(a["kv_num_heads"])
    if N % KV:
        raise ShapeError(f"{e.label}: num_heads {N} is not a multiple of kv_num_heads {KV}")
    if int(a.get("smooth_softmax", 0)):
        e.refuse("smooth_softmax=1")
    if int(a.get("qk_output", 0)):
        e.refuse(f"qk_output={int(a['qk_output'])}")
    q, k, v, past_k, past_v, seqlens, total, cos, sin = (_in(e, i) for i in range(9))
    pos_ids, attn_bias = _in(e, 9), _in(e, 10)
    if _in(e, 11):
        e.refuse("input head_sink")
    if _out(e, 3):
        e.refuse("output output_qk")
    if seqlens is None or total is None:
        raise ModelError(f"{e.label}: seqlens_k and total_sequence_length are required")
    qsh = _shape(e, q)
    if len(qsh) != 3 or qsh[2] is None:
        raise ShapeError(f"{e.label}: query {qsh} is not (batch, sequence, hidden) with a known hidden size")
    B, S, D = qsh                              # B, S: None where run-time (a symbolic dim)
    if k is None:                              # packed QKV: (B, S, (N + 2 KV) H)
        if v is not None:
            raise ModelError(f"{e.label}: a packed query takes no value")
        if D % (N + 2 * KV):
            raise ShapeError(f"{e.label}: packed query hidden {D} is not (num_heads + 2 kv_num_heads) * head")
        H = D // (N + 2 * KV)
        q, k, v = (e.op("Slice", [q, _ints(e, [s0]), _ints(e, [s1]), _ints(e, [2])])
                   for s0, s1 in ((0, N * H), (N * H, (N + KV) * H), ((N + KV) * H, (N + 2 * KV) * H)))
    else:
        if D % N:
            raise ShapeError(f"{e.label}: query hidden {D} is not a multiple of {N} heads")
        H = D // N
        if v is None or not all(_agrees(_shape(e, x), (B, S, KV * H)) for x in (k, v)):
            raise ShapeError(f"{e.label}: key and value must be (batch, seq, kv_num_heads * head) = "
                             f"{(B or 'batch', S or 'seq', KV * H)}")

    def heads(x, n):                         # (B, S, n H) -> (B, n, S, H)
        return e.op("Transpose", [_reshape(e, x, [0, 0, n, H])], perm=[0, 2, 1, 3])
    q4, k4, v4 = heads(q, N), heads(k, KV), heads(v, KV)
    # per batch entry: total length, past length (0 for a prompt), the queries' positions
    seq = _extent(e, q, 1, S)                                                                     # [S]
    total_b = e.op("Add", [e.op("Cast", [seqlens], to=TensorProto.INT64), _ints(e, 1)])             # (B,)
    tot = e.op("Cast", [_reshape(e, total, [1]), ], to=TensorProto.INT64)
    prompt = e.op("Equal", [tot, seq])
    past_b = e.op("Where", [prompt, _ints(e, [0]), e.op("Sub", [total_b, seq])])                    # (B,)
    qpos = e.op("Add", [e.unsqueeze(past_b, 1), e.unsqueeze(_arange(e, seq, S), 0)])               # (B, S)
    if int(a.get("do_rotary", 0)):
        if cos is None or sin is None:
            raise ModelError(f"{e.label}: do_rotary needs cos_cache and sin_cache")
        rot = 2 * _known(e, cos, "cos_cache")[1]
        p = e.op("Cast", [pos_ids], to=TensorProto.INT64) if pos_ids else qpos
        kw = {"interleaved": int(a.get("rotary_interleaved", 0)), "rotary_embedding_dim": rot}
        q4 = _at(e, 23, "RotaryEmbedding", [q4, cos, sin, p], **kw)
        k4 = _at(e, 23, "RotaryEmbedding", [k4, cos, sin, p], **kw)
    elif pos_ids:
        raise ModelError(f"{e.label}: position_ids without do_rotary")
    # the present buffers
    pk_out, pv_out = _out(e, 1), _out(e, 2)
    if (past_k is None) != (past_v is None):
        raise ModelError(f"{e.label}: past_key and past_value must be given together")
    if past_k is None:
        present_k, present_v, keys_of = k4, v4, k
        L = S
    else:
        psh = _shape(e, past_k)
        if len(psh) != 4 or not _agrees(psh, (B, KV, None, H)):
            raise ShapeError(f"{e.label}: past_key {psh} is not (batch, {KV}, length, {H})")
        L = psh[2]
        try:
            declared = _shape(e, pk_out) if pk_out else None
        except Deferred:
            declared = None
        # a past that grows each step: the model declares the present S longer (known sizes
        # only; with a run-time length the present is the past buffer, ORT's shared buffer)
        grow = L is not None and S is not None and declared is not None and len(declared) == 4 \
            and declared[2] == L + S
        if grow:
            L += S
        def buffer(past):
            if grow:
                past = e.op("Pad", [past, _ints(e, [0, 0, 0, 0, 0, 0, S, 0])])
            return past
        present_k = _at(e, 24, "TensorScatter", [buffer(past_k), k4, past_b], axis=2)
        present_v = _at(e, 24, "TensorScatter", [buffer(past_v), v4, past_b], axis=2)
        keys_of = present_k
    for src, out in ((present_k, pk_out), (present_v, pv_out)):
        if out:
            e.op("Identity", [src], out=out)
    # which keys each query sees: j <= its position, j < the entry's total, within the window
    axis = 1 if past_k is None else 2
    keys = e.op("Unsqueeze", [_arange(e, _extent(e, keys_of, axis, L), L), _ints(e, [0, 1])])       # (1, 1, L)
    qp = e.unsqueeze(qpos, 2)                                                                     # (B, S, 1)
    ok = e.op("And", [e.op("LessOrEqual", [keys, qp]),
                      e.op("Less", [keys, e.op("Unsqueeze", [total_b, _ints(e, [1, 2])])])])
    window = int(a.get("local_window_size", -1))
    if window > 0:
        ok = e.op("And", [ok, e.op("Greater", [keys, e.op("Sub", [qp, _ints(e, window)])])])
    mask = e.op("Where", [e.unsqueeze(ok, 1), _floats(e, 0.0), _floats(e, float("-inf"))])         # (B, 1, S, L)
    if attn_bias:
        mask = e.op("Add", [mask, attn_bias])
    y4 = e.name("y4")
    kw = {"q_num_heads": N, "kv_num_heads": KV}
    if a.get("scale") is not None and float(a["scale"]) != 0.0:
        kw["scale"] = float(a["scale"])
    if float(a.get("softcap", 0.0)):
        kw["softcap"] = float(a["softcap"])
    e.nodes.append(helper.make_node("Attention", [q4, present_k, present_v, mask], [y4], **kw, **{OPSET_ATTR: 23}))
    _reshape(e, e.op("Transpose", [y4], perm=[0, 2, 1, 3]), [0, 0, N * H], out=e.node.output[0])


def _rotary(e: Emit, a: dict):
    _reject_attrs(e, a, {"interleaved", "is_packed_batching", "num_heads", "rotary_embedding_dim", "scale"})
    if int(a.get("is_packed_batching", 0)):
        e.refuse("is_packed_batching=1")
    if float(a.get("scale", 1.0)) != 1.0:
        e.refuse(f"scale {float(a['scale']):g} (ONNX Runtime's CPU kernel does not apply it)")
    x, pos, cos, sin = e.node.input[:4]
    xsh = _known(e, x, "input")
    if len(xsh) == 4:
        B, S = xsh[0], xsh[2]
    elif len(xsh) == 3:
        B, S = xsh[0], xsh[1]
    else:
        raise ShapeError(f"{e.label}: input {xsh} must be (batch, seq, hidden) or (batch, heads, seq, head)")
    psh = _known(e, pos, "position_ids")
    if psh in ((1,), ()):
        # one offset: the positions are offset + 0..S-1 for every batch entry
        steps = _ints(e, np.arange(S).reshape(1, S))
        pos = e.op("Expand", [e.op("Add", [steps, e.op("Cast", [_reshape(e, pos, [1, 1])], to=TensorProto.INT64)]),
                              _ints(e, [B, S])])
    elif psh != (B, S):
        raise ShapeError(f"{e.label}: position_ids {psh} must be (batch, seq) = {(B, S)} or one offset")
    else:
        pos = e.op("Cast", [pos], to=TensorProto.INT64)
    kw = {"interleaved": int(a.get("interleaved", 0))}
    if len(xsh) == 3:
        if not int(a.get("num_heads", 0)):
            # ONNX Runtime's kernel: head size from the cache (2 * its width), heads = hidden / head
            csh = _known(e, cos, "cos_cache")
            if int(a.get("rotary_embedding_dim", 0)):
                raise ModelError(f"{e.label}: rotary_embedding_dim needs num_heads")
            kw["num_heads"] = xsh[2] // (2 * csh[1])
        else:
            kw["num_heads"] = int(a["num_heads"])
    if int(a.get("rotary_embedding_dim", 0)):
        kw["rotary_embedding_dim"] = int(a["rotary_embedding_dim"])
    _at(e, 23, "RotaryEmbedding", [x, cos, sin, pos], out=e.node.output[0], **kw)


def after_inputs(build):
    """The builder, run only once every input's shape is known: the nodes it writes then have
    their outputs' types declared (rewrite._declare_outputs), which the model's own shape
    inference would lose on the nodes marked with a newer opset than the model's, and the
    contrib nodes after it (a whole encoder of them) get their ranks."""
    def run(e: Emit, a: dict):
        if not e.node.name:
            # (the quantizers leave nodes unnamed: the emitted values' names would collide)
            e.node.name = f"{e.node.op_type}_{e.node.output[0]}"
        for i in e.node.input:
            if i:
                _shape(e, i)
        return build(e, a)
    run.__doc__ = build.__doc__
    return run


CONTRIB_BUILDERS = {
    (MS, "Gelu"): _gelu, (MS, "BiasGelu"): _bias_gelu, (MS, "FastGelu"): _fast_gelu,
    (MS, "QuickGelu"): _quick_gelu, (MS, "BiasAdd"): _bias_add, (MS, "BiasSplitGelu"): _bias_split_gelu,
    (MS, "SkipLayerNormalization"): _skip_layer_norm,
    (MS, "SkipSimplifiedLayerNormalization"): _skip_simplified_layer_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_layer_norm,
    ("", "LayerNormalization"): _layer_norm_1,
    (MS, "EmbedLayerNormalization"): _embed_layer_norm,
    (MS, "FusedMatMul"): _fused_matmul, (MS, "FusedGemm"): _fused_gemm, (MS, "FusedConv"): _fused_conv,
    (MS, "GroupNorm"): _group_norm,
    (MS, "Attention"): _attention, (MS, "MultiHeadAttention"): _mha, (MS, "RotaryEmbedding"): _rotary,
    (MS, "GroupQueryAttention"): _gqa,
}
CONTRIB_BUILDERS = {k: after_inputs(b) for k, b in CONTRIB_BUILDERS.items()}

# (domain, op type) -> which of its nodes are rewritten, from (attributes, the model's ai.onnx
# opset): ONNX Runtime's LayerNormalization-1 only where ONNX's own (opset 17) is not in force,
# neither in the model nor in the node's mark (one a rewrite wrote)
CONTRIB_ONLY_WHEN = {("", "LayerNormalization"): lambda a, opset: int(a.get(OPSET_ATTR, opset)) < 17}

# the contrib operators ONNX Runtime's transformers optimizer writes, each with how it compiles
# (contrib_quant.py and contrib_nbits.py have their own tables): docs/ONNX_SUPPORT.md's contrib
# section (aotc/support.py) lists every operator of CONTRIB_OPERATORS, those without a builder
# as not compiled
CONTRIB_HOW = {
    "Gelu": "Gelu (opset 20)", "BiasGelu": "Add, Gelu", "FastGelu": "Add, Gelu (tanh)",
    "QuickGelu": "x * Sigmoid(alpha x)", "BiasAdd": "Adds", "BiasSplitGelu": "Add, Slices, Gelu, Mul",
    "SkipLayerNormalization": "Adds, LayerNormalization", "SkipSimplifiedLayerNormalization": "Adds, RMSNormalization",
    "SimplifiedLayerNormalization": "RMSNormalization", "LayerNormalization": "LayerNormalization (opset 17)",
    "EmbedLayerNormalization": "Gathers, Adds, LayerNormalization; ReduceSum of the mask",
    "FusedMatMul": "Transposes, MatMul, Mul", "FusedGemm": "Gemm, activation", "FusedConv": "Conv, Add, activation",
    "GroupNorm": "Transposes, GroupNormalization (opset 21)",
    "Attention": "MatMul, Split, Attention (opset 23: one kernel), the mask as a float mask",
    "MultiHeadAttention": "Attention (opset 23), the mask as a float mask",
    "RotaryEmbedding": "RotaryEmbedding (opset 23)",
    "GroupQueryAttention": "TensorScatter into the present buffers, RotaryEmbedding, Attention (opset 23), "
                           "the masks from seqlens_k at run time",
}
CONTRIB_OPERATORS = sorted(set(CONTRIB_HOW) | {
    "MatMulNBits", "GatherBlockQuantized", "GroupQueryAttention", "QLinearAdd", "QLinearMul", "QLinearConcat",
    "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearWhere", "QLinearAveragePool",
    "QLinearGlobalAveragePool", "QGemm", "QAttention", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    "DynamicQuantizeLSTM", "QEmbedLayerNormalization"})

# what the rewrites refuse, by operator, for docs/ONNX_SUPPORT.md
CONTRIB_REFUSED = {
    "Attention": "do_rotary, past_present_share_buffer, past_sequence_length, a (3 * batch + 2) or 4-D "
                 "(Megatron) mask_index",
    "MultiHeadAttention": "past_sequence_length, cache_indirection, the qk output, bias with packed or 4-D key/value",
    "RotaryEmbedding": "is_packed_batching, scale other than 1",
    "GroupQueryAttention": "smooth_softmax, head_sink, qk_output / output_qk",
    "FusedGemm": "activation_gamma; activations other than Relu, Tanh, Sigmoid, LeakyRelu, HardSigmoid, Elu, "
                 "ThresholdedRelu, Softplus, Softsign, Clip",
    "FusedConv": "activations other than those of FusedGemm",
    "SkipSimplifiedLayerNormalization": "the mean output (there is none)",
    "SimplifiedLayerNormalization": "stash_type other than 1; inv_std_var with an axis other than -1",
    "EmbedLayerNormalization": "mask_index_type 0 with a mask_index output",
}
