"""runtime/aotc_math.h (the float32 exp, tanh, erf and sigmoid the C targets' kernels call) against the
correctly rounded value (double-precision libm, rounded), in ULP, over a sweep of every 4099th
float32 bit pattern (about a million values of every magnitude, both signs), evaluated in a
loop built with each C target's own flags that this CPU runs, so the vectorized code is what
is measured; and at the special values, which must be exactly libm's (sigmoid's: 1 / (1 + exp(-x))
in double, rounded)."""
from __future__ import annotations

import shutil
import subprocess
import tomllib

import pytest

from aotc.paths import RUNTIME_DIR, TARGETS_DIR
from aotc.targets import load_target, runs_here

CC = shutil.which("cc")
# the most ULP each may be off (measured over every 13th float: exp 0.93, tanh 1.35, erf 2.45
# with FMA (c-avx2, c-avx512); exp 1.05 without (c); sigmoid over every 4099th: 2.00 with and
# without)
BOUNDS = {"exp": 1.5, "tanh": 2.5, "erf": 3.0, "sigmoid": 2.5}

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <float.h>
#include "aotc_math.h"
#if AOTC_SUBNORMALS_FLUSHED && defined(__SSE__)
#include <xmmintrin.h>
#define FLUSH_ON() unsigned csr = _mm_getcsr(); _mm_setcsr(csr | 0x8040u)   /* FTZ and DAZ, as a run sets them */
#define FLUSH_OFF() _mm_setcsr(csr)
#else
#define FLUSH_ON() (void)0
#define FLUSH_OFF() (void)0
#endif

#define N 1048576
#define STEP 4099u

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* the loops the generated kernels have: an element at a time, which the compiler vectorizes */
static void run_exp(const float *restrict x, float *restrict y, int n) { for (int i = 0; i < n; ++i) y[i] = aotc_expf(x[i]); }
static void run_tanh(const float *restrict x, float *restrict y, int n) { for (int i = 0; i < n; ++i) y[i] = aotc_tanhf(x[i]); }
static void run_erf(const float *restrict x, float *restrict y, int n) { for (int i = 0; i < n; ++i) y[i] = aotc_erff(x[i]); }
static void run_sigmoid(const float *restrict x, float *restrict y, int n) { for (int i = 0; i < n; ++i) y[i] = aotc_sigmoidf(x[i]); }

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static double ulps(float y, double ref)
{
    if (isnan(ref)) return isnan(y) ? 0.0 : 1e30;
#if AOTC_SUBNORMALS_FLUSHED
    /* a result at the bottom of the normal range or below may be flushed to zero */
    if (y == 0.0f && fabs(ref) < 2.0 * FLT_MIN) return 0.0;
#endif
    float r = (float)ref;
    if (isinf(r)) return y == r ? 0.0 : 1e30;
    double u = (double)nextafterf(fabsf(r), INFINITY) - fabs((double)r);
    return fabs((double)y - ref) / u;
}

int main(void)
{
    static float x[N], y[N];
    int n = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull && n < N; u += STEP) x[n++] = from_bits((uint32_t)u);
    const char *names[4] = {"exp", "tanh", "erf", "sigmoid"};
    for (int f = 0; f < 4; ++f) {
        FLUSH_ON();
        if (f == 0) run_exp(x, y, n); else if (f == 1) run_tanh(x, y, n); else if (f == 2) run_erf(x, y, n);
        else run_sigmoid(x, y, n);
        FLUSH_OFF();
        double worst = 0.0;
        float at = 0.0f;
        for (int i = 0; i < n; ++i) {
            double ref = f == 0 ? exp((double)x[i]) : f == 1 ? tanh((double)x[i]) : f == 2 ? erf((double)x[i])
                                                                                   : sigmoid((double)x[i]);
            double e = ulps(y[i], ref);
            if (e > worst) { worst = e; at = x[i]; }
        }
        printf("%s %.3f %.9g\n", names[f], worst, at);
    }
    /* special values: exactly libm's (NaN as NaN, signed zeros by sign) */
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72283f, 88.72284f, 89.5f, -87.33654f,
                        -103.9720f, -103.9721f, -104.5f, 1e-30f, -1e-30f, 1e-45f, 3.9f, 3.95f, 9.5f, -9.5f,
                        16.6f, 17.4f, -87.4f, -88.8f, -103.3f};
    for (unsigned i = 0; i < sizeof sp / sizeof sp[0]; ++i) {
        float v[4] = {aotc_expf(sp[i]), aotc_tanhf(sp[i]), aotc_erff(sp[i]), aotc_sigmoidf(sp[i])};
        float w[4] = {expf(sp[i]), tanhf(sp[i]), erff(sp[i]), (float)sigmoid(sp[i])};
        for (int f = 0; f < 4; ++f) {
            int same = (isnan(v[f]) && isnan(w[f])) || (v[f] == w[f] && signbit(v[f]) == signbit(w[f]))
                       || ulps(v[f], (double)w[f]) <= 1.0;
            if (!same) printf("special %s(%g) = %g, libm %g\n", names[f], sp[i], v[f], w[f]);
        }
    }
    return 0;
}
"""


def _targets() -> list[str]:
    out = []
    for name in ("c", "c-avx2", "c-avx512"):
        if runs_here(load_target(name)):
            out.append(name)
    return out


@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("flushed", [False, True], ids=["ieee", "flushed"])
@pytest.mark.parametrize("target", _targets())
def test_vector_math_is_within_bounds(target, flushed, tmp_path):
    """As a run computes them: with IEEE subnormals (the option ieee_subnormals) and, by default,
    with subnormal floats flushed to zero (AOTC_SUBNORMALS_FLUSHED, the run's FTZ / DAZ), where a
    result below twice the smallest normal float may be zero."""
    with open(TARGETS_DIR / f"{target}.toml", "rb") as f:
        t = tomllib.load(f)
    src = tmp_path / "harness.c"
    src.write_text(("#define AOTC_SUBNORMALS_FLUSHED 1\n" if flushed else "") + HARNESS)
    exe = tmp_path / "harness"
    flags = [f for f in t["cflags"] if f not in ("-fPIC", "-Werror")]
    build = subprocess.run([CC, *flags, f"-I{RUNTIME_DIR}", str(src), "-o", str(exe), "-lm", "-fopt-info-vec-optimized"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    # every run_* loop is vectorized with the target's flags (else libm would do as well)
    assert build.stderr.count("loop vectorized") >= 4, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split("\n")
    assert not [ln for ln in lines if ln.startswith("special")], run.stdout
    for ln in lines:
        if ln.split(" ")[0] in BOUNDS:
            name, worst, at = ln.split()
            assert float(worst) <= BOUNDS[name], f"{name}: {worst} ULP at x = {at} ({target})"


def test_math_calls_are_inlined_into_large_run_functions(tmp_path):
    """A kernel called once is inlined into the run function; in a large model GCC then stops
    inlining into it (its growth limits), and a math call left in a loop keeps the loop scalar
    (YOLO's sigmoid after its head Transpose: 102,000 calls). The functions are always_inline;
    this compiles YOLO's full-size C, where that happened, and asks GCC what it did not inline."""
    import re

    from aotc.compiler import compile_model
    from aotc.targets import native_target
    from models.build import save
    from models.zoo import ZOO

    if CC is None or "Free Software Foundation" not in subprocess.run([CC, "--version"], capture_output=True,
                                                                      text=True).stdout:
        pytest.skip("the check reads GCC's inlining report")
    e = ZOO["yolo"]
    path = tmp_path / "yolo.onnx"
    save(e.build("full"), path)
    name = native_target()
    out = compile_model(path, target=name, output_dir=tmp_path / "out", threads=1, shapes=e.shapes_for("full"))
    with open(TARGETS_DIR / f"{name}.toml", "rb") as f:
        flags = tomllib.load(f)["cflags"]
    src = next(p for p in out.glob("*.c") if not p.name.endswith("_weights.c"))
    proc = subprocess.run([CC, *flags, f"-I{out}", "-c", str(src), "-o", str(tmp_path / "y.o"),
                           "-fopt-info-inline-missed"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    missed = [ln for ln in proc.stderr.splitlines() if re.search(r"not inlinable: .*aotc_(exp|tanh|erf)f", ln)]
    assert not missed, missed[:5]
