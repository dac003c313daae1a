"""Compare aotc outputs with ONNX Runtime's: per-output max abs / rel error and max ULP.

Where ONNX Runtime handles NaN otherwise than the ONNX spec and its reference implementation
(which aotc follows), the mismatch stays a mismatch, but its note says so: when every mismatching
element of a float output is NaN on one side only and the model holds one of ORT_NAN_DIVERGENCES.
Likewise when an output is a DequantizeLinear's and every mismatch is at most one step of its
scale: a quantized model's values next to a rounding boundary (quantization_steps); and when an
output is the label of a two-class tree classifier whose trees score both classes, which ONNX
Runtime gives as 0 or 1 whatever the class labels (known_divergences).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np
import onnx

from ..ir import dtypes
from ..ir.graph import subgraphs
from ..targets import Target


# what `aotc check` compares float outputs with, where the caller gives no rtol / atol: a target
# whose float32 GEMMs run on TF32 tensor cores (`,tf32`: inputs rounded to a 10-bit mantissa)
# differs from float32 by about 1e-3 relative; one whose GEMMs take bfloat16 operands (`,bf16`: an
# 8-bit mantissa) by about 1e-2
DEFAULT_TOLERANCES = (1e-4, 1e-5)
TF32_TOLERANCES = (1e-2, 1e-2)
BF16_TOLERANCES = (5e-2, 5e-2)


def tolerances(target: Target) -> tuple[float, float]:
    """(rtol, atol) for the target's float outputs, for the CLI and the Python API alike."""
    if target.numerics.bf16:
        return BF16_TOLERANCES
    return TF32_TOLERANCES if target.numerics.tf32 else DEFAULT_TOLERANCES


def tolerance_note(target: Target) -> str:
    """Why the target's default tolerances are wider than float32's ("" where they are not)."""
    if target.numerics.bf16:
        return "the target's float32 GEMMs take bfloat16 operands (,bf16) where the CPU has AMX"
    if target.numerics.tf32:
        return "the target's float32 GEMMs run on TF32 tensor cores (,tf32)"
    return ""


@dataclass
class OutputReport:
    name: str
    dtype: str
    shape: list
    max_abs_err: float
    max_rel_err: float
    max_ulp: float
    mismatches: int
    passed: bool
    note: str = ""
    values_compared: bool = True        # False: drawn from random numbers (random_report)

    def as_dict(self) -> dict:
        return asdict(self)


# ops where ONNX Runtime (CPU, 1.x) gives a number where the ONNX reference implementation gives
# NaN (or the reverse); aotc follows the reference. Kept short: each entry was checked.
ORT_NAN_DIVERGENCES = {
    "ReduceMax": "ONNX Runtime's ReduceMax skips NaN, the ONNX spec propagates it",
    "ReduceMin": "ONNX Runtime's ReduceMin skips NaN, the ONNX spec propagates it",
    "Clip": "ONNX Runtime's Clip ignores a NaN min or max, the ONNX spec (numpy's clip) gives NaN",
}


def quantization_steps(model) -> dict[str, float]:
    """Graph output -> the scale of the DequantizeLinear that makes it, where that is one
    constant value (one 8-bit step of the output)."""
    inits = {t.name: t for t in model.graph.initializer}
    out: dict[str, float] = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and len(n.input) > 1 and n.input[1] in inits:
            scale = onnx.numpy_helper.to_array(inits[n.input[1]])
            if scale.size == 1:
                out[n.output[0]] = float(abs(scale.reshape(-1)[0]))
    outputs = {o.name for o in model.graph.output}
    return {k: v for k, v in out.items() if k in outputs}


def quantization_note(bad: np.ndarray, abs_err: np.ndarray, step: float | None) -> str:
    """A note when every mismatch is at most one step of the output's quantization scale."""
    if not step or not bad.any() or not np.all(abs_err[bad] <= step * (1 + 1e-5)):
        return ""
    return (f"every mismatch is one step of the output's quantization scale ({step:.4g}) or less: a value "
            "next to a rounding boundary, which ONNX Runtime's fused integer kernels (QLinearAdd's "
            f"fixed-point scales, say) round the other way; --atol {step * (1 + 1e-5):.4g} accepts one step")


def model_op_types(model) -> set[str]:
    """The op types of an onnx.ModelProto's graph, its subgraphs and its local functions."""
    out: set[str] = set()

    def walk(graph):
        for n in graph.node:
            out.add(n.op_type)
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    walk(g)
    walk(model.graph)
    for f in model.functions:
        out.update(n.op_type for n in f.node)
    return out


def random_outputs(g) -> dict[str, str]:
    """The graph outputs of `g` (an imported aotc Graph) whose values depend on a node that
    draws random numbers (ops/random.py; Dropout in training mode), each with that node: aotc's
    draws cannot equal ONNX Runtime's, so check compares their shape and dtype only. A node
    with a subgraph holding a random op counts as one."""
    from ..ops import registry
    random_types = {t for t in registry.supported_ops() if registry.get(t).random is not None}

    def in_subgraph(n) -> bool:
        return any(m.op_type in random_types for sub in subgraphs(n) for graph in sub.walk() for m in graph.nodes)

    source: dict[str, str] = {}          # value -> the random node it depends on
    for n in g.nodes:
        ins = [g.values.get(i) if i else None for i in n.inputs]
        if registry.draws_random(n, ins) or in_subgraph(n):
            src = f"{n.op_type} {n.name!r}" if n.name else n.op_type
        else:
            src = next((source[i] for i in n.inputs if i in source), None)
        if src:
            source.update((o, src) for o in n.outputs if o)
    return {o: source[o] for o in g.outputs if o in source}


def random_report(name: str, got: np.ndarray, ref: np.ndarray, node: str) -> OutputReport:
    """An output drawn from random numbers: its shape and dtype against the reference's, its
    values not compared."""
    ref = np.asarray(ref)
    ok = got.shape == ref.shape and got.dtype == ref.dtype
    note = (f"values not compared: drawn from random numbers ({node}), which aotc and the reference "
            f"draw differently; shape and dtype " + ("match" if ok else
            f"differ: expected {ref.dtype}{list(ref.shape)}, got {got.dtype}{list(got.shape)}"))
    return OutputReport(name, str(got.dtype), list(got.shape), 0.0, 0.0, 0.0, 0 if ok else int(max(got.size, ref.size)),
                        ok, note, values_compared=False)


def nan_divergence_note(bad: np.ndarray, got: np.ndarray, ref: np.ndarray, op_types: Iterable[str]) -> str:
    """A note when every mismatch (`bad`, a mask) is NaN on exactly one side and the model holds
    an op whose NaN handling ONNX Runtime gets otherwise than the spec; else ''."""
    ops = sorted(set(op_types) & set(ORT_NAN_DIVERGENCES))
    if not ops or not bad.any() or not dtypes.is_float(got.dtype):
        return ""
    one_sided = np.isnan(got) != np.isnan(ref)
    if not one_sided[bad].all():
        return ""
    why = "; ".join(ORT_NAN_DIVERGENCES[o] for o in ops)
    return (f"all {int(bad.sum())} mismatches are NaN on one side only: known ONNX Runtime NaN divergence "
            f"({why}); aotc follows the ONNX spec and its reference implementation (docs/ROBUSTNESS.md)")


def _ulp_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Largest distance in units in the last place (of their type) between finite elements of a
    and b."""
    ints = {4: np.int32, 8: np.int64, 2: np.int16}.get(a.dtype.itemsize)
    if a.size == 0 or not dtypes.is_float(a.dtype) or ints is None:
        return 0.0
    lowest = np.iinfo(ints).min
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return 0.0

    def line(x):
        # sign-magnitude bit patterns onto one monotonic integer line (+0 and -0 both at 0)
        i = x[finite].view(ints).astype(np.int64)
        return np.where(i < 0, np.int64(lowest) - i, i)
    # float64 distances can exceed int64: take the difference in floating point
    return float(np.max(np.abs(line(a).astype(np.float64) - line(b).astype(np.float64))))


def known_divergences(model: onnx.ModelProto) -> dict[str, str]:
    """Graph outputs where ONNX Runtime is known to give other values than the spec (and aotc),
    with a note saying why: the label of a two-class TreeEnsembleClassifier whose trees score
    both classes (ONNX Runtime 1.x: 1 where the second class's raw score is > 0, else 0)."""
    outputs = {o.name for o in model.graph.output}
    notes = {}
    for n in model.graph.node:
        if n.op_type != "TreeEnsembleClassifier" or n.domain != "ai.onnx.ml" or not n.output or \
                n.output[0] not in outputs:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        labels = a.get("classlabels_int64s") or a.get("classlabels_strings") or []
        if len(labels) == 2 and len(set(a.get("class_ids", []))) == 2:
            notes[n.output[0]] = ("a two-class tree classifier scoring both classes: ONNX Runtime labels a row 1 "
                                  "where the second class's raw score is > 0, else 0, whatever the class labels; "
                                  "aotc gives the label of the top score (docs/ROBUSTNESS.md)")
    return notes


def compare(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float,
            op_types: Iterable[str] = (), step: float | None = None, known: str = "") -> OutputReport:
    """`op_types`: the model's (model_op_types), for the note on known NaN divergences; `step`:
    the output's quantization step (quantization_steps), for the note on rounding; `known`: the
    note on the output from known_divergences, given when it mismatches."""
    ref = np.asarray(ref)
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return OutputReport(name, str(got.dtype), list(got.shape), float("inf"), float("inf"), float("inf"),
                            int(max(got.size, ref.size)), False,
                            f"expected {ref.dtype}{list(ref.shape)}, got {got.dtype}{list(got.shape)}")
    if not dtypes.is_float(got.dtype):
        diff = got != ref
        n = int(diff.sum())
        err = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max()) if got.size else 0.0
        return OutputReport(name, str(got.dtype), list(got.shape), err, 0.0 if n == 0 else float("inf"),
                            0.0, n, n == 0, known if n else "")
    g64, r64 = got.astype(np.float64), ref.astype(np.float64)
    same_nan = np.isnan(g64) & np.isnan(r64)
    same_inf = np.isinf(g64) & np.isinf(r64) & (np.sign(g64) == np.sign(r64))
    ok_special = same_nan | same_inf
    with np.errstate(invalid="ignore"):
        abs_err = np.where(ok_special, 0.0, np.abs(g64 - r64))
        abs_err = np.where(np.isnan(abs_err), np.inf, abs_err)
        rel_err = abs_err / np.maximum(np.abs(r64), np.finfo(np.float64).tiny)
    bad = abs_err > atol + rtol * np.abs(np.where(ok_special, 0.0, r64))
    # an infinity or NaN on one side only is wrong whatever the tolerance (rtol * inf is inf)
    bad |= ~ok_special & ~(np.isfinite(g64) & np.isfinite(r64))
    n = int(bad.sum())
    return OutputReport(name, str(got.dtype), list(got.shape),
                        float(abs_err.max()) if got.size else 0.0,
                        float(np.where(abs_err == 0, 0.0, rel_err).max()) if got.size else 0.0,
                        _ulp_distance(got, ref), n, n == 0,
                        nan_divergence_note(bad, got, ref, op_types) or quantization_note(bad, abs_err, step)
                        or (known if n else ""))
