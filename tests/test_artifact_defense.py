"""The artifact defends itself (issue 7, item 4).

- `<name>_create` checks the external weights file: a missing, shorter or longer file is
  AOTC_ERR_WEIGHTS_FILE (5), one of the right size with a damaged byte AOTC_ERR_WEIGHTS_CHECKSUM
  (15, a CRC-32 compiled into the source and recorded in the manifest); `aotc.load` turns each
  into an ArtifactError that says which; a good file runs and matches ONNX Runtime.
- NULL and misaligned pointers give a status on every entry point (run, run_with_weights,
  invoke), on the C and OpenCL targets.
- No generated source and no runtime header calls abort()/exit()/assert() or prints.
"""
from __future__ import annotations

import json
import re
import shutil
import zlib
from pathlib import Path

import cffi
import numpy as np
import onnx
import pytest
from onnx import helper

import aotc
from aotc.codegen import abi, get_backend
from aotc.compiler import compile_program
from aotc.errors import ArtifactError
from aotc.paths import RUNTIME_DIR
from models.zoo import ZOO
from tests.helpers import assert_parity, graph_model, rand
from tests.test_opencl import _opencl_missing

N = helper.make_node
OK, NULL_ARGUMENT, MISALIGNED, NO_WEIGHTS, WEIGHTS_FILE, NOT_SUPPORTED, WEIGHTS_CHECKSUM = 0, 1, 2, 3, 5, 9, 15
X = rand(4, 32, seed=71)

TARGETS = ["native", pytest.param("opencl", marks=pytest.mark.skipif(
    _opencl_missing() is not None, reason=str(_opencl_missing())))]


def _model() -> onnx.ModelProto:
    """Two products with a ReLU between: the hidden activation lives in the workspace."""
    return graph_model([N("MatMul", ["x", "w1"], ["h"]), N("Add", ["h", "b1"], ["a"]), N("Relu", ["a"], ["r"]),
                        N("MatMul", ["r", "w2"], ["z"]), N("Sigmoid", ["z"], ["y"])], {"x": X}, ["y"],
                       {"w1": rand(32, 48, seed=72), "b1": rand(48, seed=73), "w2": rand(48, 8, seed=74)})


@pytest.fixture(scope="module", params=TARGETS)
def artifact(request, tmp_path_factory):
    """(target, artifact directory) compiled with external weights; the compile itself is
    checked against ONNX Runtime (the good file works)."""
    d = tmp_path_factory.mktemp(f"defense_{request.param}")
    assert_parity(_model(), d, {"x": X}, target=request.param, weights="external")
    return request.param, d / "out"


def _raw_api(directory: Path):
    """The library through cffi with every entry point (the loader declares only the instance API)."""
    m = json.loads((directory / "manifest.json").read_text())
    p = m["name"]
    ffi = cffi.FFI()
    ffi.cdef(f"""
        typedef struct {{ const float *x; }} {p}_inputs;
        typedef struct {{ float *y; }} {p}_outputs;
        typedef struct {p}_model {p}_model;
        int {p}_create(const char *weights_path, {p}_model **model);
        int {p}_invoke({p}_model *model, const {p}_inputs *in, {p}_outputs *out);
        void {p}_destroy({p}_model *model);
        int {p}_run(const {p}_inputs *in, {p}_outputs *out, void *workspace);
        int {p}_run_with_weights(const void *weights, const {p}_inputs *in, {p}_outputs *out, void *workspace);
        const char *{p}_strerror(int status);
    """)
    return ffi, ffi.dlopen(str(directory / m["library"])), p, m


def _create_status(directory: Path, weights_path: Path | None) -> tuple[int, str]:
    ffi, lib, p, _ = _raw_api(directory)
    model = ffi.new(f"{p}_model **")
    status = getattr(lib, f"{p}_create")(str(weights_path).encode() if weights_path else ffi.NULL, model)
    if status == OK:
        getattr(lib, f"{p}_destroy")(model[0])
    else:
        assert model[0] == ffi.NULL
    return status, ffi.string(getattr(lib, f"{p}_strerror")(status)).decode()


def test_checksum_is_in_the_manifest_and_the_source(artifact):
    target, out = artifact
    m = json.loads((out / "manifest.json").read_text())
    blob = (out / m["weights"]["file"]).read_bytes()
    assert m["weights"]["mode"] == "external" and m["weights"]["bytes"] == len(blob)
    assert m["weights"]["crc32"] == f"{zlib.crc32(blob):08x}"
    assert f"#define MODEL_WEIGHTS_CRC32 0x{m['weights']['crc32']}u" in (out / "model.h").read_text()
    assert _create_status(out, out / m["weights"]["file"]) == (OK, "ok")


def _damaged(blob: bytes, how: str) -> bytes | None:
    if how == "truncated":
        return blob[:len(blob) // 2]
    if how == "one byte short":
        return blob[:-1]
    if how == "one byte longer":
        return blob + b"\0"
    if how == "flipped byte":
        mid = len(blob) // 2
        return blob[:mid] + bytes([blob[mid] ^ 0x10]) + blob[mid + 1:]
    if how == "swapped words":          # the same bytes, two 4-byte words exchanged: only the CRC sees it
        return blob[:8] + blob[12:16] + blob[8:12] + blob[16:]
    return None                         # missing


CASES = [("missing", WEIGHTS_FILE, "is missing"),
         ("truncated", WEIGHTS_FILE, "has the wrong size"),
         ("one byte short", WEIGHTS_FILE, "has the wrong size"),
         ("one byte longer", WEIGHTS_FILE, "has the wrong size"),
         ("flipped byte", WEIGHTS_CHECKSUM, "is corrupted: its CRC-32 is"),
         ("swapped words", WEIGHTS_CHECKSUM, "is corrupted: its CRC-32 is")]


@pytest.mark.parametrize("how,status,message", CASES, ids=[c[0] for c in CASES])
def test_a_bad_weights_file_is_a_status_and_a_clear_error(artifact, tmp_path, how, status, message):
    target, out = artifact
    blob = (out / "model.weights").read_bytes()
    bad = _damaged(blob, how)
    # the C API: create returns the status and leaves *model NULL
    path = tmp_path / "model.weights"
    if bad is not None:
        path.write_bytes(bad)
    got, text = _create_status(out, path)
    assert got == status, (how, got, text)
    assert text.startswith("weights file missing" if status == WEIGHTS_FILE else "weights file corrupted"), text
    # the Python API: the same artifact with the bad file in its place
    copy = tmp_path / "artifact"
    shutil.copytree(out, copy)
    (copy / "model.weights").unlink()
    if bad is not None:
        (copy / "model.weights").write_bytes(bad)
    with pytest.raises(ArtifactError, match=f"model_create failed with status {status}: weights file .*{message}") as e:
        aotc.load(copy)
    assert "model.weights" in str(e.value) and "compile" in e.value.hint
    # put the good bytes back: it works again
    (copy / "model.weights").write_bytes(blob)
    (y,) = aotc.load(copy).run([X])
    (want,) = aotc.load(out).run([X])
    np.testing.assert_array_equal(y, want)


def test_a_directory_or_null_path_is_a_status(artifact, tmp_path):
    target, out = artifact
    assert _create_status(out, tmp_path)[0] == WEIGHTS_FILE
    assert _create_status(out, None)[0] == NULL_ARGUMENT


def _aligned(nbytes: int, align: int = 64) -> tuple[np.ndarray, int]:
    buf = np.zeros(nbytes + 2 * align, dtype=np.uint8)
    return buf, (-buf.ctypes.data) % align


def test_null_and_misaligned_pointers_are_statuses_on_every_entry_point(artifact):
    target, out = artifact
    ffi, lib, p, m = _raw_api(out)
    run, run_w = getattr(lib, f"{p}_run"), getattr(lib, f"{p}_run_with_weights")
    invoke = getattr(lib, f"{p}_invoke")
    x = np.ascontiguousarray(X)
    y = np.zeros((4, 8), np.float32)
    cin, cout = ffi.new(f"{p}_inputs *"), ffi.new(f"{p}_outputs *")
    cin.x, cout.y = ffi.cast("const float *", ffi.from_buffer(x)), ffi.cast("float *", ffi.from_buffer(y))
    null_in, null_out = ffi.new(f"{p}_inputs *"), ffi.new(f"{p}_outputs *")   # fields NULL
    blob = (out / "model.weights").read_bytes()
    wbuf, woff = _aligned(len(blob))
    wbuf[woff:woff + len(blob)] = np.frombuffer(blob, np.uint8)
    ws_bytes = m["workspace_bytes"]
    wsbuf, wsoff = _aligned(ws_bytes, m["workspace_alignment"])
    w = ffi.cast("char *", ffi.from_buffer(wbuf)) + woff
    ws = ffi.cast("char *", ffi.from_buffer(wsbuf)) + wsoff
    NULL = ffi.NULL

    if target == "native":
        assert ws_bytes > 0
        assert run(cin, cout, ws) == NO_WEIGHTS       # external weights: run cannot have them
        assert run_w(w, cin, cout, ws) == OK
        np.testing.assert_allclose(y, aotc.load(out).run([X])[0], rtol=1e-6, atol=1e-7)
        for args in ((NULL, cin, cout, ws), (w, NULL, cout, ws), (w, cin, NULL, ws), (w, cin, cout, NULL),
                     (w, null_in, cout, ws), (w, cin, null_out, ws)):
            assert run_w(*args) == NULL_ARGUMENT, args
        for args in ((w + 4, cin, cout, ws), (w + 1, cin, cout, ws), (w, cin, cout, ws + 8), (w, cin, cout, ws + 1)):
            assert run_w(*args) == MISALIGNED, args
    else:                                             # GPU targets: only the instance API runs
        assert run(cin, cout, ws) == NOT_SUPPORTED
        assert run_w(w, cin, cout, ws) == NOT_SUPPORTED

    model = ffi.new(f"{p}_model **")
    assert getattr(lib, f"{p}_create")(str(out / "model.weights").encode(), model) == OK
    try:
        for args in ((NULL, cin, cout), (model[0], NULL, cout), (model[0], cin, NULL),
                     (model[0], null_in, cout), (model[0], cin, null_out)):
            assert invoke(*args) == NULL_ARGUMENT, args
        y[...] = 0
        assert invoke(model[0], cin, cout) == OK
        np.testing.assert_allclose(y, aotc.load(out).run([X])[0], rtol=1e-6, atol=1e-7)
    finally:
        getattr(lib, f"{p}_destroy")(model[0])
    getattr(lib, f"{p}_destroy")(NULL)               # destroying NULL is a no-op


def test_embedded_weights_run_checks_its_pointers(tmp_path):
    assert_parity(_model(), tmp_path, {"x": X}, weights="embed")
    ffi, lib, p, m = _raw_api(tmp_path / "out")
    run = getattr(lib, f"{p}_run")
    x, y = np.ascontiguousarray(X), np.zeros((4, 8), np.float32)
    cin, cout = ffi.new(f"{p}_inputs *"), ffi.new(f"{p}_outputs *")
    cin.x, cout.y = ffi.cast("const float *", ffi.from_buffer(x)), ffi.cast("float *", ffi.from_buffer(y))
    wsbuf, wsoff = _aligned(m["workspace_bytes"], m["workspace_alignment"])
    ws = ffi.cast("char *", ffi.from_buffer(wsbuf)) + wsoff
    assert run(cin, cout, ws) == OK
    assert run(ffi.NULL, cout, ws) == NULL_ARGUMENT and run(cin, ffi.NULL, ws) == NULL_ARGUMENT
    assert run(cin, cout, ffi.NULL) == NULL_ARGUMENT
    assert run(cin, cout, ws + 32) == MISALIGNED


# --- nothing in the artifact stops the process or prints ------------------------------------

FORBIDDEN = re.compile(r"\b(abort|exit|_exit|_Exit|quick_exit|assert|perror|printf|fprintf|vprintf|vfprintf|"
                       r"puts|putchar|__trap|__builtin_trap|__assertfail)\s*\(|\b(stderr|stdout)\b")


def _code_only(text: str) -> str:
    """C/C++/OpenCL source without comments and string literals (node names may say anything)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def _offences(name: str, text: str) -> list[str]:
    return [f"{name}: {mt.group(0)}" for mt in FORBIDDEN.finditer(_code_only(text))]


def test_the_pattern_finds_what_it_should():
    assert _offences("t.c", 'int f(void) { if (x) abort(); fprintf(stderr, "no"); exit (1); assert(0); }') == \
        ["t.c: abort(", "t.c: fprintf(", "t.c: stderr", "t.c: exit (", "t.c: assert("]
    assert _offences("t.c", '/* never abort() */ snprintf(b, 4, "exit(1)"); // printf(\n') == []


def test_runtime_headers_never_stop_the_process_or_print():
    headers = sorted(RUNTIME_DIR.glob("*.h"))
    assert any(h.name == "aotc_support.h" for h in headers)
    bad = [o for h in headers for o in _offences(h.name, h.read_text())]
    assert not bad, bad


@pytest.mark.parametrize("name", ["mlp", "lenet5", "lstm", "gpt2"])
def test_generated_sources_never_stop_the_process_or_print(name, tmp_path):
    """Every target's sources (no toolchain needed: printed, not built), embedded and external."""
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    bad = []
    for target in ["c", "native", "cuda", "opencl"]:
        c = compile_program(path, target, name, e.shapes_for("small"))
        backend = get_backend(c.target.language)
        for external in (False, True):
            files = backend.sources(name, c.graph, c.program, c.plan, external, c.target, c.threads)
            files[f"{name}.h"] = abi.emit_header(name, c.graph, c.plan, external, c.threads, c.target,
                                                 zlib.crc32(abi.weights_blob(c.graph, c.plan)))
            assert any(f.endswith((".c", ".cu")) for f in files)
            if external:
                assert f"{name.upper()}_WEIGHTS_CRC32" in "".join(files.values())
            bad += [o for f, text in files.items() for o in _offences(f"{target}/{f}", text)]
    assert not bad, bad
