/* aotc runtime: the reference single-precision matrix multiply, row-major: the simple kernel
 * the packed one (aotc_gemm_packed.h) is tested against; generated models do not use it.
 *   C[M,N] (=, or += when accumulate) A[M,K] * B[K,N]
 * lda/ldb/ldc are row strides in elements. Plain C99 written so that the compiler
 * vectorizes the inner loop over N: four rows of C are updated per pass over a row of B,
 * and K is blocked so the rows of B in use stay in cache. */
#ifndef AOTC_GEMM_H
#define AOTC_GEMM_H

#include <stdint.h>

#define AOTC_GEMM_KBLOCK 256

static void aotc_sgemm_reference(int64_t M, int64_t N, int64_t K,
                                 const float *A, int64_t lda,
                                 const float *B, int64_t ldb,
                                 float *C, int64_t ldc, int accumulate)
{
    int64_t i, j, k, k0;
    const int64_t M4 = M - M % 4;    /* rows done four at a time */
    if (!accumulate) {
        for (i = 0; i < M; ++i)
            for (j = 0; j < N; ++j)
                C[i * ldc + j] = 0.0f;
    }
    for (k0 = 0; k0 < K; k0 += AOTC_GEMM_KBLOCK) {
        int64_t k1 = k0 + AOTC_GEMM_KBLOCK < K ? k0 + AOTC_GEMM_KBLOCK : K;
        for (i = 0; i < M4; i += 4) {
            float *restrict c0 = C + (i + 0) * ldc, *restrict c1 = C + (i + 1) * ldc;
            float *restrict c2 = C + (i + 2) * ldc, *restrict c3 = C + (i + 3) * ldc;
            for (k = k0; k < k1; ++k) {
                const float *restrict b = B + k * ldb;
                float a0 = A[(i + 0) * lda + k], a1 = A[(i + 1) * lda + k];
                float a2 = A[(i + 2) * lda + k], a3 = A[(i + 3) * lda + k];
                for (j = 0; j < N; ++j) {
                    float bj = b[j];
                    c0[j] += a0 * bj;
                    c1[j] += a1 * bj;
                    c2[j] += a2 * bj;
                    c3[j] += a3 * bj;
                }
            }
        }
        for (i = M4; i < M; ++i) {
            float *c0 = C + i * ldc;
            for (k = k0; k < k1; ++k) {
                const float *restrict b = B + k * ldb;
                float a0 = A[i * lda + k];
                for (j = 0; j < N; ++j)
                    c0[j] += a0 * b[j];
            }
        }
    }
}

#endif
