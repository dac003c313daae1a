"""ONNX Runtime's block-quantized weights (aotc/frontend/contrib_nbits.py): MatMulNBits and
GatherBlockQuantized as its MatMulNBits quantizer writes them (4 and 8 bits, symmetric and not,
block sizes that do and do not divide K), and hand-built nodes for the inputs and attributes the
quantizer does not write (2 bits, float zero points, g_idx, bias, accuracy_level, packed uint8
tables), each against ONNX Runtime on random inputs. Without g_idx the weights stay packed in the
artifact (aotc.MatMulNBits, ops/nbits.py): its bytes are checked against float32's."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.check.runner import run_check
from tests.test_contrib_ops import contrib_model, run_aotc

K, N = 80, 24


def _model(rng) -> onnx.ModelProto:
    """An embedding Gather and two MatMuls (K = 80, not a multiple of 32)."""
    emb = rng.standard_normal((50, K)).astype(np.float32)
    w1, w2 = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal((N, 16)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]), helper.make_node("MatMul", ["e", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 16])],
                          [numpy_helper.from_array(v, n) for n, v in (("emb", emb), ("w1", w1), ("w2", w2))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("bits,symmetric,block", [(4, True, 32), (4, False, 16), (8, True, 16), (8, False, 32)])
def test_matmul_nbits_quantizer_output_matches_onnx_runtime(bits, symmetric, block, tmp_path):
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    q = MatMulNBitsQuantizer(_model(np.random.default_rng(bits + block)), algo_config=DefaultWeightOnlyQuantConfig(
        block_size=block, is_symmetric=symmetric, bits=bits, op_types_to_quantize=("MatMul", "Gather"),
        quant_axes=(("Gather", 1),)))
    q.process()
    path = tmp_path / "q.onnx"
    q.model.save_model_to_file(str(path))
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count("MatMulNBits") == 2 and ("GatherBlockQuantized" in ops) == (bits == 4), ops
    ids = np.random.default_rng(1).integers(0, 50, (2, 5)).astype(np.int64)
    res = run_check(path, inputs={"ids": ids}, output_dir=tmp_path / "out", rtol=1e-5, atol=1e-5)
    assert res.outputs and all(o.passed for o in res.outputs), [(o.max_abs_err, o.max_rel_err) for o in res.outputs]


def _pack(vals: np.ndarray, bits: int) -> np.ndarray:
    """Values of `bits` bits along the last axis -> bytes, low bits first."""
    per = 8 // bits
    v = vals.astype(np.uint8).reshape(*vals.shape[:-1], -1, per)
    return sum((v[..., i] << (i * bits)) for i in range(per)).astype(np.uint8)


def _nbits_inputs(rng, bits, block, float_zp=False, zp=True, k=K, n=N):
    """B, scales (and zero points) of an n x k weight as ONNX Runtime's quantizer packs them."""
    kb = -(-k // block)
    q = rng.integers(0, 1 << bits, (n, kb * block))
    q[:, k:] = 0
    inits = {"B": _pack(q, bits).reshape(n, kb, block * bits // 8),
             "scales": rng.uniform(0.01, 0.1, (n, kb)).astype(np.float32).reshape(-1)}
    if zp:
        if float_zp:
            inits["zp"] = rng.uniform(0, (1 << bits) - 1, (n, kb)).astype(np.float32).reshape(-1)
        else:
            z = rng.integers(0, 1 << bits, (n, kb))
            per = 8 // bits
            z = np.pad(z, ((0, 0), (0, -(-kb // per) * per - kb)))
            inits["zp"] = _pack(z, bits).reshape(-1)
    return inits


@pytest.mark.parametrize("bits,block,extra", [
    (2, 16, {}), (4, 32, {"bias": True}), (4, 16, {"g_idx": True, "no_zp": True}), (4, 32, {"float_zp": True}),
    (4, 16, {"g_idx": True, "float_zp": True}),
    (8, 32, {"accuracy_level": 1}), (4, 16, {"no_zp": True, "bias": True})])
def test_matmul_nbits_inputs_and_attributes(bits, block, extra, tmp_path):
    rng = np.random.default_rng(bits * 7 + block)
    inits = _nbits_inputs(rng, bits, block, extra.get("float_zp", False), not extra.get("no_zp"))
    order = ["a", "B", "scales", "zp" if "zp" in inits else "", "", ""]
    if extra.get("g_idx"):
        # act-order groups: a permutation of the blocks' columns
        inits["g_idx"] = (rng.permutation(K) // block).astype(np.int32)
        order[4] = "g_idx"
    if extra.get("bias"):
        inits["bias"] = rng.standard_normal(N).astype(np.float32)
        order[5] = "bias"
    while not order[-1]:
        order.pop()
    a = rng.standard_normal((3, K)).astype(np.float32)
    m = contrib_model("MatMulNBits", {"a": a}, inits, order=order, K=K, N=N, bits=bits, block_size=block,
                      accuracy_level=extra.get("accuracy_level", 0))
    got, = run_aotc(m, tmp_path, {"a": a})
    want, = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})
    assert np.abs(want).max() > 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_matmul_nbits_refuses_g_idx_with_packed_zero_points(tmp_path):
    """ONNX Runtime 1.32's CPU kernel ignores packed zero points when g_idx is given (it gives
    what zero points of 8 give): refused by name rather than computed either way."""
    from aotc.errors import UnsupportedError
    rng = np.random.default_rng(3)
    inits = {**_nbits_inputs(rng, 4, 16), "g_idx": (np.arange(K) // 16).astype(np.int32)}
    a = rng.standard_normal((3, K)).astype(np.float32)
    m = contrib_model("MatMulNBits", {"a": a}, inits, order=["a", "B", "scales", "zp", "g_idx"], K=K, N=N, bits=4,
                      block_size=16)
    with pytest.raises(UnsupportedError, match="g_idx with packed uint8 zero_points"):
        run_aotc(m, tmp_path, {"a": a})


@pytest.mark.parametrize("form,gather_axis,zp", [("uint8", 0, False), ("uint8", 0, True), ("uint4", 1, True),
                                                 ("int4", 0, False)])
def test_gather_block_quantized(form, gather_axis, zp, tmp_path):
    """ORT's uint8 form (two 4-bit values a byte along the last axis, zero point 8 by default)
    and 4-bit typed tables (zero point 0 by default), gathered along either axis."""
    rng = np.random.default_rng(5 + gather_axis)
    rows, cols, block = 6, 64, 16
    lo = -8 if form == "int4" else 0
    q = rng.integers(lo, lo + 16, (rows, cols))
    zq = rng.integers(lo, lo + 16, (rows, cols // block))
    if form == "uint8":
        data, zps = _pack(q, 4), _pack(zq, 4)
    else:
        code = TensorProto.UINT4 if form == "uint4" else TensorProto.INT4
        data = helper.make_tensor("data", code, q.shape, q.reshape(-1).tolist())
        zps = helper.make_tensor("zp", code, zq.shape, zq.reshape(-1).tolist())
    inits = {"data": data, "scales": rng.uniform(0.01, 0.1, (rows, cols // block)).astype(np.float32)}
    order = ["data", "ids", "scales"]
    if zp:
        inits["zp"] = zps
        order.append("zp")
    ids = rng.integers(0, rows if gather_axis == 0 else cols, (3, 2)).astype(np.int64)
    m = contrib_model("GatherBlockQuantized", {"ids": ids}, {k: v for k, v in inits.items()
                                                            if isinstance(v, np.ndarray)},
                      order=order, gather_axis=gather_axis, quantize_axis=1, block_size=block, bits=4, onnx_opset=21)
    m.graph.initializer.extend(v for v in inits.values() if isinstance(v, onnx.TensorProto))
    got, = run_aotc(m, tmp_path, {"ids": ids})
    want, = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})
    assert np.abs(want).max() > 0.1
    np.testing.assert_array_equal(got, want)


# (bits, block, zero points: "u8" packed / "f32" / None, K, rows of A[, N]): where ONNX Runtime 1.32
# quantizes the activations to int8 at accuracy_level 4 (4 and 8 bits; 2 bits from blocks of 32;
# uint8 or no zero points), and where it stays exact (2 bits in blocks of 16, float zero points);
# the weights (4-bit: the genai builder's int4 has no zero points, ORT's quantizer's default has)
# are relaid by tiles of 16 columns in AVX-512 builds (passes/caches.py): 1 to 20 rows (passes of
# six rows and single ones), 2, 4 and 8 bits, blocks of 16 to 128, K not a multiple of the block
# (a padded last block), 37 columns (a last tile of 5), with zero points and without; float zero
# points keep the file's layout
LEVEL4_CASES = [(4, 32, "u8", 200, 3), (4, 32, None, 256, 1), (4, 64, "u8", 256, 2), (4, 128, None, 456, 17),
                (8, 32, "u8", 200, 3), (8, 64, None, 256, 20), (2, 32, None, 160, 2), (4, 16, "u8", 96, 5),
                (4, 32, None, 352, 2), (2, 16, "u8", 96, 2), (4, 32, "f32", 200, 3),
                (4, 32, None, 200, 1, 37), (4, 32, "u8", 200, 1, 37), (4, 32, "u8", 256, 2),
                (8, 32, "u8", 200, 1, 37), (4, 64, "u8", 320, 1), (4, 128, None, 456, 1), (4, 32, "u8", 160, 9)]


def _level4_model(rng, level: int):
    """Every LEVEL4_CASES product in one graph (input a{i}, output y{i}) at `level`."""
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for i, (bits, block, zp, k, rows, *cols) in enumerate(LEVEL4_CASES):
        n = cols[0] if cols else 24 + 8 * i
        w = _nbits_inputs(rng, bits, block, float_zp=zp == "f32", zp=zp is not None, k=k, n=n)
        names = [f"a{i}"] + [f"{key}{i}" for key in w]
        nodes.append(helper.make_node("MatMulNBits", names, [f"y{i}"], domain="com.microsoft", K=k, N=n, bits=bits,
                                      block_size=block, accuracy_level=level))
        inputs.append(helper.make_tensor_value_info(f"a{i}", TensorProto.FLOAT, [rows, k]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [rows, n]))
        inits += [numpy_helper.from_array(v, f"{key}{i}") for key, v in w.items()]
        # (a few rows with one large value: its block's other values round to few levels)
        a = rng.standard_normal((rows, k)).astype(np.float32)
        a[0, 3] = 40.0
        feeds[f"a{i}"] = a
    g = helper.make_graph(nodes, "level4", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m, feeds


@pytest.mark.parametrize("target", ["c", "native", "loops", "tiles-plain"])
def test_matmul_nbits_accuracy_level_4(target, tmp_path):
    """At accuracy_level 4 aotc computes what ONNX Runtime's CPU kernel does: where it quantizes
    the activations to int8 blocks, the same quantization (a result 0.3-1% of the output's range
    away from the exact product, asserted so that the exact product cannot pass), else the exact
    product. Four implementations: runtime/aotc_nbits.h's plain C (the c target, built without
    AVX-512), its VNNI product (native, where the CPU has VNNI: every AVX-512 machine CI runs on;
    the weights there relaid by tiles), its plain C over those tiles (c-avx512 built with
    AOTC_NBITS_PLAIN, as a CPU without VNNI runs it) and the kernel loops the GPU targets run (the
    c target with `nbits_kernel = false`)."""
    import aotc
    from aotc.paths import TARGETS_DIR
    from aotc.targets import load_target, runs_here
    rng = np.random.default_rng(4)
    m4, feeds = _level4_model(rng, 4)
    m0, _ = _level4_model(np.random.default_rng(4), 0)
    want4 = ort.InferenceSession(m4.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    want0 = ort.InferenceSession(m0.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    if target == "loops":
        text = (TARGETS_DIR / "c.toml").read_text()
        assert "\nnbits_kernel = true\n" in text
        target = str(tmp_path / "c-loops.toml")
        (tmp_path / "c-loops.toml").write_text(text.replace("\nnbits_kernel = true\n", "\nnbits_kernel = false\n")
                                               .replace('name = "c"', 'name = "c-loops"'))
    elif target == "tiles-plain":
        if not runs_here(load_target("c-avx512")):
            pytest.skip("the tiles are made for AVX-512 builds, which this CPU does not run")
        text = (TARGETS_DIR / "c-avx512.toml").read_text()
        assert 'cflags = ["-std=c99", ' in text
        target = str(tmp_path / "tiles-plain.toml")
        (tmp_path / "tiles-plain.toml").write_text(text.replace('cflags = ["-std=c99", ',
                                                                'cflags = ["-DAOTC_NBITS_PLAIN", "-std=c99", ')
                                                   .replace('name = "c-avx512"', 'name = "tiles-plain"'))
    onnx.save(m4, tmp_path / "m.onnx")
    art = aotc.compile(tmp_path / "m.onnx", target=target, output_dir=tmp_path / "out")
    src = "".join(p.read_text() for p in (tmp_path / "out").glob("*.c"))
    assert ("aotc_nbits_gemm(" in src) == (not target.endswith("c-loops.toml"))
    tiled = runs_here(load_target("c-avx512")) and (target == "native" or target.endswith("tiles-plain.toml"))
    assert ("_tiles_" in src) == tiled
    got = art.run(feeds)
    for (bits, block, zp, k, rows, *_), g, w4, w0 in zip(LEVEL4_CASES, got, want4, want0):
        case = f"{bits} bits, blocks of {block}, zero points {zp}, K {k}, {rows} rows"
        scale = np.abs(w0).max()
        np.testing.assert_allclose(g, w4, rtol=0, atol=2e-6 * scale, err_msg=case)
        int8 = zp != "f32" and (bits != 2 or block >= 32)
        assert (np.abs(w4 - w0).max() > 1e-3 * scale) == int8, case


@pytest.mark.parametrize("bits,symmetric,block,k,rows", [
    (4, True, 32, 200, 3), (4, False, 32, 200, 3), (4, True, 128, 200, 3), (4, False, 128, 456, 3),
    (8, True, 32, 200, 3), (8, False, 128, 200, 3), (2, False, 32, 200, 3), (4, False, 32, 256, 3),
    (4, False, 32, 200, 9), (8, True, 128, 456, 9), (2, True, 32, 256, 9), (4, False, 32, 1024, 9)])
def test_matmul_nbits_reads_packed_weights(bits, symmetric, block, k, rows, tmp_path):
    """aotc.MatMulNBits: the weights stay packed in the artifact and are unpacked in the
    kernel's inner loop (2 x 3 rows of A), or a tile at a time for a GEMM (2 x 9 rows, N = 100:
    a tile of 64 and one of 36); its output is ONNX Runtime's at accuracy_level 0 (the exact
    dequantize-then-float product), K a multiple of the block or not (200 = 6 x 32 + 8,
    456 = 3 x 128 + 72; 1024: the tile's rows padded off a 4 KB stride), and a bias."""
    import json

    import aotc
    n, rng = 40 if rows == 3 else 100, np.random.default_rng(bits * 100 + block + k)
    inits = {**_nbits_inputs(rng, bits, block, zp=not symmetric, k=k, n=n),
             "bias": rng.standard_normal(n).astype(np.float32)}
    a = rng.standard_normal((2, rows, k)).astype(np.float32)
    m = contrib_model("MatMulNBits", {"a": a}, inits, order=["a", "B", "scales", "zp" if not symmetric else "", "",
                                                          "bias"],
                      K=k, N=n, bits=bits, block_size=block, accuracy_level=0)
    onnx.save(m, tmp_path / "m.onnx")
    compiled = aotc.compile(tmp_path / "m.onnx", target="c", output_dir=tmp_path / "out")
    got, = compiled.run({"a": a})
    want, = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})
    assert np.abs(want).max() > 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [kk["nodes"].split()[0] for kk in manifest["kernels"]] == ["aotc.MatMulNBits"], manifest["kernels"]
    # the packed bytes, the scales, the packed zero points and the bias, nothing more (each
    # constant starts on a 64-byte line: a little padding)
    packed = sum(v.nbytes for v in inits.values())
    assert packed <= manifest["weights"]["bytes"] <= packed + 64 * len(inits)


@pytest.mark.parametrize("bits,block,symmetric,ratio", [(4, 32, False, 6), (4, 128, True, 7.4), (8, 128, True, 3.8)])
def test_matmul_nbits_weights_stay_small(bits, block, symmetric, ratio, tmp_path):
    """The artifact's weights against the float32 weights the graph rewrite folded (K = N =
    512): 4 bits in blocks of 128 take about 1/7.5 of float32's bytes (1/6.4 with blocks of 32
    and zero points), 8 bits about 1/3.9."""
    import json

    import aotc
    k = n = 512
    inits = _nbits_inputs(np.random.default_rng(0), bits, block, zp=not symmetric, k=k, n=n)
    a = np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)
    m = contrib_model("MatMulNBits", {"a": a}, inits, order=["a", "B", "scales"] + (["zp"] if not symmetric else []),
                      K=k, N=n, bits=bits, block_size=block)
    onnx.save(m, tmp_path / "m.onnx")
    aotc.compile(tmp_path / "m.onnx", target="c", output_dir=tmp_path / "out")
    weights = json.loads((tmp_path / "out" / "manifest.json").read_text())["weights"]["bytes"]
    assert k * n * 4 / weights >= ratio, (weights, k * n * 4 / weights)


@pytest.mark.parametrize("level", [0, 4])
def test_matmul_nbits_packed_on_emulated_cuda(level, tmp_path):
    """The packed-weight kernel as the cuda target prints it (its loops on the GPU schedule,
    the per-output lanes as per-thread scratch; at accuracy_level 4 the int8-activation loops),
    built against tests/cuda_emu (the GPU itself with AOTC_TEST_ON_GPU=1), against ONNX
    Runtime."""
    from tests.test_cuda_emulated import CXX, _parity
    if CXX is None:
        pytest.skip("g++ is not installed")
    rng = np.random.default_rng(11)
    inits = _nbits_inputs(rng, 4, 32, k=200, n=40)
    m = contrib_model("MatMulNBits", {"a": np.zeros((3, 200), np.float32)}, inits, order=["a", "B", "scales", "zp"],
                      K=200, N=40, bits=4, block_size=32, accuracy_level=level)
    src = _parity(m, tmp_path, "cuda", rtol=1e-5, atol=1e-4)
    assert "aotc.MatMulNBits" in src and ("qa[" in src) == (level == 4)


@pytest.mark.parametrize("bits,zp", [(4, True), (4, False), (8, True)])
def test_gather_block_quantized_reads_packed_table(bits, zp, tmp_path):
    """aotc.GatherBlockQuantized: ONNX Runtime's uint8 table (onnxruntime-genai's quantized
    embeddings) stays packed in the artifact, its gathered rows dequantized in the kernel,
    negative indices counting from the end as in ONNX Runtime; an index out of range is the
    run's error, not a read outside the table."""
    import json

    import aotc
    rng = np.random.default_rng(bits)
    rows, cols, block = 300, 256, 32
    q = rng.integers(0, 1 << bits, (rows, cols))
    inits = {"data": _pack(q, bits), "scales": rng.uniform(0.01, 0.1, (rows, cols // block)).astype(np.float32)}
    order = ["data", "ids", "scales"]
    if zp:
        inits["zp"] = _pack(rng.integers(0, 1 << bits, (rows, cols // block)), bits)
        order.append("zp")
    ids = rng.integers(-rows, rows, (2, 7)).astype(np.int64)
    m = contrib_model("GatherBlockQuantized", {"ids": ids}, inits, order=order, gather_axis=0, quantize_axis=1,
                      block_size=block, bits=bits, onnx_opset=21)
    onnx.save(m, tmp_path / "m.onnx")
    compiled = aotc.compile(tmp_path / "m.onnx", target="c", output_dir=tmp_path / "out")
    got, = compiled.run({"ids": ids})
    want, = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})
    assert np.abs(want).max() > 0.1
    np.testing.assert_array_equal(got, want)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [k["nodes"].split()[0] for k in manifest["kernels"]] == ["aotc.GatherBlockQuantized"]
    packed = sum(v.nbytes for v in inits.values())
    assert packed <= manifest["weights"]["bytes"] <= packed + 64 * len(inits)
    with pytest.raises(Exception, match="(?i)index"):
        compiled.run({"ids": np.full((2, 7), rows, np.int64)})
