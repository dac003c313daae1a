"""Shared test helpers: tiny ONNX graphs and a parity assertion against ONNX Runtime."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aotc.check.runner import run_check

NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
           np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
           np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8,
           np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint16): TensorProto.UINT16,
           np.dtype(np.int16): TensorProto.INT16, np.dtype(np.uint32): TensorProto.UINT32,
           np.dtype(np.uint64): TensorProto.UINT64, np.dtype(np.float16): TensorProto.FLOAT16}


def single_op_model(op_type: str, inputs: dict, n_out: int = 1, inits: dict | None = None,
                    opset: int = 17, **attrs) -> onnx.ModelProto:
    """A model with one node. `inputs`: name -> array (graph inputs, shapes from the arrays);
    `inits`: name -> array (initializers). Input order: graph inputs, then initializers,
    unless the node input list is given with attrs['_order']."""
    order = attrs.pop("_order", None) or (list(inputs) + list(inits or {}))
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op_type, order, outs, **attrs)
    g_in = [helper.make_tensor_value_info(k, NP2ONNX[np.asarray(v).dtype], np.asarray(v).shape)
            for k, v in inputs.items()]
    g_out = [helper.make_empty_tensor_value_info(o) for o in outs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph([node], f"test_{op_type}", g_in, g_out, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def graph_model(nodes, inputs: dict, outputs: list[str], inits: dict | None = None, opset: int = 17):
    g_in = [helper.make_tensor_value_info(k, NP2ONNX[np.asarray(v).dtype], np.asarray(v).shape)
            for k, v in inputs.items()]
    g_out = [helper.make_empty_tensor_value_info(o) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "test_graph", g_in, g_out, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def typed_model(nodes, inputs: list, outputs: list, inits=(), opset: int = 17) -> onnx.ModelProto:
    """A model from value infos (helper.make_tensor_value_info) for its inputs and outputs and
    (name, array) pairs for its initializers: where graph_model's inference from arrays cannot
    say the type (float16 and bfloat16 edges)."""
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    opsets = [helper.make_opsetid("", opset)]
    # the IR version the opset needs, not the installed onnx's newest (an older ONNX Runtime, as
    # on the lent GPU machines, refuses a newer IR version than it knows)
    return helper.make_model(g, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def assert_parity(model: onnx.ModelProto, tmp_path: Path, feeds: dict | None = None, rtol: float = 1e-4,
                  atol: float = 1e-5, shapes: dict | None = None, consts: dict | None = None, **kw):
    """Compile with aotc, run it and ONNX Runtime on the same inputs, assert every output matches."""
    path = Path(tmp_path) / "model.onnx"
    onnx.save(model, str(path))
    res = run_check(path, inputs=feeds, rtol=rtol, atol=atol, shapes=shapes, consts=consts,
                    output_dir=Path(tmp_path) / "out", **kw)
    bad = [o for o in res.outputs if not o.passed]
    assert not bad, "parity failed: " + "; ".join(
        f"{o.name}: max_abs={o.max_abs_err:.3g} max_rel={o.max_rel_err:.3g} mismatches={o.mismatches} {o.note}"
        for o in bad)
    assert res.outputs, "model has no outputs"
    return res


def rand(*shape, seed: int = 0, dtype=np.float32, low=None, high=None):
    rng = np.random.default_rng(seed)
    if low is not None:
        return rng.uniform(low, high, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def eager_threads_target(directory: Path) -> str:
    """A target file: the portable c target with every threading threshold at 1, so that the
    schedule puts every spatial loop and every GEMM on the thread pool (tests of the parallel
    code paths on small models)."""
    import json
    import tomllib
    from aotc.paths import TARGETS_DIR
    with open(TARGETS_DIR / "c.toml", "rb") as f:
        t = tomllib.load(f)
    lines = ['name = "c-eager-threads"', 'language = "c"', f'cc = "{t["cc"]}"',
             f"cflags = {t['cflags']!r}".replace("'", '"'), f"ldflags = {t['ldflags']!r}".replace("'", '"'),
             "alignment = 64", "[gemm]"] + [f"{k} = {json.dumps(v)}" for k, v in t["gemm"].items()] + \
        ["[threads]", "min_parallel_work = 1", "min_parallel_gemm_macs = 1", "[numerics]",
         'accumulate_float32 = "float64"']
    p = Path(directory) / "c-eager-threads.toml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def convs_model(path: Path, convs: list, silu: bool = False):
    """A model of independent Conv nodes, one per (x shape, w shape, attrs) of `convs`, each on
    its own input x<i> with weights w<i> and bias b<i> (seeded random), its output y<i> (with
    `silu`, the Conv's output times its Sigmoid: an epilogue fused after it). Saved to `path`;
    returns the feeds."""
    N = helper.make_node
    nodes, feeds, inits = [], {}, {}
    for i, (xs, ws, attrs) in enumerate(convs):
        feeds[f"x{i}"] = rand(*xs, seed=i)
        inits[f"w{i}"] = rand(*ws, seed=100 + i) * 0.3
        inits[f"b{i}"] = rand(ws[0], seed=200 + i)
        out = f"c{i}" if silu else f"y{i}"
        nodes.append(N("Conv", [f"x{i}", f"w{i}", f"b{i}"], [out], **attrs))
        if silu:
            nodes += [N("Sigmoid", [out], [f"s{i}"]), N("Mul", [out, f"s{i}"], [f"y{i}"])]
    onnx.save(graph_model(nodes, feeds, [f"y{i}" for i in range(len(convs))], inits), str(path))
    return feeds


def target_with_switch_off(target: str, directory: Path, switch: str, suffix: str) -> str:
    """A target file: `target` (a name or a .toml path) with its boolean `switch` (a key of its
    [gemm] table set to true there, or absent: it defaults to true) set to false, named
    `<name>-<suffix>`. The tests of a fast path build the model both ways with it."""
    from aotc.paths import TARGETS_DIR
    from aotc.targets import load_target
    src = Path(target) if target.endswith(".toml") else TARGETS_DIR / f"{target}.toml"
    text = src.read_text()
    name = load_target(target).name
    if f"{switch} = true" in text:
        text = text.replace(f"{switch} = true", f"{switch} = false")
    else:
        assert "[gemm]" in text and switch not in text
        text = text.replace("[gemm]", f"[gemm]\n{switch} = false", 1)
    text = text.replace(f'name = "{name}"', f'name = "{name}-{suffix}"', 1)
    p = Path(directory) / f"{name}-{suffix}.toml"
    p.write_text(text)
    return str(p)


def eager_gpu_target(directory: Path) -> str:
    """A target file: the opencl target with the GPU schedule's thresholds at their most eager,
    so that small models take the paths full-size ones do: a work-group for every spatial
    iteration whose inner loops can be shared (`group_min_work`), and GEMMs cut into the
    smallest tiles and split along K (`min_groups`, `split_min_k`)."""
    return opencl_target_with(directory, "opencl-eager", {"group_min_work": 1, "min_groups": 4096, "split_min_k": 16})


def eager_cuda_target(directory: Path) -> str:
    """The cuda target with the GPU schedule's thresholds at their most eager (as
    eager_gpu_target), for the CUDA emulation (tests/test_cuda_emulated.py)."""
    return opencl_target_with(directory, "cuda-eager", {"group_min_work": 1, "min_groups": 4096, "split_min_k": 16},
                              base="cuda")


def opencl_target_with(directory: Path, name: str, gpu: dict, base: str = "opencl") -> str:
    """A target file: the opencl target (or `base`) with the given values in its [gpu] table
    (the GPU schedule's tiles and thresholds), named `name`."""
    from aotc.paths import TARGETS_DIR
    text = (TARGETS_DIR / f"{base}.toml").read_text()
    text = text.replace(f'name = "{base}"', f'name = "{name}"', 1)
    for key, value in gpu.items():
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
        if not n:
            text = text.replace("[gpu]\n", f"[gpu]\n{key} = {value}\n", 1)
    p = Path(directory) / f"{name}.toml"
    p.write_text(text)
    return str(p)


def gemm_layouts_model(M: int = 37):
    """GEMMs on every operand layout a GPU GEMM kernel walks differently (A and B each with K as
    the unit stride or not, both computed at run time), sizes that are not multiples of any
    tile, alpha/beta and a bias, and a batched MatMul; (model, feeds). M: the Gemms' rows."""
    from onnx import helper
    K, N = 70, 133
    nodes, feeds, outs = [], {}, []
    for ta in (0, 1):
        for tb in (0, 1):
            a, b = f"a{ta}{tb}", f"b{ta}{tb}"
            feeds[a] = rand(*((K, M) if ta else (M, K)), seed=10 + 2 * ta + tb)
            feeds[b] = rand(*((N, K) if tb else (K, N)), seed=20 + 2 * ta + tb)
            nodes.append(helper.make_node("Gemm", [a, b, "bias"], [f"y{ta}{tb}"], transA=ta, transB=tb,
                                          alpha=0.5, beta=2.0))
            outs.append(f"y{ta}{tb}")
    feeds["p"], feeds["q"] = rand(3, 29, 300, seed=30), rand(3, 300, 45, seed=31)
    nodes.append(helper.make_node("MatMul", ["p", "q"], ["pq"]))
    outs.append("pq")
    return graph_model(nodes, feeds, outs, {"bias": rand(N, seed=5)}), feeds


@functools.lru_cache(maxsize=1)
def onnx_node_cases() -> dict:
    """ONNX's own node test cases (onnx.backend.test.case.node), by name."""
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def case_array(a) -> np.ndarray:
    """An input or expected output of a node test case as a numpy array."""
    return numpy_helper.to_array(a) if isinstance(a, onnx.TensorProto) else np.asarray(a)


def onnx_node_cases_of(module: str) -> dict:
    """The node test cases one module of ONNX's case generators makes (onnx.backend.test.case.node.
    <module>), by name: seconds faster than onnx_node_cases(), which runs every generator."""
    import importlib
    importlib.import_module(f"onnx.backend.test.case.node.{module}")
    from onnx.backend.test.case import node
    return {c.name: c for c in node._NodeTestCases if c.model.graph.node[0].op_type.lower() == module}


def run_onnx_node_case(name: str, tmp_path: Path, bound=(), exact: bool = False, case=None) -> None:
    """Compile ONNX node test case `name` (or `case`, one of onnx_node_cases_of's) with the graph
    inputs in `bound` bound as constants (values aotc needs at compile time, which the case feeds
    as inputs) and the others' shapes from its data sets, run it on each data set, assert every
    output equals the expected one (same dtype; within the case's rtol/atol, default 1e-3 / 1e-7,
    or exactly)."""
    from aotc.api import load
    from aotc.compiler import compile_model
    case = case or onnx_node_cases()[name]
    names = [i.name for i in case.model.graph.input]
    bound = set(bound) & set(names)
    path = Path(tmp_path) / f"{name}.onnx"
    onnx.save(case.model, str(path))
    for k, (inputs, outputs) in enumerate(case.data_sets):
        feeds = {n: case_array(a) for n, a in zip(names, inputs)}
        run = {n: a for n, a in feeds.items() if n not in bound}
        out = compile_model(path, output_dir=Path(tmp_path) / f"{name}_{k}", shapes={n: a.shape for n, a in run.items()},
                            consts={n: feeds[n] for n in bound})
        got = load(out).run(run)
        assert len(got) == len(outputs), name
        for g_, want in zip(got, outputs):
            want = case_array(want)
            assert g_.dtype == want.dtype, name
            if exact:
                np.testing.assert_array_equal(g_, want, err_msg=name)
            else:
                np.testing.assert_allclose(g_, want, rtol=case.rtol or 1e-3, atol=case.atol or 1e-7, err_msg=name)
