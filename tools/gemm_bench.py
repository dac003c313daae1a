"""GEMM micro-benchmark: the runtime's reference aotc_sgemm_reference vs the packed aotc_sgemm,
in GFLOP/s, on the matrix shapes ResNet-50, BERT and GPT-2 spend their time in.

python -m tools.gemm_bench [--targets c,c-avx512] [--repeats 7] [--min-time 0.2] [--threads 2]

Both kernels are compiled with each target's compiler and flags (and its [gemm] tiles) into a
small shared library (`GemmLib`, also used by tests/test_gemm.py); each shape runs both
kernels alternately, `--repeats` times, each time for at least `--min-time` seconds; the
median rate is reported. "constant A" / "B" marks an operand packed at compile time (Conv
weights are A, MatMul weights are B); the other operand is packed at run time. "Constant from
memory" rotates through copies of that operand that together exceed the caches, as a
model's weights do (each layer's weights are read once per run).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from aotc.schedule.gemm_cpu import GemmTiles, pack_a, pack_b
from aotc.paths import RUNTIME_DIR
from aotc.targets import load_target

_SHIM = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include "aotc_gemm.h"
#include "aotc_gemm_packed.h"
#include "aotc_igemm.h"

void ref_sgemm(int64_t reps, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
               const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    int64_t r;
    for (r = 0; r < reps; ++r)
        aotc_sgemm_reference(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

/* the epilogue the tests use: C(i, j) = max(C(i, j) + bias[j], 0), and a count of the elements
   it saw (each exactly once, or the test fails) */
typedef struct { float *C; int64_t rsc, csc; const float *bias; int64_t *seen; int64_t N; } bias_relu_args;
static void bias_relu(void *p, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    bias_relu_args *a = (bias_relu_args *)p;
    int64_t i, j;
    for (i = i0; i < i1; ++i)
        for (j = j0; j < j1; ++j) {
            float v = a->C[i * a->rsc + j * a->csc] + a->bias[j];
            a->C[i * a->rsc + j * a->csc] = v > 0.0f ? v : 0.0f;
            __atomic_fetch_add(&a->seen[i * a->N + j], 1, __ATOMIC_RELAXED);
        }
}

/* rep r reads A + (r % copies) * a_step and B + (r % copies) * b_step: with copies of a weight
   that together exceed the caches, every call streams it from memory, as in a model.
   threads > 1 splits C among a pool's threads as `split` says (AOTC_GEMM_SPLIT_*); bias != NULL
   runs the bias_relu epilogue. tiles_a / tiles_b: A / B is stored as bfloat16 tiles (the option
   bf16's constants: A / B then point at them). */
int packed_sgemm(int64_t reps, int64_t copies, int64_t a_step, int64_t b_step, int64_t M, int64_t N, int64_t K,
                 const float *A, int64_t rsa, int64_t csa, const float *B, int64_t rsb, int64_t csb,
                 float *C, int64_t rsc, int64_t csc, int accumulate, float *work, int64_t work_floats,
                 int threads, int split, const float *bias, int64_t *seen, int tiles_a, int tiles_b)
{
    int64_t r;
    int status;
    aotc_pool *pool = aotc_pool_create(threads, &status);
    bias_relu_args ep = { C, rsc, csc, bias, seen, N };
    aotc_sgemm_call g = { 0 };
    if (status)
        return status;
    g.M = M; g.N = N; g.K = K; g.rsa = rsa; g.csa = csa; g.rsb = rsb; g.csb = csb;
    g.C = C; g.rsc = rsc; g.csc = csc; g.accumulate = accumulate; g.split = threads > 1 ? split : 0;
    g.work = work; g.work_floats = work_floats;
    if (bias) { g.epilogue = bias_relu; g.epilogue_args = &ep; }
    for (r = 0; r < reps; ++r) {
        g.A = A + r % copies * a_step;
        g.B = B + r % copies * b_step;
        if (tiles_a) {
            g.Ah = (const uint16_t *)(const void *)A + r % copies * a_step;     /* (steps in values) */
            g.A = NULL;
        }
        if (tiles_b) {
            g.Bh = (const uint16_t *)(const void *)B + r % copies * b_step;
            g.B = NULL;
        }
        aotc_sgemm(pool, &g);
    }
    aotc_pool_destroy(pool);
    return 0;
}

/* the integer GEMM (aotc_igemm.h) with an epilogue that counts the elements it sees (seen != NULL) */
typedef struct { int64_t *seen; int64_t N; } count_args;
static void count_seen(void *p, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    count_args *a = (count_args *)p;
    int64_t i, j;
    for (i = i0; i < i1; ++i)
        for (j = j0; j < j1; ++j)
            __atomic_fetch_add(&a->seen[i * a->N + j], 1, __ATOMIC_RELAXED);
}

int int8_gemm(int64_t reps, int64_t M, int64_t N, int64_t K, const void *A, int64_t rsa, int64_t csa,
              const void *B, int64_t rsb, int64_t csb, int a_unsigned, int32_t *C, int64_t rsc, int64_t csc,
              int accumulate, uint8_t *work, int64_t work_bytes, int threads, int split, int64_t *seen)
{
    int64_t r;
    int status;
    aotc_pool *pool = aotc_pool_create(threads, &status);
    count_args ep = { seen, N };
    aotc_igemm_call g = { 0 };
    if (status)
        return status;
    g.M = M; g.N = N; g.K = K; g.A = A; g.rsa = rsa; g.csa = csa; g.B = B; g.rsb = rsb; g.csb = csb;
    g.a_unsigned = a_unsigned; g.C = C; g.rsc = rsc; g.csc = csc; g.accumulate = accumulate;
    g.split = threads > 1 ? split : 0; g.work = work; g.work_bytes = work_bytes;
    if (seen) { g.epilogue = count_seen; g.epilogue_args = &ep; }
    for (r = 0; r < reps; ++r)
        aotc_igemm(pool, &g);
    aotc_pool_destroy(pool);
    return 0;
}

int igemm_tile_kind(void)
{
    return aotc_igemm_tile_kind();
}

/* 1: products of 16 rows, columns and K or more run on AMX-INT8 tiles here */
int igemm_amx(void)
{
#if defined(AOTC_IGEMM_ON_AMX) && AOTC_IGEMM_ON_AMX
    return aotc_amx_ready(AOTC_AMX_INT8);
#else
    return 0;
#endif
}
"""

_f = ctypes.POINTER(ctypes.c_float)
_i = ctypes.c_int64


_SPLITS = {"none": 0, "rows": 1, "cols": 2}      # AOTC_GEMM_SPLIT_*


def _strides(x: np.ndarray, packed: bool) -> tuple[int, int]:
    """An operand's (row, column) strides in elements, or (0, 0) when it is packed."""
    return (0, 0) if packed else (x.strides[0] // x.itemsize, x.strides[1] // x.itemsize)


class GemmLib:
    """Both runtime GEMMs compiled for one target, callable on numpy arrays."""

    def __init__(self, target: str, workdir: Path, tiles: GemmTiles | None = None, defines: dict | None = None):
        self.target = load_target(target)
        self.tiles = tiles or GemmTiles.of(self.target)
        workdir.mkdir(parents=True, exist_ok=True)
        macros = {**self.tiles.macros(), **(defines or {})}
        tag = "_".join(str(v) for v in macros.values())
        src = workdir / f"gemm_{target}_{tag}.c"
        src.write_text(_SHIM)
        lib = workdir / f"libgemm_{target}_{tag}.so"
        cmd = [self.target.cc, *self.target.cflags, "-Wno-unused-function",
               *[f"-D{k}={v}" for k, v in macros.items()], f"-I{RUNTIME_DIR}", str(src), "-o", str(lib), *self.target.ldflags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"building the GEMM library for {target} failed:\n{proc.stderr}")
        self.lib = ctypes.CDLL(str(lib))
        self.lib.ref_sgemm.argtypes = [_i, _i, _i, _i, _f, _i, _f, _i, _f, _i, ctypes.c_int]
        _v = ctypes.c_void_p
        self.lib.int8_gemm.argtypes = [_i, _i, _i, _i, _v, _i, _i, _v, _i, _i, ctypes.c_int, _v, _i, _i, ctypes.c_int,
                                       _v, _i, ctypes.c_int, ctypes.c_int, _v]
        self.lib.packed_sgemm.argtypes = [_i, _i, _i, _i, _i, _i, _i, _f, _i, _i, _f, _i, _i, _f, _i, _i, ctypes.c_int,
                                          _f, _i, ctypes.c_int, ctypes.c_int, _f, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.c_int, ctypes.c_int]

    @staticmethod
    def _p(a: np.ndarray):
        return a.ctypes.data_as(_f)

    @property
    def igemm_tile(self) -> str:
        """The tile the integer GEMM takes here (of those built in, the best this CPU runs)."""
        return ("plain", "avx512bw", "vnni")[self.lib.igemm_tile_kind()]

    @property
    def igemm_amx(self) -> bool:
        """Products of at least 16 rows, columns and K run on AMX-INT8 tiles here."""
        return bool(self.lib.igemm_amx())

    def igemm(self, M, N, K, A, B, C, a_unsigned: bool, a_packed=False, b_packed=False, accumulate=False, reps=1,
              work=None, threads=1, split="rows", seen=None):
        """aotc_igemm. A / B: uint8 / int8 views with element strides, or pack_a_int8 /
        pack_b_int8 arrays when a_packed / b_packed; C int32. Returns the work buffer it used."""
        (rsa, csa), (rsb, csb) = _strides(A, a_packed), _strides(B, b_packed)
        per_thread = max(1, self.tiles.int8_work_bytes(M, N, K, a_packed, b_packed))
        if work is None:
            work = np.empty(per_thread * threads, np.uint8)
        sp = _SPLITS[split]
        status = self.lib.int8_gemm(reps, M, N, K, A.ctypes.data, rsa, csa, B.ctypes.data, rsb, csb, int(a_unsigned),
                                    C.ctypes.data, C.strides[0] // 4, C.strides[1] // 4, int(accumulate),
                                    work.ctypes.data, per_thread, threads, sp,
                                    seen.ctypes.data if seen is not None else None)
        assert status == 0, f"int8_gemm: pool creation failed ({status})"
        return work

    def ref(self, A, B, C, accumulate=False, reps=1):
        """aotc_sgemm_reference on row-major A [M,K], B [K,N], C [M,N] (each may be a row-strided view)."""
        M, K = A.shape
        N = B.shape[1]
        self.lib.ref_sgemm(reps, M, N, K, self._p(A), A.strides[0] // 4, self._p(B), B.strides[0] // 4,
                           self._p(C), C.strides[0] // 4, int(accumulate))

    def packed(self, M, N, K, A, B, C, accumulate=False, a_packed=False, b_packed=False, reps=1, work=None,
               copies=1, a_step=0, b_step=0, threads=1, split="rows", bias=None, seen=None, a_bf16=False,
               b_bf16=False):
        """aotc_sgemm. A / B / C: float32 views with element strides (any layout), or pack_a /
        pack_b arrays when a_packed / b_packed, or pack_a_bf16 / pack_b_bf16 arrays when a_bf16 /
        b_bf16 (the option bf16's constants). Returns the work buffer it used (per thread:
        `threads` copies). With copies > 1, rep r reads A + (r % copies) * a_step (B likewise):
        see packed_sgemm. threads > 1 splits C by `split` (rows / cols) on a thread pool; `bias`
        runs the bias + ReLU epilogue, counting the elements it sees into `seen` [M, N] int64."""
        (rsa, csa), (rsb, csb) = _strides(A, a_packed or a_bf16), _strides(B, b_packed or b_bf16)
        per_thread = max(1, self.tiles.work_floats(M, N, K, a_packed, b_packed, a_bf16, b_bf16))
        if work is None:
            work = np.empty(per_thread * threads, np.float32)
        sp = _SPLITS[split]
        status = self.lib.packed_sgemm(reps, copies, a_step, b_step, M, N, K, self._p(A), rsa, csa, self._p(B), rsb,
                                       csb, self._p(C), C.strides[0] // 4, C.strides[1] // 4, int(accumulate),
                                       self._p(work), per_thread, threads, sp,
                                       self._p(bias) if bias is not None else None,
                                       seen.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)) if seen is not None else None,
                                       int(a_bf16), int(b_bf16))
        assert status == 0, f"packed_sgemm: pool creation failed ({status})"
        return work


# (label, M, N, K, which operand is a compile-time constant)
SHAPES = [
    ("resnet50 conv3x3 56x56 64->64", 64, 3136, 576, "A"),
    ("resnet50 conv1x1 56x56 64->256", 256, 3136, 64, "A"),
    ("resnet50 conv3x3 28x28 128->128", 128, 784, 1152, "A"),
    ("resnet50 conv3x3 14x14 256->256", 256, 196, 2304, "A"),
    ("resnet50 conv3x3 7x7 512->512", 512, 49, 4608, "A"),
    ("resnet50 conv1x1 7x7 512->2048", 2048, 49, 512, "A"),
    ("bert linear 128x768x768", 128, 768, 768, "B"),
    ("bert ffn-up 128x3072x768", 128, 3072, 768, "B"),
    ("bert ffn-down 128x768x3072", 128, 768, 3072, "B"),
    ("gpt2 qkv 64x2304x768", 64, 2304, 768, "B"),
    ("gpt2 lm-head 64x50257x768", 64, 50257, 768, "B"),
    ("bert attention q.kT 128x128x64", 128, 128, 64, ""),
    ("bert attention p.v 128x64x128", 128, 64, 128, ""),
    ("square 512", 512, 512, 512, ""),
    ("classifier head 1x1000x2048", 1, 1000, 2048, "B"),
    ("lstm step 1x512x128", 1, 512, 128, "B"),
]


def _rate(fn, flops: float, min_time: float) -> float:
    reps = 1
    while True:
        t0 = time.perf_counter()
        fn(reps)
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return flops * reps / dt * 1e-9
        reps = max(reps * 2, int(reps * min_time / max(dt, 1e-6) * 1.1))


COLD_BYTES = 128 << 20      # copies of a constant operand add up to this: more than the caches hold


def bench_target(target: str, workdir: Path, repeats: int, min_time: float, tiles: GemmTiles | None = None,
                 shapes=None) -> list[dict]:
    lib = GemmLib(target, workdir, tiles)
    rng = np.random.default_rng(0)
    rows = []
    for label, M, N, K, const in shapes or SHAPES:
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = rng.standard_normal((K, N)).astype(np.float32)
        C0, C1 = np.empty((M, N), np.float32), np.empty((M, N), np.float32)
        Ap = pack_a(A, lib.tiles) if const == "A" else A
        Bp = pack_b(B, lib.tiles) if const == "B" else B
        ap, bp = const == "A", const == "B"
        work = lib.packed(M, N, K, Ap, Bp, C1, a_packed=ap, b_packed=bp)
        lib.ref(A, B, C0)
        err = float(np.max(np.abs(C0 - C1)))
        # the constant operand in copies that do not fit in cache, as a model's weights are
        w = Ap if ap else Bp
        copies = max(1, COLD_BYTES // w.nbytes) if const else 1
        cold = np.tile(w.reshape(-1), copies)
        Ac, Bc = (cold if ap else Ap), (cold if bp else Bp)
        flops = 2.0 * M * N * K
        ref, new, new_cold = [], [], []
        for _ in range(repeats):
            ref.append(_rate(lambda r: lib.ref(A, B, C0, reps=r), flops, min_time))
            new.append(_rate(lambda r: lib.packed(M, N, K, Ap, Bp, C1, a_packed=ap, b_packed=bp, reps=r,
                                                  work=work), flops, min_time))
            if const:
                new_cold.append(_rate(lambda r: lib.packed(M, N, K, Ac, Bc, C1, a_packed=ap, b_packed=bp, reps=r,
                                                           work=work, copies=copies, a_step=w.size if ap else 0,
                                                           b_step=w.size if bp else 0), flops, min_time))
        rows.append({"target": target, "shape": label, "M": M, "N": N, "K": K, "packed": const,
                     "ref_gflops": statistics.median(ref), "packed_gflops": statistics.median(new),
                     "packed_cold_gflops": statistics.median(new_cold) if new_cold else None,
                     "max_abs_diff": err})
    return rows


def render(rows: list[dict]) -> str:
    L = ["| target | shape | M x N x K | constant | aotc_sgemm | aotc_sgemm_packed | speed-up | "
         "packed, constant from memory |",
         "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cold = f"{r['packed_cold_gflops']:.1f}" if r["packed_cold_gflops"] else "-"
        L.append(f"| {r['target']} | {r['shape']} | {r['M']} x {r['N']} x {r['K']} | {r['packed'] or '-'} | "
                 f"{r['ref_gflops']:.1f} | {r['packed_gflops']:.1f} | {r['packed_gflops'] / r['ref_gflops']:.2f}x | "
                 f"{cold} |")
    return "\n".join(L)


def main() -> None:
    from aotc.targets import native_target
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default=None, help="comma-separated targets (default: c and the best SIMD one)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2)
    a = ap.parse_args()
    best = native_target()
    targets = a.targets.split(",") if a.targets else ["c"] + ([best] if best != "c" else [])
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for t in targets:
            for r in bench_target(t, Path(d), a.repeats, a.min_time):
                rows.append(r)
                cold = f"{r['packed_cold_gflops']:7.1f}" if r["packed_cold_gflops"] else "      -"
                print(f"{t:9} {r['shape']:34} ref {r['ref_gflops']:7.1f}  packed {r['packed_gflops']:7.1f}  "
                      f"cold {cold} GFLOP/s", flush=True)
    print(render(rows))


if __name__ == "__main__":
    main()
