"""`aotc check`: compile, run aotc and ONNX Runtime on the same inputs, compare."""
from __future__ import annotations

import ctypes
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

import numpy as np
import onnx

from ..api import CompiledModel
from ..compiler import compile_model
from ..errors import InputError
from ..frontend import import_model, load_onnx
from ..ir import dtypes
from ..targets import load_target
from .inputs import sample_inputs
from .parity import (OutputReport, compare, known_divergences, model_op_types, quantization_steps, random_outputs,
                     random_report, tolerances)


@dataclass
class CheckResult:
    model: str
    target: str
    rtol: float
    atol: float
    outputs: list[OutputReport] = field(default_factory=list)
    # what computed the expected outputs: ONNX Runtime, or the ONNX reference implementation
    # where ONNX Runtime has no kernel for an op of the model
    reference: str = ""

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def as_dict(self) -> dict:
        return {"model": self.model, "target": self.target, "rtol": self.rtol, "atol": self.atol,
                "passed": self.passed, "reference": self.reference, "outputs": [o.as_dict() for o in self.outputs]}


def reference_outputs(model_path, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return reference_run(model_path, feeds)[0]


def reference_run(model_path, feeds: Mapping[str, np.ndarray], subnormals_as_zero: bool = False
                  ) -> tuple[list[np.ndarray], str]:
    """The model's outputs from ONNX Runtime, and which reference computed them. Where ONNX
    Runtime has no kernel for an op (newer opsets: SwiGLU, CumProd, ...; ai.onnx.preview's
    FlexAttention) the ONNX reference
    implementation (onnx.reference, slow but complete) runs instead, and the second value says so.
    Where the model has 4- or 2-bit inputs or outputs, which ONNX Runtime's Python API cannot
    pass, the reference implementation runs too. ONNX Runtime computes 4-bit weights' products
    in float32 (not its default, int8 activations), as the model says.
    Where the model multiplies uint8 by int8 and this machine's ONNX Runtime gets such products
    wrong (ort_saturates_u8s8), ONNX Runtime runs an equivalent model whose products it gets
    right (exact_integer_products), and the second value says that too. `subnormals_as_zero`:
    ONNX Runtime computes subnormal floats as zero (its session.set_denormal_as_zero), as a CPU
    target's run does (passes/subnormals.py), and the second value says so."""
    if subnormals_as_zero:
        with caller_fp_state(flush=True):
            return _reference_run(model_path, feeds, True)
    return _reference_run(model_path, feeds, False)


def _reference_run(model_path, feeds: Mapping[str, np.ndarray], subnormals_as_zero: bool
                   ) -> tuple[list[np.ndarray], str]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    # ONNX Runtime fuses a 4-bit DequantizeLinear -> MatMul into MatMulNBits, which by default
    # quantizes the activations to int8 (accuracy level 4): 0.5% off the model's own float32
    # arithmetic in tests/test_narrow_types.py. Level 1 (float32) computes what the model says.
    so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    if subnormals_as_zero:
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    # ONNX Runtime's DynamicQuantizeLSTM quantizes each step's H over the batch rows one of its
    # threads computes: with several threads, groups of rows get scales of their own, and its
    # outputs move with the thread count (7e-4 on a 3-row batch at 2 threads). On one thread it
    # quantizes the whole batch together, as aotc does.
    ops = {n.op_type for n in onnx.load(str(model_path), load_external_data=False).graph.node}
    one_thread = "DynamicQuantizeLSTM" in ops
    if one_thread:
        so.intra_op_num_threads = 1
    packed = _packed_ports(model_path)
    try:
        if packed:
            raise NotImplementedError(f"NOT_IMPLEMENTED : its Python API takes and gives no arrays of 4- or "
                                      f"2-bit elements ({', '.join(map(repr, packed[:3]))})")
        sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    except Exception as e:
        if "NOT_IMPLEMENTED" in str(e):
            why = str(e).split("NOT_IMPLEMENTED :", 1)[-1].strip().splitlines()[0]
        elif "is not a registered function/op" in str(e):         # an op of a domain it lacks
            why = str(e).split("Fatal error:", 1)[-1].strip().splitlines()[0]
        else:
            raise
        from onnx.reference import ReferenceEvaluator
        ref = ReferenceEvaluator(onnx.load(str(model_path)))
        outs = [np.asarray(a) for a in ref.run(None, dict(feeds))]
        return outs, f"the ONNX reference implementation (onnx {onnx.__version__}; ONNX Runtime {ort.__version__}: {why})"
    source = f"ONNX Runtime {ort.__version__}" + (" (subnormal floats as zero, as aotc computes them)"
                                                  if subnormals_as_zero else "")
    if one_thread:
        source += " on one thread (its DynamicQuantizeLSTM's results depend on its thread count)"
    # (the probe is cached; the model is read again, weights and all, only when it holds an
    # integer product)
    if ort_saturates_u8s8() and ops & set(_PRODUCT_FACTORS):
        model = onnx.load(str(model_path))
        changed = exact_integer_products(model)
        if changed:
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            source += (f", its uint8 x int8 products ({', '.join(map(repr, changed[:3]))}"
                       f"{', ...' if len(changed) > 3 else ''}) rewritten as uint8 x uint8 or int8 x int8, "
                       f"which this CPU's ONNX Runtime computes exactly")
    return ort_run(sess, dict(feeds)), source


@contextmanager
def caller_fp_state(flush: bool = False):
    """Runs the body with this thread's floating-point environment put back after it (C's
    fegetenv / fesetenv: x86's MXCSR with its flush-to-zero and denormals-are-zero modes), and
    with `flush`, with those two modes on during it (x86-64 glibc). ONNX Runtime's
    session.set_denormal_as_zero sets them on the thread that runs its first such session and
    leaves them set (numpy in this process would compute subnormal floats as zero too), and it
    does not set them again on a later session: so the modes are set here for each reference run
    and put back after. Where libm's functions cannot be found, the body just runs."""
    import ctypes
    import ctypes.util
    import platform
    import struct
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        env = ctypes.create_string_buffer(256)           # (fenv_t is 32 bytes on x86-64 glibc)
        saved = libm.fegetenv(env) == 0
    except (OSError, AttributeError):
        saved = False
    if saved and flush and platform.machine() in ("x86_64", "AMD64"):
        on = ctypes.create_string_buffer(env.raw, len(env.raw))
        mxcsr, = struct.unpack_from("<I", on.raw, 28)     # glibc's fenv_t: the MXCSR at byte 28
        struct.pack_into("<I", on, 28, mxcsr | 0x8040)    # FTZ, DAZ
        libm.fesetenv(on)
    try:
        yield
    finally:
        if saved:
            libm.fesetenv(env)


# element types ONNX Runtime's Python API has no numpy type for, which it takes and gives as bit
# patterns of the same width: ONNX code by ml_dtypes dtype
_ORT_BITS = {dt: dtypes.to_onnx(dt) for dt in (dtypes.BFLOAT16,) + dtypes.SMALL_FLOATS
             if dtypes.to_onnx(dt) != onnx.TensorProto.FLOAT4E2M1}
# ... and those it holds two or four to a byte, which its Python API cannot take (reference_run
# runs the ONNX reference implementation where a model has such inputs or outputs)
_ORT_PACKED = (onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.INT2, onnx.TensorProto.UINT2,
               onnx.TensorProto.FLOAT4E2M1)


def ort_run(sess, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """sess.run, with bfloat16 and float8 inputs and outputs as ml_dtypes arrays: ONNX Runtime's
    Python API has no numpy type for them, so those go through OrtValues (bit patterns in, the
    output's bytes read back out)."""
    import onnxruntime as ort
    by_name = {f"tensor({onnx.TensorProto.DataType.Name(code).lower()})": dt for dt, code in _ORT_BITS.items()}
    bits_out = any(o.type in by_name for o in sess.get_outputs())
    if not bits_out and not any(np.asarray(a).dtype in _ORT_BITS for a in feeds.values()):
        return sess.run(None, dict(feeds))
    values = {}
    for k, a in feeds.items():
        a = np.ascontiguousarray(a)
        values[k] = (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(f"u{a.dtype.itemsize}"), _ORT_BITS[a.dtype])
                     if a.dtype in _ORT_BITS else ort.OrtValue.ortvalue_from_numpy(a))
    outs = []
    for v in sess.run_with_ort_values(None, values):
        dt = by_name.get(v.data_type())
        if dt is not None:
            raw = ctypes.string_at(v.data_ptr(), v.tensor_size_in_bytes())
            outs.append(np.frombuffer(raw, f"u{dt.itemsize}").reshape(v.shape()).view(dt).copy())
        else:
            outs.append(v.numpy())
    return outs


def _packed_ports(model_path) -> list[str]:
    """The graph inputs and outputs of a type ONNX Runtime holds several to a byte."""
    g = onnx.load(str(model_path), load_external_data=False).graph
    return [v.name for v in list(g.input) + list(g.output)
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in _ORT_PACKED]


# integer products and the positions of their factors and of the factors' zero points: A, B, A's, B's
_PRODUCT_FACTORS = {"MatMulInteger": (0, 1, 2, 3), "ConvInteger": (0, 1, 2, 3),
                    "QLinearMatMul": (0, 3, 2, 5), "QLinearConv": (0, 3, 2, 5)}


def exact_integer_products(model) -> list[str]:
    """Rewrites, in place, every top-level node of `model` that multiplies a uint8 tensor by an
    int8 one (either way round) so that its second factor takes the first one's type: B' = B + 128
    and its zero point + 128 as uint8 (or both - 128 as int8), which leaves every difference
    B - zero point, and so the node's result, the same. Returns the rewritten nodes' names (op
    types for unnamed ones); none when the factors' types are unknown."""
    if not any(n.op_type in _PRODUCT_FACTORS for n in model.graph.node):
        return []
    try:
        g = onnx.shape_inference.infer_shapes(model).graph
    except Exception:
        return []
    from onnx import TensorProto, helper
    elem = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info) + list(g.output)}
    elem.update({t.name: t.data_type for t in g.initializer})
    U8, S8 = TensorProto.UINT8, TensorProto.INT8
    nodes, changed = [], []
    for k, n in enumerate(model.graph.node):
        if n.op_type in _PRODUCT_FACTORS and n.domain in ("", "ai.onnx"):
            ia, ib, _, izb = _PRODUCT_FACTORS[n.op_type]
            a, b = n.input[ia], n.input[ib]
            if {elem.get(a), elem.get(b)} == {U8, S8}:
                to, shift = (U8, 128) if elem[a] == U8 else (S8, -128)
                p = f"aotc_exact{k}_"
                nodes.append(helper.make_node("Constant", [], [p + "shift"], value=helper.make_tensor(
                    p + "sv", TensorProto.INT32, [], [shift])))

                def shifted(src: str, out: str) -> None:       # out = src + shift, in type `to`
                    nodes.append(helper.make_node("Cast", [src], [out + "32"], to=TensorProto.INT32))
                    nodes.append(helper.make_node("Add", [out + "32", p + "shift"], [out + "32s"]))
                    nodes.append(helper.make_node("Cast", [out + "32s"], [out], to=to))
                shifted(b, p + "b")
                zb = n.input[izb] if izb < len(n.input) else ""
                if zb:
                    shifted(zb, p + "z")
                else:
                    nodes.append(helper.make_node("Constant", [], [p + "z"], value=helper.make_tensor(
                        p + "zv", to, [], [shift])))
                ins = list(n.input) + [""] * (izb + 1 - len(n.input))
                ins[ib], ins[izb] = p + "b", p + "z"
                del n.input[:]
                n.input.extend(ins)
                changed.append(n.name or n.op_type)
        nodes.append(n)
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return changed


@lru_cache(maxsize=1)
def ort_saturates_u8s8() -> bool:
    """Whether this machine's ONNX Runtime gets uint8 x int8 products wrong. On x86 CPUs
    without VNNI its integer GEMM adds each pair of uint8 x int8 products in 16 bits with
    saturation (vpmaddubsw), so 255 x -128 twice gives -32768, not -65280 (seen with ONNX
    Runtime 1.32 on an AVX2 AMD EPYC; exact where the CPU has AVX-512 VNNI). Probed once on
    exactly that product; int8 x uint8, ConvInteger, QLinearConv and QLinearMatMul go through the
    same kernel (seen failing the same way)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2]),
                           helper.make_tensor_value_info("b", TensorProto.INT8, [2, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    m.ir_version = 7
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"a": np.full((1, 2), 255, np.uint8), "b": np.full((2, 1), -128, np.int8)})
    return int(y.reshape(-1)[0]) != -65280


def _check_input_names(model_path, inputs: Mapping, consts: Mapping) -> None:
    """User-given inputs must name graph inputs, and cover every one not bound by --const."""
    g = load_onnx(model_path).graph
    weights = {t.name for t in g.initializer}
    names = [vi.name for vi in g.input if vi.name not in weights]
    unknown = [k for k in inputs if k not in names]
    if unknown:
        raise InputError(f"--input names {', '.join(map(repr, unknown))}, which is not a graph input",
                         f"graph inputs are: {', '.join(names) or '(none)'}")
    missing = [k for k in names if k not in inputs and k not in consts]
    if missing:
        raise InputError(f"no --input given for {', '.join(map(repr, missing))}",
                         "give every input with --input (or none, to draw seeded random inputs)")


def run_check(model_path, target: str = "native", inputs: Optional[Mapping[str, np.ndarray]] = None,
              rtol: Optional[float] = None, atol: Optional[float] = None, shapes: Optional[Mapping] = None,
              consts: Optional[Mapping] = None, output_dir=None, seed: int = 0, weights: str = "auto",
              progress=None, threads: int = 0, build=None, dims: Optional[Mapping] = None,
              sizes: Optional[Mapping[str, list]] = None) -> CheckResult:
    """Compile the model for `target`, run it and the reference on the same inputs (seeded
    random ones unless given) and compare every output. rtol / atol default to the target's
    (parity.tolerances). With run-time dimensions (ranges in `shapes`, or `dims`), one artifact
    runs at several sizes: `sizes` (dimension -> its sizes; default both ends and the middle of
    each range), the k-th run taking each dimension's k-th size (its last, when it has fewer);
    each output is reported per run, named `output [dim=size, ...]`."""
    default_rtol, default_atol = tolerances(load_target(target))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    consts = dict(consts or {})
    shapes = dict(shapes or {})
    ranged = bool(dims) or any(isinstance(d, (tuple, list)) for v in shapes.values() for d in v)
    if inputs:
        _check_input_names(model_path, inputs, consts)
        if not ranged:
            for k, v in inputs.items():
                shapes.setdefault(k, tuple(np.asarray(v).shape))
    tmp = None
    if output_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="aotc-check-")
        output_dir = tmp.name
    try:
        out = compile_model(model_path, target=target, output_dir=output_dir, shapes=shapes, consts=consts,
                            weights=weights, progress=progress, threads=threads, build=build, dims=dims)
        m = CompiledModel(out, threads=threads)
        model = load_onnx(model_path)
        g = import_model(model, "check", shapes, consts, dims)
        outs, source = [], ""
        for label, point in _size_points(g, sizes, inputs is not None):
            gp = g if not point else import_model(model, "check", {
                n: tuple(d if isinstance(d, int) else d.evaluate(point) for d in g.values[n].shape)
                for n in g.inputs}, consts)
            if inputs is None:
                feeds = sample_inputs(gp, seed)
            else:
                feeds = {k: np.asarray(v) for k, v in inputs.items()}
            drawn = random_outputs(gp)
            got = m.run({k: feeds[k] for k in m.input_names})
            ref, source = reference_run(model_path, {**feeds, **{k: np.asarray(v) for k, v in consts.items()}},
                                        load_target(target).flushes_subnormals)
            outs += [(name + label, a, b) for name, a, b in zip(m.output_names, got, ref)]
        res = CheckResult(str(model_path), m.manifest["target"], rtol, atol, reference=source)
        def reports(op_types=(), steps=None, known=None):
            return [random_report(name, a, b, drawn[name.split(" [")[0]]) if name.split(" [")[0] in drawn else
                    compare(name, a, b, rtol, atol, op_types, (steps or {}).get(name), (known or {}).get(name, ""))
                    for name, a, b in outs]
        res.outputs = reports()
        if not res.passed:          # a note on mismatches that are ONNX Runtime's NaN handling, rounding or labels
            proto = onnx.load(str(model_path), load_external_data=False)
            res.outputs = reports(model_op_types(proto), quantization_steps(proto), known_divergences(proto))
        return res
    finally:
        if tmp is not None:
            tmp.cleanup()


def _size_points(g, sizes: Optional[Mapping[str, list]], given: bool) -> list[tuple[str, dict]]:
    """The runs of a check: ("", {}) for a model without run-time dimensions or with inputs
    given (their shapes say the sizes); else (label, {dimension: size}) per run."""
    syms = sorted(g.symbols.values())
    if not syms or given:
        return [("", {})]
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(g.symbols))
    if unknown:
        raise InputError(f"--sizes names {', '.join(map(repr, unknown))}, which is no run-time dimension of the "
                         "model", "its run-time dimensions are: " + ", ".join(s.name for s in syms))
    chosen = {}
    for s in syms:
        vals = [int(v) for v in sizes.get(s.name, s.sizes())]
        bad = [v for v in vals if not (s.lo <= v <= s.hi and v % s.multiple == 0)]
        if bad or not vals:
            raise InputError(f"--sizes {s.name}: {bad or 'no sizes'} outside {s.spec()}")
        chosen[s.name] = vals
    runs = max(len(v) for v in chosen.values())
    points = [{n: v[min(k, len(v) - 1)] for n, v in chosen.items()} for k in range(runs)]
    return [(" [" + ", ".join(f"{n}={v}" for n, v in p.items()) + "]", p) for p in points]


def junit_xml(res: CheckResult) -> str:
    from xml.sax.saxutils import escape, quoteattr
    fails = sum(not o.passed for o in res.outputs)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name={quoteattr("aotc check " + Path(res.model).name)} tests="{len(res.outputs)}" '
             f'failures="{fails}">']
    for o in res.outputs:
        lines.append(f'  <testcase classname={quoteattr(Path(res.model).name)} name={quoteattr(o.name)}>')
        if not o.passed:
            msg = (f"max_abs_err={o.max_abs_err:.3g} max_rel_err={o.max_rel_err:.3g} max_ulp={o.max_ulp:.0f} "
                   f"mismatches={o.mismatches} {o.note}")
            lines.append(f'    <failure message={quoteattr(msg)}/>')
        elif not o.values_compared:
            lines.append(f'    <system-out>{escape(o.note)}</system-out>')
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
