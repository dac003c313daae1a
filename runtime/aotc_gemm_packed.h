/* aotc runtime: blocked single-precision matrix multiply on packed panels.
 *   C[M,N] (=, or += when accumulate) A[M,K] * B[K,N], then an epilogue on every tile
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
 * C is strided too (element (i, j) at C[i*rsc + j*csc]), so a product computed transposed
 * lands in place. When a tile's last K block is stored, the call's `epilogue` (if any) runs on
 * it while it is in cache: that is where the compiler puts bias, activation and residual adds.
 *
 * Threads: with a pool, `split` says how C is shared: rows (each thread takes whole MR-row
 * panels; best when B is packed at compile time, so no thread packs what another packs) or
 * columns (NR-column panels; best when A is packed). Each thread packs into its own part of
 * `work` (thread t at work + t * work_floats).
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

#include <stddef.h>
#include <stdint.h>

#include "aotc_threads.h"

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
#define AOTC_PREFETCH_W(p) __builtin_prefetch(p, 1)
#else
#define AOTC_NOINLINE
#define AOTC_PREFETCH(p) ((void)0)
#define AOTC_PREFETCH_W(p) ((void)0)
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
 * one packed A panel (kc x MR) and b one packed B panel (kc x NR); element (i, j) of C at
 * C[i*rsc + j*csc]. */
AOTC_NOINLINE static void aotc_sgemm_tile(int64_t kc, const float *restrict a, const float *restrict b,
                                          float *restrict C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr,
                                          int accumulate)
{
    float acc[AOTC_GEMM_MR][AOTC_GEMM_NR];
    int64_t i, j, k;
    /* C's cache lines, for writing, while the tile computes: a C written once and not in cache
       otherwise makes every store of the tile wait for its line (measured: 1x1 convolutions at
       56x56 were 25% slower than with the bias written first, which had brought C in) */
    if (csc == 1) {
        for (i = 0; i < mr; ++i)
            for (j = 0; j < nr; j += AOTC_CACHE_LINE_FLOATS)
                AOTC_PREFETCH_W(C + i * rsc + j);
    } else if (rsc == 1) {
        for (j = 0; j < nr; ++j)
            AOTC_PREFETCH_W(C + j * csc);
    }
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
    if (mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR && csc == 1) {
        if (accumulate) {
            for (i = 0; i < AOTC_GEMM_MR; ++i)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    C[i * rsc + j] += acc[i][j];
        } else {
            for (i = 0; i < AOTC_GEMM_MR; ++i)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    C[i * rsc + j] = acc[i][j];
        }
    } else if (rsc == 1) {         /* C stored transposed: columns are contiguous */
        for (j = 0; j < nr; ++j)
            for (i = 0; i < mr; ++i)
                C[j * csc + i] = accumulate ? C[j * csc + i] + acc[i][j] : acc[i][j];
    } else {
        for (i = 0; i < mr; ++i)
            for (j = 0; j < nr; ++j)
                C[i * rsc + j * csc] = accumulate ? C[i * rsc + j * csc] + acc[i][j] : acc[i][j];
    }
}

/* The micro-kernel for one row of C (batch-1 products: an LSTM step, a classifier head):
 * C[0, 0:nr] (=, or += when accumulate) a * b over kc steps, a being the first row of one
 * packed A panel, so that 1 x NR is computed instead of MR x NR. */
AOTC_NOINLINE static void aotc_sgemm_tile_row(int64_t kc, const float *restrict a, const float *restrict b,
                                              float *restrict C, int64_t csc, int64_t nr, int accumulate)
{
    float acc[AOTC_GEMM_NR];
    int64_t j, k;
    for (j = 0; j < AOTC_GEMM_NR; ++j)
        acc[j] = 0.0f;
    for (k = 0; k < kc; ++k) {
        const float ak = a[k * AOTC_GEMM_MR];
        if (AOTC_GEMM_PREFETCH)
            for (j = 0; j < AOTC_GEMM_NR; j += AOTC_CACHE_LINE_FLOATS)
                AOTC_PREFETCH(b + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_NR + j);
        for (j = 0; j < AOTC_GEMM_NR; ++j)
            acc[j] += ak * b[k * AOTC_GEMM_NR + j];
    }
    for (j = 0; j < nr; ++j)
        C[j * csc] = accumulate ? C[j * csc] + acc[j] : acc[j];
}

/* One tile of C: the MR-row micro-kernel, or the one-row one when the tile has one row. */
static void aotc_sgemm_tile_any(int64_t kc, const float *a, const float *b, float *C, int64_t rsc, int64_t csc,
                                int64_t mr, int64_t nr, int accumulate)
{
    if (mr == 1)
        aotc_sgemm_tile_row(kc, a, b, C, csc, nr, accumulate);
    else
        aotc_sgemm_tile(kc, a, b, C, rsc, csc, mr, nr, accumulate);
}

/* What runs on a finished tile: rows [i0, i1) x columns [j0, j1) of C. */
typedef void (*aotc_tile_fn)(void *args, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

#define AOTC_GEMM_SPLIT_NONE 0
#define AOTC_GEMM_SPLIT_ROWS 1
#define AOTC_GEMM_SPLIT_COLS 2

/* One GEMM: C[M,N] (=, or += when accumulate) A[M,K] * B[K,N]. A is (A, rsa, csa): element
 * (i, k) at A[i*rsa + k*csa], or packed at compile time when rsa == csa == 0; B likewise with
 * (k, j) at B[k*rsb + j*csb]; C with (i, j) at C[i*rsc + j*csc]. `work` holds the packed
 * blocks of the strided operands (work_floats per thread). */
typedef struct {
    int64_t M, N, K;
    const float *A;
    int64_t rsa, csa;
    const float *B;
    int64_t rsb, csb;
    float *C;
    int64_t rsc, csc;
    int accumulate;
    int split;                  /* AOTC_GEMM_SPLIT_*: how threads share C */
    float *work;
    int64_t work_floats;
    aotc_tile_fn epilogue;      /* NULL: none */
    void *epilogue_args;
} aotc_sgemm_call;

/* Rows [m0, m1) x columns [n0, n1) of C (m0 a multiple of MR, n0 of NR, so that packed
 * operands can be entered at their panels). */
static void aotc_sgemm_block(const aotc_sgemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                             float *work)
{
    const int a_packed = g->rsa == 0 && g->csa == 0, b_packed = g->rsb == 0 && g->csb == 0;
    const int64_t K = g->K, M = m1 - m0, N = n1 - n0;
    const int64_t kstep = aotc_sgemm_kstep(K);
    const int64_t nc_max = aotc_gemm_min(AOTC_GEMM_NC, N);
    const int64_t Mpad = (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR * AOTC_GEMM_MR;
    const int64_t Npad = (g->N + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR;
    float *bwork = work;
    float *awork = b_packed ? work : work + kstep * ((nc_max + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR);
    float *C0 = g->C + m0 * g->rsc + n0 * g->csc;
    int64_t jc, pc, ic, jr, ir, i, j;
    if (M <= 0 || N <= 0)
        return;
    if (K == 0) {
        if (!g->accumulate)
            for (i = 0; i < M; ++i)
                for (j = 0; j < N; ++j)
                    C0[i * g->rsc + j * g->csc] = 0.0f;
        if (g->epilogue)
            g->epilogue(g->epilogue_args, m0, m1, n0, n1);
        return;
    }
    for (jc = 0; jc < N; jc += AOTC_GEMM_NC) {
        const int64_t nc = aotc_gemm_min(AOTC_GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc);
            const int last = pc + kc == K;
            const float *bp;
            if (b_packed) {
                bp = g->B + pc * Npad + (n0 + jc) * kc;
            } else {
                aotc_sgemm_pack_b(kc, nc, g->B + pc * g->rsb + (n0 + jc) * g->csb, g->rsb, g->csb, bwork);
                bp = bwork;
            }
            for (ic = 0; ic < M; ic += AOTC_GEMM_MC) {
                const int64_t mc = aotc_gemm_min(AOTC_GEMM_MC, M - ic);
                const float *ap;
                if (a_packed) {
                    ap = g->A + pc * Mpad + (m0 + ic) * kc;
                } else {
                    aotc_sgemm_pack_a(mc, kc, g->A + (m0 + ic) * g->rsa + pc * g->csa, g->rsa, g->csa, awork);
                    ap = awork;
                }
                if (last && g->epilogue) {
                    /* the last K block of a GEMM with an epilogue: tiles along the rows of C, each
                       finished by the epilogue, so that it reads its operands (a residual) as a
                       few forward streams (down the rows, the reads jump a row apart per tile and
                       the prefetchers lose them: 28% slower at 256 x 3136 x 64) */
                    for (ir = 0; ir < mc; ir += AOTC_GEMM_MR)
                        for (jr = 0; jr < nc; jr += AOTC_GEMM_NR) {
                            const int64_t mr = aotc_gemm_min(AOTC_GEMM_MR, mc - ir);
                            const int64_t nr = aotc_gemm_min(AOTC_GEMM_NR, nc - jr);
                            aotc_sgemm_tile_any(kc, ap + ir * kc, bp + jr * kc,
                                                C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc, g->rsc, g->csc,
                                                mr, nr, g->accumulate || pc > 0);
                            g->epilogue(g->epilogue_args, m0 + ic + ir, m0 + ic + ir + mr,
                                        n0 + jc + jr, n0 + jc + jr + nr);
                        }
                } else {
                    /* B's micro-panel stays in L1 while the tiles walk down A's panels */
                    for (jr = 0; jr < nc; jr += AOTC_GEMM_NR)
                        for (ir = 0; ir < mc; ir += AOTC_GEMM_MR)
                            aotc_sgemm_tile_any(kc, ap + ir * kc, bp + jr * kc,
                                                C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc, g->rsc, g->csc,
                                                aotc_gemm_min(AOTC_GEMM_MR, mc - ir), aotc_gemm_min(AOTC_GEMM_NR, nc - jr),
                                                g->accumulate || pc > 0);
                }
            }
        }
    }
}

/* Thread `thread` of a split GEMM: panels [begin, end) of the split dimension. */
static void aotc_sgemm_part(void *args, int64_t begin, int64_t end, int thread)
{
    const aotc_sgemm_call *g = (const aotc_sgemm_call *)args;
    float *work = g->work ? g->work + thread * g->work_floats : NULL;
    if (g->split == AOTC_GEMM_SPLIT_ROWS)
        aotc_sgemm_block(g, begin * AOTC_GEMM_MR, aotc_gemm_min(end * AOTC_GEMM_MR, g->M), 0, g->N, work);
    else
        aotc_sgemm_block(g, 0, g->M, begin * AOTC_GEMM_NR, aotc_gemm_min(end * AOTC_GEMM_NR, g->N), work);
}

/* Runs one GEMM, split among the pool's threads as g->split says (pool NULL: this thread). */
static void aotc_sgemm(aotc_pool *pool, const aotc_sgemm_call *g)
{
    if (!pool || g->split == AOTC_GEMM_SPLIT_NONE) {
        aotc_sgemm_block(g, 0, g->M, 0, g->N, g->work);
        return;
    }
    if (g->split == AOTC_GEMM_SPLIT_ROWS)
        aotc_parallel_for(pool, (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR, aotc_sgemm_part, (void *)g);
    else
        aotc_parallel_for(pool, (g->N + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR, aotc_sgemm_part, (void *)g);
}

#endif
