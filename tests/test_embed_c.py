"""Embedding the artifact in a plain C program: no Python at run time.

Each test writes a C99 program, builds it with `cc -std=c99 -Wall -Werror -pthread` against
lib<name>.so, runs it on inputs from binary files and compares what it writes with ONNX
Runtime's answer.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aotc.compiler import compile_model
from models.zoo import ZOO
from tests.helpers import rand

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")   # aotc itself needs one too

BATCH = 4


def ort_run(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def build(tmp_path: Path, source: str, libs: list[tuple[Path, str]], name: str = "prog") -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    exe = tmp_path / name
    cmd = [CC, "-std=c99", "-Wall", "-Werror", "-pthread", str(src), "-o", str(exe)]
    for d, lib in libs:
        cmd += [f"-I{d}", f"-L{d}", f"-l{lib}", f"-Wl,-rpath,{d.resolve()}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"cc failed:\n{p.stderr}"
    return exe


def run(exe: Path, *args) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, f"{exe.name} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def mlp_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("embed")
    path = d / "mlp.onnx"
    onnx.save(ZOO["mlp"].build("small"), str(path))
    return path


def compile_mlp(path, out: Path, **kw) -> Path:
    return compile_model(path, output_dir=out, shapes={"x": (BATCH, 64)}, **kw)


IO_HELPERS = r"""
static int read_floats(const char *path, float *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    size_t got;
    if (!f) return 0;
    got = fread(buf, sizeof(float), n, f);
    fclose(f);
    return got == n;
}

static int write_floats(const char *path, const float *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    size_t put;
    if (!f) return 0;
    put = fwrite(buf, sizeof(float), n, f);
    return fclose(f) == 0 && put == n;
}
"""

THREADS_C = r"""
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mlp.h"

#define X_ELEMS %(x_elems)d
#define Y_ELEMS %(y_elems)d
#define REPEATS 300
%(io)s
typedef struct {
    const char *in_path;
    const char *out_path;
    int ok;
} job;

static void *worker(void *arg)
{
    job *j = (job *)arg;
    float *x = (float *)malloc(X_ELEMS * sizeof(float));
    float *y = (float *)malloc(Y_ELEMS * sizeof(float));
    float *first = (float *)malloc(Y_ELEMS * sizeof(float));
    void *ws = NULL;
    int r;
    j->ok = 0;
    if (!x || !y || !first || !read_floats(j->in_path, x, X_ELEMS))
        return NULL;
    /* this thread's own workspace */
    if (posix_memalign(&ws, MLP_WORKSPACE_ALIGN, MLP_WORKSPACE_BYTES ? MLP_WORKSPACE_BYTES : 1) != 0)
        return NULL;
    for (r = 0; r < REPEATS; ++r) {
        mlp_inputs in;
        mlp_outputs out;
        int status;
        in.x = x;
        out.logits = y;
        status = mlp_run(&in, &out, ws);
        if (status != AOTC_OK) {
            fprintf(stderr, "run failed: %%s\n", mlp_strerror(status));
            return NULL;
        }
        if (r == 0)
            memcpy(first, y, Y_ELEMS * sizeof(float));
        else if (memcmp(first, y, Y_ELEMS * sizeof(float)) != 0) {
            fprintf(stderr, "result changed between runs (shared state?)\n");
            return NULL;
        }
    }
    j->ok = write_floats(j->out_path, y, Y_ELEMS);
    free(ws); free(x); free(y); free(first);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    job jobs[2];
    int k;
    if (argc != 5) return 2;
    for (k = 0; k < 2; ++k) {
        jobs[k].in_path = argv[1 + 2 * k];
        jobs[k].out_path = argv[2 + 2 * k];
        if (pthread_create(&t[k], NULL, worker, &jobs[k]) != 0) return 3;
    }
    for (k = 0; k < 2; ++k)
        pthread_join(t[k], NULL);
    printf("threads ok: %%d %%d\n", jobs[0].ok, jobs[1].ok);
    return jobs[0].ok && jobs[1].ok ? 0 : 1;
}
"""


def test_two_threads_with_their_own_workspaces(mlp_model, tmp_path):
    out = compile_mlp(mlp_model, tmp_path / "out")
    x1, x2 = rand(BATCH, 64, seed=31), rand(BATCH, 64, seed=32)
    x1.tofile(tmp_path / "x1.bin")
    x2.tofile(tmp_path / "x2.bin")
    exe = build(tmp_path, THREADS_C % {"x_elems": x1.size, "y_elems": BATCH * 10, "io": IO_HELPERS}, [(out, "mlp")])
    stdout = run(exe, tmp_path / "x1.bin", tmp_path / "y1.bin", tmp_path / "x2.bin", tmp_path / "y2.bin")
    assert "threads ok: 1 1" in stdout
    for x, yf in ((x1, "y1.bin"), (x2, "y2.bin")):
        got = np.fromfile(tmp_path / yf, dtype=np.float32).reshape(BATCH, 10)
        (want,) = ort_run(mlp_model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    y1 = np.fromfile(tmp_path / "y1.bin", dtype=np.float32)
    y2 = np.fromfile(tmp_path / "y2.bin", dtype=np.float32)
    assert not np.allclose(y1, y2), "different inputs must give different outputs"


POOL_C = r"""
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mlp.h"

#define X_ELEMS %(x_elems)d
#define Y_ELEMS %(y_elems)d
#define REPEATS 200
%(io)s
typedef struct {
    const char *in_path, *out_path;
    int use_pool;           /* 1: an instance with a 2-thread pool; 0: mlp_run on this thread */
    int ok, threads;
} job;

static void *worker(void *arg)
{
    job *j = (job *)arg;
    static const aotc_options two = { 2, 0, 0 };
    float *x = (float *)malloc(X_ELEMS * sizeof(float)), *y = (float *)malloc(Y_ELEMS * sizeof(float));
    float *first = (float *)malloc(Y_ELEMS * sizeof(float));
    mlp_model *model = NULL;
    void *ws = NULL;
    int r, status;
    j->ok = 0;
    if (!x || !y || !first || !read_floats(j->in_path, x, X_ELEMS))
        return NULL;
    if (j->use_pool) {
        status = mlp_create_with_options(NULL, &two, &model);
        if (status != AOTC_OK) { fprintf(stderr, "create: %%s\n", mlp_strerror(status)); return NULL; }
        j->threads = mlp_threads(model);
    } else if (posix_memalign(&ws, MLP_WORKSPACE_ALIGN, MLP_WORKSPACE_BYTES) != 0) {
        return NULL;
    }
    for (r = 0; r < REPEATS; ++r) {
        mlp_inputs in;
        mlp_outputs out;
        in.x = x;
        out.logits = y;
        status = j->use_pool ? mlp_invoke(model, &in, &out) : mlp_run(&in, &out, ws);
        if (status != AOTC_OK) { fprintf(stderr, "run: %%s\n", mlp_strerror(status)); return NULL; }
        if (r == 0)
            memcpy(first, y, Y_ELEMS * sizeof(float));
        else if (memcmp(first, y, Y_ELEMS * sizeof(float)) != 0) {
            fprintf(stderr, "result changed between runs\n");
            return NULL;
        }
    }
    j->ok = write_floats(j->out_path, y, Y_ELEMS);
    mlp_destroy(model);
    free(ws); free(x); free(y); free(first);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[3];
    job jobs[3];
    int k;
    if (argc != 7) return 2;
    for (k = 0; k < 3; ++k) {
        jobs[k].in_path = argv[1 + 2 * k];
        jobs[k].out_path = argv[2 + 2 * k];
        jobs[k].use_pool = k < 2;
        jobs[k].threads = 0;
        if (pthread_create(&t[k], NULL, worker, &jobs[k]) != 0) return 3;
    }
    for (k = 0; k < 3; ++k)
        pthread_join(t[k], NULL);
    printf("ok: %%d %%d %%d threads: %%d %%d\n", jobs[0].ok, jobs[1].ok, jobs[2].ok, jobs[0].threads, jobs[1].threads);
    return jobs[0].ok && jobs[1].ok && jobs[2].ok ? 0 : 1;
}
"""


def test_multithreaded_instances_next_to_other_threads(mlp_model, tmp_path):
    """Two model instances, each with its own 2-thread pool and every loop and GEMM on it, run
    at the same time as a third thread calling mlp_run with its own workspace: all three give
    ONNX Runtime's answer, every time."""
    from tests.helpers import eager_threads_target
    out = compile_mlp(mlp_model, tmp_path / "out", target=eager_threads_target(tmp_path), threads=2)
    src = (out / "mlp.c").read_text()
    assert src.count("aotc_sgemm(pool") == 3, "every GEMM (and its epilogue) should be split over the pool"
    xs = [rand(BATCH, 64, seed=41 + k) for k in range(3)]
    args = []
    for k, x in enumerate(xs):
        x.tofile(tmp_path / f"x{k}.bin")
        args += [tmp_path / f"x{k}.bin", tmp_path / f"y{k}.bin"]
    exe = build(tmp_path, POOL_C % {"x_elems": xs[0].size, "y_elems": BATCH * 10, "io": IO_HELPERS}, [(out, "mlp")])
    stdout = run(exe, *args)
    assert "ok: 1 1 1 threads: 2 2" in stdout, stdout
    for k, x in enumerate(xs):
        got = np.fromfile(tmp_path / f"y{k}.bin", dtype=np.float32).reshape(BATCH, 10)
        (want,) = ort_run(mlp_model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


CONVENIENCE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mlp.h"

#define X_ELEMS %(x_elems)d
#define Y_ELEMS %(y_elems)d
%(io)s
int main(int argc, char **argv)
{
    static float x[X_ELEMS], y[Y_ELEMS];
    mlp_model *model = NULL;
    mlp_inputs in;
    mlp_outputs out;
    int status;
    if (argc != 4) return 2;
    if (!read_floats(argv[2], x, X_ELEMS)) return 3;
    status = mlp_create(strcmp(argv[1], "-") ? argv[1] : NULL, &model);
    if (status != AOTC_OK) { fprintf(stderr, "create: %%s\n", mlp_strerror(status)); return 4; }
    in.x = x;
    out.logits = y;
    status = mlp_invoke(model, &in, &out);
    if (status != AOTC_OK) { fprintf(stderr, "run: %%s\n", mlp_strerror(status)); return 5; }
    /* a second run on the same instance gives the same answer */
    {
        static float y2[Y_ELEMS];
        out.logits = y2;
        if (mlp_invoke(model, &in, &out) != AOTC_OK || memcmp(y, y2, sizeof y) != 0) return 6;
    }
    mlp_destroy(model);
    mlp_destroy(NULL);
    if (!write_floats(argv[3], y, Y_ELEMS)) return 7;
    printf("weights external: %%d\n", MLP_WEIGHTS_EXTERNAL);
    return 0;
}
"""


@pytest.mark.parametrize("weights", ["embed", "external"])
def test_create_invoke_destroy(weights, mlp_model, tmp_path):
    out = compile_mlp(mlp_model, tmp_path / "out", weights=weights)
    assert (out / "mlp.weights").is_file() == (weights == "external")
    assert (out / "mlp_weights.c").is_file() == (weights == "embed")
    x = rand(BATCH, 64, seed=33)
    x.tofile(tmp_path / "x.bin")
    exe = build(tmp_path, CONVENIENCE_C % {"x_elems": x.size, "y_elems": BATCH * 10, "io": IO_HELPERS},
                [(out, "mlp")])
    wpath = str(out / "mlp.weights") if weights == "external" else "-"
    stdout = run(exe, wpath, tmp_path / "x.bin", tmp_path / "y.bin")
    assert f"weights external: {int(weights == 'external')}" in stdout
    got = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(BATCH, 10)
    np.testing.assert_allclose(got, ort_run(mlp_model, {"x": x})[0], rtol=1e-4, atol=1e-5)


ERRORS_C = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

#define X_ELEMS %(x_elems)d
#define Y_ELEMS %(y_elems)d

static void report(const char *what, int status)
{
    printf("%%s: %%d %%s\n", what, status, mlp_strerror(status));
}

int main(void)
{
    static float x[X_ELEMS], y[Y_ELEMS];
    unsigned char *ws = NULL;
    mlp_inputs in;
    mlp_outputs out;
    int k;
    for (k = 0; k < X_ELEMS; ++k) x[k] = (float)k / X_ELEMS;
    if (posix_memalign((void **)&ws, 64, MLP_WORKSPACE_BYTES + 64) != 0) return 2;
    in.x = x;
    out.logits = y;
    report("ok", mlp_run(&in, &out, ws));
    report("null_inputs", mlp_run(NULL, &out, ws));
    report("null_outputs", mlp_run(&in, NULL, ws));
    report("null_workspace", mlp_run(&in, &out, NULL));
    in.x = NULL;
    report("null_input_field", mlp_run(&in, &out, ws));
    in.x = x;
    out.logits = NULL;
    report("null_output_field", mlp_run(&in, &out, ws));
    out.logits = y;
    report("misaligned", mlp_run(&in, &out, ws + 1));
    report("null_model_arg", mlp_create(NULL, NULL));
    report("null_model", mlp_invoke(NULL, &in, &out));
    report("unknown", 12345);
    free(ws);
    return 0;
}
"""


def test_null_arguments_give_status_codes_and_strerror_text(mlp_model, tmp_path):
    out = compile_mlp(mlp_model, tmp_path / "out")
    exe = build(tmp_path, ERRORS_C % {"x_elems": BATCH * 64, "y_elems": BATCH * 10}, [(out, "mlp")])
    lines = dict(ln.split(": ", 1) for ln in run(exe).splitlines())
    assert lines["ok"] == "0 ok"
    for k in ["null_inputs", "null_outputs", "null_workspace", "null_input_field", "null_output_field",
              "null_model_arg", "null_model"]:
        assert lines[k] == "1 a required pointer argument is NULL", (k, lines[k])
    assert lines["misaligned"] == "2 workspace or weights pointer is misaligned"
    assert lines["unknown"] == "12345 unknown status code"


EXTERNAL_C = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

#define X_ELEMS %(x_elems)d
#define Y_ELEMS %(y_elems)d
%(io)s
static void report(const char *what, int status)
{
    printf("%%s: %%d %%s\n", what, status, mlp_strerror(status));
}

int main(int argc, char **argv)
{
    static float x[X_ELEMS], y[Y_ELEMS];
    void *ws = NULL, *weights = NULL;
    mlp_model *model = NULL;
    mlp_inputs in;
    mlp_outputs out;
    FILE *f;
    if (argc != 6) return 2;
    if (!read_floats(argv[4], x, X_ELEMS)) return 3;
    if (posix_memalign(&ws, MLP_WORKSPACE_ALIGN, MLP_WORKSPACE_BYTES + 1) != 0) return 4;
    in.x = x;
    out.logits = y;
    report("run_without_weights", mlp_run(&in, &out, ws));
    report("create_null_path", mlp_create(NULL, &model));
    report("create_missing", mlp_create("/nonexistent/mlp.weights", &model));
    report("create_short", mlp_create(argv[2], &model));
    report("create_long", mlp_create(argv[3], &model));
    printf("model_after_failures: %%s\n", model == NULL ? "NULL" : "set");
    /* the caller loads the blob itself (it could mmap it) and passes it in */
    if (posix_memalign(&weights, 64, MLP_WEIGHTS_BYTES) != 0) return 5;
    f = fopen(argv[1], "rb");
    if (!f || fread(weights, 1, MLP_WEIGHTS_BYTES, f) != MLP_WEIGHTS_BYTES) return 6;
    fclose(f);
    report("run_with_weights", mlp_run_with_weights(weights, &in, &out, ws));
    report("run_with_null_weights", mlp_run_with_weights(NULL, &in, &out, ws));
    if (!write_floats(argv[5], y, Y_ELEMS)) return 7;
    free(weights);
    free(ws);
    return 0;
}
"""


def test_external_weights_file_errors_and_caller_loaded_weights(mlp_model, tmp_path):
    out = compile_mlp(mlp_model, tmp_path / "out", weights="external")
    blob = (out / "mlp.weights").read_bytes()
    (tmp_path / "short.weights").write_bytes(blob[:-8])
    (tmp_path / "long.weights").write_bytes(blob + b"\0")
    x = rand(BATCH, 64, seed=36)
    x.tofile(tmp_path / "x.bin")
    exe = build(tmp_path, EXTERNAL_C % {"x_elems": x.size, "y_elems": BATCH * 10, "io": IO_HELPERS},
                [(out, "mlp")])
    lines = dict(ln.split(": ", 1) for ln in run(exe, out / "mlp.weights", tmp_path / "short.weights",
                                                  tmp_path / "long.weights", tmp_path / "x.bin",
                                                  tmp_path / "y.bin").splitlines())
    assert lines["run_without_weights"].startswith("3 ") and "external weights" in lines["run_without_weights"]
    assert lines["create_null_path"] == "1 a required pointer argument is NULL"
    for k in ("create_missing", "create_short", "create_long"):
        assert lines[k].startswith("5 weights file missing"), (k, lines[k])
    assert lines["model_after_failures"] == "NULL"
    assert lines["run_with_weights"] == "0 ok"
    assert lines["run_with_null_weights"].startswith("1 ")
    got = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(BATCH, 10)
    np.testing.assert_allclose(got, ort_run(mlp_model, {"x": x})[0], rtol=1e-4, atol=1e-5)


TWO_MODELS_C = r"""
#include <stdio.h>
#include "net_a.h"
#include "net_b.h"

#define XA %(xa)d
#define YA %(ya)d
#define XB %(xb)d
#define YB %(yb)d
%(io)s
int main(int argc, char **argv)
{
    static float xa[XA], ya[YA], xb[XB], yb[YB];
    net_a_model *a;
    net_b_model *b;
    net_a_inputs ia;
    net_a_outputs oa;
    net_b_inputs ib;
    net_b_outputs ob;
    if (argc != 5) return 2;
    if (!read_floats(argv[1], xa, XA) || !read_floats(argv[2], xb, XB)) return 3;
    if (net_a_create(NULL, &a) != AOTC_OK || net_b_create(NULL, &b) != AOTC_OK) return 4;
    ia.x = xa;
    oa.logits = ya;
    ib.%(b_in)s = xb;
    ob.%(b_out)s = yb;
    if (net_a_invoke(a, &ia, &oa) != AOTC_OK) return 5;
    if (net_b_invoke(b, &ib, &ob) != AOTC_OK) return 6;
    net_a_destroy(a);
    net_b_destroy(b);
    if (!write_floats(argv[3], ya, YA) || !write_floats(argv[4], yb, YB)) return 7;
    printf("workspaces: %%lu %%lu\n", (unsigned long)NET_A_WORKSPACE_BYTES, (unsigned long)NET_B_WORKSPACE_BYTES);
    return 0;
}
"""


def test_two_models_in_one_program(mlp_model, tmp_path):
    a = compile_mlp(mlp_model, tmp_path / "a", name="net_a")
    lenet = ZOO["lenet5"]
    lpath = tmp_path / "lenet5.onnx"
    onnx.save(lenet.build("small"), str(lpath))
    b = compile_model(lpath, output_dir=tmp_path / "b", name="net_b", shapes=lenet.shapes_for("small"))
    import json
    mb = json.loads((b / "manifest.json").read_text())
    (b_in,), (b_out,) = mb["inputs"], mb["outputs"]
    xa = rand(BATCH, 64, seed=34)
    xb = rand(*b_in["shape"], seed=35)
    xa.tofile(tmp_path / "xa.bin")
    xb.tofile(tmp_path / "xb.bin")
    yb_elems = int(np.prod(b_out["shape"]))
    src = TWO_MODELS_C % {"xa": xa.size, "ya": BATCH * 10, "xb": xb.size, "yb": yb_elems, "io": IO_HELPERS,
                          "b_in": b_in["c_name"], "b_out": b_out["c_name"]}
    exe = build(tmp_path, src, [(a, "net_a"), (b, "net_b")])
    assert "workspaces:" in run(exe, tmp_path / "xa.bin", tmp_path / "xb.bin", tmp_path / "ya.bin",
                                tmp_path / "yb.bin")
    got_a = np.fromfile(tmp_path / "ya.bin", dtype=np.float32).reshape(BATCH, 10)
    np.testing.assert_allclose(got_a, ort_run(mlp_model, {"x": xa})[0], rtol=1e-4, atol=1e-5)
    got_b = np.fromfile(tmp_path / "yb.bin", dtype=np.float32).reshape(b_out["shape"])
    np.testing.assert_allclose(got_b, ort_run(lpath, {b_in["name"]: xb})[0], rtol=lenet.rtol, atol=lenet.atol)


def test_generated_sources_are_byte_identical_across_compiles(tmp_path):
    """Two compiles of the same model, in two processes with different hash seeds."""
    path = tmp_path / "resnet.onnx"
    e = ZOO["resnet50"]
    onnx.save(e.build("small"), str(path))
    shape = "x".join(map(str, e.shapes_for("small")["x"]))
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"out{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        p = subprocess.run([sys.executable, "-m", "aotc.cli", "compile", str(path), "-o", str(out),
                            "--shape", f"x={shape}"], capture_output=True, text=True, env=env, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        outs.append(out)
    files = sorted(f.name for f in outs[0].iterdir() if f.suffix != ".so")
    assert {"resnet.c", "resnet.h", "resnet_weights.c", "manifest.json"} <= set(files)
    assert files == sorted(f.name for f in outs[1].iterdir() if f.suffix != ".so")
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f"{f} differs between compiles"


AWKWARD_NAMES = [("int", "default", "return"), ("class", "new", "this"), ("NULL", "expf", "aotc_sgemm"),
                 ("x.1", "x_1", "x:1"), ("9lives", "ü", "1" * 60), ("in", "out", "ws")]


@pytest.mark.parametrize("names", AWKWARD_NAMES, ids=lambda n: "-".join(n)[:30])
def test_awkward_onnx_names_become_valid_distinct_c_identifiers(names, tmp_path):
    """Value names that are C/C++ keywords, macros, functions the kernels call, or that only
    differ in punctuation: the library builds, the header compiles as C and as C++, and the
    model computes ORT's answer."""
    from onnx import helper
    from tests.helpers import assert_parity, graph_model
    a, b, c = names
    x = rand(2, 3, seed=37)
    nodes = [helper.make_node("Relu", [a], [b]), helper.make_node("MatMul", [b, "w"], ["h"]),
             helper.make_node("Exp", ["h"], [c])]
    m = graph_model(nodes, {a: x}, [c, b], {"w": rand(3, 3, seed=38)})
    assert_parity(m, tmp_path, {a: x})
    out = tmp_path / "out"
    import json
    fields = [p["c_name"] for p in json.loads((out / "manifest.json").read_text())["outputs"]]
    assert len(set(fields)) == 2
    cxx = shutil.which("c++")
    if cxx:
        (tmp_path / "use.cpp").write_text('#include "model.h"\nint main() { model_outputs o; (void)o; return 0; }\n')
        p = subprocess.run([cxx, "-Wall", "-Werror", f"-I{out}", str(tmp_path / "use.cpp"), "-c", "-o",
                            str(tmp_path / "use.o")], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_a_prefix_that_extends_another_does_not_clash(mlp_model, tmp_path):
    """Model 'mlp' and model 'mlp_model' export disjoint symbols, so both link into one program."""
    import subprocess
    symbols = []
    for name in ("mlp", "mlp_model"):
        out = compile_mlp(mlp_model, tmp_path / name, name=name)
        nm = subprocess.run(["nm", "-D", "--defined-only", str(out / f"lib{name}.so")], check=True,
                            capture_output=True, text=True).stdout
        symbols.append({line.split()[-1] for line in nm.splitlines() if line.strip()})
    clash = {s for s in symbols[0] & symbols[1] if s.startswith("mlp")}
    assert not clash, f"symbols defined by both libraries: {sorted(clash)}"
    assert "mlp_run" in symbols[0] and "mlp_model_run" in symbols[1]


PORTS_C = r"""
#include <stdio.h>
#include "mlp.h"

int main(void)
{
    static float x[3 * 64], y[MLP_X_DIM0_MAX * 10];
    int64_t lo[4], hi[4];
    const int64_t shape[2] = {3, 64};
    int i = mlp_input_index("x"), o = mlp_output_index("logits"), rank;
    mlp_inputs in = {0};
    mlp_outputs out = {0};
    mlp_model *model;
    for (int k = 0; k < 3 * 64; ++k) x[k] = (float)(k % 7) / 7.0f;
    printf("index: %d %d %d\n", i, o, mlp_input_index("nope"));
    printf("names: %s %s %s\n", mlp_input_name(0), mlp_output_name(0), mlp_input_name(1) ? "?" : "NULL");
    printf("types: %s %s %s\n", mlp_input_type(i), mlp_output_type(o), mlp_output_type(-1) ? "?" : "NULL");
    rank = mlp_input_shape(i, lo, hi);
    printf("input shape: %d %lld..%lld %lld..%lld\n", rank, (long long)lo[0], (long long)hi[0],
           (long long)lo[1], (long long)hi[1]);
    rank = mlp_output_shape(o, NULL, hi);
    printf("output shape: %d %lld %lld %d\n", rank, (long long)hi[0], (long long)hi[1], mlp_output_shape(5, NULL, NULL));
    printf("set: %d %d %d %d\n", mlp_set_input(&in, i, x, shape), mlp_set_output(&out, o, y),
           mlp_set_input(&in, 7, x, shape), mlp_set_input(&in, i, x, NULL));
    if (mlp_create(NULL, &model) != AOTC_OK || mlp_invoke(model, &in, &out) != AOTC_OK) return 1;
    const int64_t *dims = mlp_output_dims(&out, o);
    printf("run: %lld %lld %s\n", (long long)dims[0], (long long)dims[1], mlp_output_dims(&out, 3) ? "?" : "NULL");
    for (int k = 0; k < 30; ++k) printf("%.6g\n", y[k]);
    mlp_destroy(model);
    return 0;
}
"""


def test_ports_by_index_and_name(mlp_model, tmp_path):
    """The header's port functions, which a program written for any model uses (examples/llm):
    positions and names, types, shape bounds, set_input / set_output (with the run's shape of
    an input with run-time dims) and the output's shape after a run; wrong indices refused."""
    out = compile_model(mlp_model, output_dir=tmp_path / "out", dims={"batch": (1, 8)})
    exe = build(tmp_path, PORTS_C, [(out, "mlp")])
    lines = run(exe).splitlines()
    assert lines[:7] == ["index: 0 0 -1", "names: x logits NULL", "types: float32 float32 NULL",
                         "input shape: 2 1..8 64..64", "output shape: 2 8 10 -1",
                         "set: 0 0 18 1", "run: 3 10 NULL"]
    x = (np.arange(3 * 64) % 7 / 7.0).astype(np.float32).reshape(3, 64)
    want = ort_run(mlp_model, {"x": x})[0]
    np.testing.assert_allclose(np.array(lines[7:], np.float32).reshape(3, 10), want, rtol=1e-5, atol=1e-5)
