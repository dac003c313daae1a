/* aotc runtime: blocked single-precision matrix multiply on packed panels.
 *   C[M,N] (=, or += when accumulate) A[M,K] * B[K,N]
 *
 * The work is done by one micro-kernel, aotc_sgemm_tile: an MR x NR block of C held in a
 * local array with constant bounds (so the compiler keeps it in vector registers), updated
 * once per k from MR values of A and NR contiguous values of B. It reads both operands
 * packed:
 *   A in MR-row panels:    a panel holds MR rows, k-major: Ap[k*MR + i]
 *   B in NR-column panels: a panel holds NR columns, k-major: Bp[k*NR + j]
 * zero-padded past M and N, so every tile computes a full MR x NR block and only the
 * edge tiles store part of it.
 *
 * K is cut into equal blocks of at most KC (aotc_sgemm_kstep). An operand is given either
 * as a strided matrix (element (r, c) at X[r*rs + c*cs], so a transposed operand is just
 * other strides), packed here one cache block at a time into `work` (the caller's scratch,
 * see aotc/kernel/gemm.py for its size), or, with rs == cs == 0, already packed: constant
 * weights are packed once at compile time, K block after K block, each block holding all
 * the panels (Mpad = M rounded up to MR):
 *   A: block at k0 starts at Ap + k0*Mpad; its panel p at + p*kc*MR   (B likewise with NR)
 * so the tiles read every operand as one forward stream.
 *
 * Blocking (Goto/BLIS): columns in blocks of NC, K in blocks of KC (B block in L2/L3), rows in
 * blocks of MC (A block in L2), then NR x MR tiles (B micro-panel in L1). The tile prefetches
 * both streams AOTC_GEMM_PREFETCH k steps ahead (0: no prefetch), which keeps weights that
 * come from memory from stalling it.
 *
 * The including file defines the target's parameters first (the C emitter writes them from
 * the target description's [gemm] table):
 *   AOTC_GEMM_MR, AOTC_GEMM_NR   micro-tile rows / columns (NR: one or two vector widths)
 *   AOTC_GEMM_KC, AOTC_GEMM_MC, AOTC_GEMM_NC   cache blocks (MC a multiple of MR, NC of NR)
 *   AOTC_GEMM_PREFETCH   prefetch distance in k steps
 * Plain C99: the compiler vectorizes the tile's loop over NR; the unroll pragmas, noinline and
 * prefetch hints are GCC/Clang spellings and vanish elsewhere. */
#ifndef AOTC_GEMM_PACKED_H
#define AOTC_GEMM_PACKED_H

#include <stdint.h>

#if !defined(AOTC_GEMM_MR) || !defined(AOTC_GEMM_NR) || !defined(AOTC_GEMM_KC) || \
    !defined(AOTC_GEMM_MC) || !defined(AOTC_GEMM_NC) || !defined(AOTC_GEMM_PREFETCH)
#error "define AOTC_GEMM_MR, _NR, _KC, _MC, _NC and _PREFETCH (the target's [gemm] table) before including aotc_gemm_packed.h"
#endif
#if AOTC_GEMM_MC % AOTC_GEMM_MR != 0 || AOTC_GEMM_NC % AOTC_GEMM_NR != 0
#error "AOTC_GEMM_MC must be a multiple of AOTC_GEMM_MR, and AOTC_GEMM_NC of AOTC_GEMM_NR"
#endif

/* GCC decides on its own whether to unroll a loop before or after vectorizing it, and for
 * some tile shapes vectorizes the wrong loop. Unrolling the rows completely and keeping
 * the column loop whole (to be vectorized, then unrolled) gives register-resident tiles
 * when NR is one or two vector widths. The tile is compiled once, out of line, so that no
 * call site's constants change those decisions. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define AOTC_UNROLL_FULLY _Pragma("GCC unroll 64")
#define AOTC_UNROLL_NOT _Pragma("GCC unroll 1")
#else
#define AOTC_UNROLL_FULLY
#define AOTC_UNROLL_NOT
#endif
#if defined(__GNUC__)
#define AOTC_NOINLINE __attribute__((noinline))
#define AOTC_PREFETCH(p) __builtin_prefetch(p)
#else
#define AOTC_NOINLINE
#define AOTC_PREFETCH(p) ((void)0)
#endif
#define AOTC_CACHE_LINE_FLOATS 16

static int64_t aotc_gemm_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The K block size for a K: K in ceil(K / KC) blocks as equal as can be, so none is a sliver
 * (aotc/kernel/gemm.py computes the same to lay out constants packed at compile time). */
static int64_t aotc_sgemm_kstep(int64_t K)
{
    const int64_t blocks = (K + AOTC_GEMM_KC - 1) / AOTC_GEMM_KC;
    return blocks ? (K + blocks - 1) / blocks : 0;
}

/* Ap <- rows [0, m) x cols [0, kc) of A (element (i, k) at A[i*rs + k*cs]) as MR-row panels
 * of kc rows each; rows past m are zero. */
static void aotc_sgemm_pack_a(int64_t m, int64_t kc, const float *A, int64_t rs, int64_t cs,
                              float *restrict Ap)
{
    int64_t i0, i, k;
    for (i0 = 0; i0 < m; i0 += AOTC_GEMM_MR, Ap += kc * AOTC_GEMM_MR) {
        const int64_t mr = aotc_gemm_min(AOTC_GEMM_MR, m - i0);
        const float *a = A + i0 * rs;
        if (mr == AOTC_GEMM_MR && rs == 1) {          /* A stored transposed: copy MR at a time */
            for (k = 0; k < kc; ++k)
                for (i = 0; i < AOTC_GEMM_MR; ++i)
                    Ap[k * AOTC_GEMM_MR + i] = a[k * cs + i];
        } else if (mr == AOTC_GEMM_MR) {
            for (k = 0; k < kc; ++k)
                for (i = 0; i < AOTC_GEMM_MR; ++i)
                    Ap[k * AOTC_GEMM_MR + i] = a[i * rs + k * cs];
        } else {
            for (k = 0; k < kc; ++k)
                for (i = 0; i < AOTC_GEMM_MR; ++i)
                    Ap[k * AOTC_GEMM_MR + i] = i < mr ? a[i * rs + k * cs] : 0.0f;
        }
    }
}

/* Bp <- rows [0, kc) x cols [0, n) of B (element (k, j) at B[k*rs + j*cs]) as NR-column
 * panels of kc rows each; columns past n are zero. */
static void aotc_sgemm_pack_b(int64_t kc, int64_t n, const float *B, int64_t rs, int64_t cs,
                              float *restrict Bp)
{
    int64_t j0, j, k;
    for (j0 = 0; j0 < n; j0 += AOTC_GEMM_NR, Bp += kc * AOTC_GEMM_NR) {
        const int64_t nr = aotc_gemm_min(AOTC_GEMM_NR, n - j0);
        const float *b = B + j0 * cs;
        if (nr == AOTC_GEMM_NR && cs == 1) {
            for (k = 0; k < kc; ++k)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    Bp[k * AOTC_GEMM_NR + j] = b[k * rs + j];
        } else {
            for (k = 0; k < kc; ++k)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    Bp[k * AOTC_GEMM_NR + j] = j < nr ? b[k * rs + j * cs] : 0.0f;
        }
    }
}

/* The micro-kernel: C[0:mr, 0:nr] (=, or += when accumulate) a * b over kc steps, where a is
 * one packed A panel (kc x MR) and b one packed B panel (kc x NR). */
AOTC_NOINLINE static void aotc_sgemm_tile(int64_t kc, const float *restrict a, const float *restrict b,
                                          float *restrict C, int64_t ldc, int64_t mr, int64_t nr,
                                          int accumulate)
{
    float acc[AOTC_GEMM_MR][AOTC_GEMM_NR];
    int64_t i, j, k;
    for (i = 0; i < AOTC_GEMM_MR; ++i)
        for (j = 0; j < AOTC_GEMM_NR; ++j)
            acc[i][j] = 0.0f;
    for (k = 0; k < kc; ++k) {
        if (AOTC_GEMM_PREFETCH) {
            AOTC_PREFETCH(a + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_MR);
            for (j = 0; j < AOTC_GEMM_NR; j += AOTC_CACHE_LINE_FLOATS)
                AOTC_PREFETCH(b + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_NR + j);
        }
        AOTC_UNROLL_FULLY
        for (i = 0; i < AOTC_GEMM_MR; ++i) {
            AOTC_UNROLL_NOT
            for (j = 0; j < AOTC_GEMM_NR; ++j)
                acc[i][j] += a[k * AOTC_GEMM_MR + i] * b[k * AOTC_GEMM_NR + j];
        }
    }
    if (mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR) {
        if (accumulate) {
            for (i = 0; i < AOTC_GEMM_MR; ++i)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    C[i * ldc + j] += acc[i][j];
        } else {
            for (i = 0; i < AOTC_GEMM_MR; ++i)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    C[i * ldc + j] = acc[i][j];
        }
    } else {
        for (i = 0; i < mr; ++i)
            for (j = 0; j < nr; ++j)
                C[i * ldc + j] = accumulate ? C[i * ldc + j] + acc[i][j] : acc[i][j];
    }
}

/* C[M,N] (=, or += when accumulate) A[M,K] * B[K,N]. A is (A, rsa, csa): element (i, k) at
 * A[i*rsa + k*csa], or packed at compile time when rsa == csa == 0; B likewise with (k, j)
 * at B[k*rsb + j*csb]. `work` holds the packed blocks of the strided operands. */
static void aotc_sgemm_packed(int64_t M, int64_t N, int64_t K,
                              const float *A, int64_t rsa, int64_t csa,
                              const float *B, int64_t rsb, int64_t csb,
                              float *C, int64_t ldc, int accumulate, float *work)
{
    const int a_packed = rsa == 0 && csa == 0, b_packed = rsb == 0 && csb == 0;
    const int64_t kstep = aotc_sgemm_kstep(K);
    const int64_t nc_max = aotc_gemm_min(AOTC_GEMM_NC, N);
    const int64_t Mpad = (M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR * AOTC_GEMM_MR;
    const int64_t Npad = (N + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR;
    float *bwork = work;
    float *awork = b_packed ? work : work + kstep * ((nc_max + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR);
    int64_t jc, pc, ic, jr, ir, i, j;
    if (K == 0) {
        if (!accumulate)
            for (i = 0; i < M; ++i)
                for (j = 0; j < N; ++j)
                    C[i * ldc + j] = 0.0f;
        return;
    }
    for (jc = 0; jc < N; jc += AOTC_GEMM_NC) {
        const int64_t nc = aotc_gemm_min(AOTC_GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc);
            const float *bp;
            int64_t bpanel;               /* floats from one B panel to the next */
            if (b_packed) {
                bp = B + pc * Npad + jc * kc;
                bpanel = kc * AOTC_GEMM_NR;
            } else {
                aotc_sgemm_pack_b(kc, nc, B + pc * rsb + jc * csb, rsb, csb, bwork);
                bp = bwork;
                bpanel = kc * AOTC_GEMM_NR;
            }
            for (ic = 0; ic < M; ic += AOTC_GEMM_MC) {
                const int64_t mc = aotc_gemm_min(AOTC_GEMM_MC, M - ic);
                const float *ap;
                int64_t apanel;
                if (a_packed) {
                    ap = A + pc * Mpad + ic * kc;
                    apanel = kc * AOTC_GEMM_MR;
                } else {
                    aotc_sgemm_pack_a(mc, kc, A + ic * rsa + pc * csa, rsa, csa, awork);
                    ap = awork;
                    apanel = kc * AOTC_GEMM_MR;
                }
                for (jr = 0; jr < nc; jr += AOTC_GEMM_NR)
                    for (ir = 0; ir < mc; ir += AOTC_GEMM_MR)
                        aotc_sgemm_tile(kc, ap + ir / AOTC_GEMM_MR * apanel, bp + jr / AOTC_GEMM_NR * bpanel,
                                        C + (ic + ir) * ldc + jc + jr, ldc,
                                        aotc_gemm_min(AOTC_GEMM_MR, mc - ir), aotc_gemm_min(AOTC_GEMM_NR, nc - jr),
                                        accumulate || pc > 0);
            }
        }
    }
}

#endif
