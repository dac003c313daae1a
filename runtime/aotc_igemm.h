/* aotc runtime: integer matrix multiply of 8-bit operands, exact in int32.
 *   C[M,N] (int32) (=, or += when accumulate) A[M,K] . B[K,N], then an epilogue on every tile
 * where one operand is uint8 and the other int8 (`a_unsigned`: A uint8 and B int8, else A int8
 * and B uint8). Quantized MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv compile to
 * it: the products of the raw 8-bit values are summed here, and the uint8 operand's zero point
 * comes off in the epilogue as a constant per row or column (aotc/schedule/gemm_cpu.py).
 *
 * The blocking, the threading and the epilogue are the float GEMM's (aotc_gemm_packed.h, whose
 * MR x NR tile and KC, MC, NC blocks it takes). The operands are packed in quads of K: 4
 * consecutive k of a row of A, or of a column of B, are 4 adjacent bytes, so that one 32-bit
 * lane holds them:
 *   A in MR-row panels:    Ap[(q*MR + i)*4 + t] = A(i, 4q + t)
 *   B in NR-column panels: Bp[(q*NR + j)*4 + t] = B(4q + t, j)
 * zero past M, N and K (a zero byte adds nothing). K blocks are a multiple of 4 but for the last
 * (aotc_igemm_kstep); a constant operand packed at compile time holds K block after K block,
 * each with all its panels (Mpad = M rounded up to MR; kc4 = the block's k rounded up to 4):
 *   A: block at k0 starts at Ap + k0*Mpad; its panel p at + p*kc4*MR   (B likewise with NR)
 *
 * The tile: MR x NR int32 sums, per quad each row's 4 bytes of A times each column's 4 of B.
 * Which tile runs is chosen at run time, so that one artifact runs on every AVX-512 CPU:
 *   - AVX-512 VNNI: one vpdpbusd adds 16 columns' 4 products (uint8 x int8, summed in int32
 *     without saturation: 4 x 255 x 128 is far from 2^31);
 *   - AVX-512BW without VNNI: the bytes widened to 16 bits, then vpmaddwd (exact 16 x 16-bit
 *     products, summed in pairs into int32), about the float tile's multiply-adds per cycle.
 *     (vpmaddubsw would take the bytes as they are, but saturates its 16-bit pair sums:
 *     2 x 255 x -128 does not fit);
 *   - elsewhere plain C. */
#ifndef AOTC_IGEMM_H
#define AOTC_IGEMM_H

#include <stdint.h>
#include <string.h>

#include "aotc_gemm_packed.h"

/* (AOTC_IGEMM_PLAIN: the plain C tile only; AOTC_IGEMM_NO_VNNI: never the VNNI tile. Both are for
 * tests/test_igemm.py, which compiles every tile on a CPU that has VNNI) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && AOTC_GEMM_NR % 16 == 0 && AOTC_GEMM_MR * AOTC_GEMM_NR / 16 <= 24 && \
    AOTC_GEMM_MR % 2 == 0 && !defined(AOTC_IGEMM_PLAIN)
#define AOTC_IGEMM_AVX512 1
#include <immintrin.h>
#else
#define AOTC_IGEMM_AVX512 0
#endif

/* B's panels packed 16 columns at a time by SSE2 shuffles (every x86-64 CPU has them) */
#if defined(__SSE2__) && AOTC_GEMM_NR % 16 == 0 && !defined(AOTC_IGEMM_PLAIN)
#define AOTC_IGEMM_SSE2 1
#include <emmintrin.h>
#else
#define AOTC_IGEMM_SSE2 0
#endif

/* the tiles (aotc_igemm_tile_kind) */
enum { AOTC_IGEMM_TILE_PLAIN = 0, AOTC_IGEMM_TILE_AVX512BW = 1, AOTC_IGEMM_TILE_VNNI = 2 };

/* K block: the float GEMM's, rounded up to a whole number of quads */
static int64_t aotc_igemm_kstep(int64_t K)
{
    return (aotc_sgemm_kstep(K) + 3) / 4 * 4;
}

/* Ap <- rows [0, m) x k [0, kc) of A (element (i, k) at A[i*rs + k*cs]) as MR-row panels of
 * quads; rows past m and k past kc are zero. */
static void aotc_igemm_pack_a(int64_t m, int64_t kc, const uint8_t *A, int64_t rs, int64_t cs, uint8_t *restrict Ap)
{
    const int64_t quads = (kc + 3) / 4;
    int64_t i0, i, q, t;
    for (i0 = 0; i0 < m; i0 += AOTC_GEMM_MR, Ap += quads * AOTC_GEMM_MR * 4) {
        const int64_t mr = aotc_gemm_min(AOTC_GEMM_MR, m - i0);
        for (q = 0; q < quads; ++q)
            for (i = 0; i < AOTC_GEMM_MR; ++i)
                for (t = 0; t < 4; ++t)
                    Ap[(q * AOTC_GEMM_MR + i) * 4 + t] = i < mr && 4 * q + t < kc ? A[(i0 + i) * rs + (4 * q + t) * cs] : 0;
    }
}

/* Bp <- k [0, kc) x columns [0, n) of B (element (k, j) at B[k*rs + j*cs]) as NR-column
 * panels of quads; columns past n and k past kc are zero. */
static void aotc_igemm_pack_b(int64_t kc, int64_t n, const uint8_t *B, int64_t rs, int64_t cs, uint8_t *restrict Bp)
{
    const int64_t quads = (kc + 3) / 4;
    int64_t j0, j, q, t;
    for (j0 = 0; j0 < n; j0 += AOTC_GEMM_NR, Bp += quads * AOTC_GEMM_NR * 4) {
        const int64_t nr = aotc_gemm_min(AOTC_GEMM_NR, n - j0);
        for (q = 0; q < quads; ++q) {
            uint8_t *restrict d = Bp + q * AOTC_GEMM_NR * 4;
            if (nr == AOTC_GEMM_NR && cs == 1 && 4 * q + 3 < kc) {
                const uint8_t *b = B + 4 * q * rs + j0;
#if AOTC_IGEMM_SSE2
                /* 16 columns at a time: the 4 rows' bytes interleaved in pairs, then the pairs */
                for (j = 0; j < AOTC_GEMM_NR; j += 16) {
                    const __m128i r0 = _mm_loadu_si128((const __m128i *)(b + j));
                    const __m128i r1 = _mm_loadu_si128((const __m128i *)(b + rs + j));
                    const __m128i r2 = _mm_loadu_si128((const __m128i *)(b + 2 * rs + j));
                    const __m128i r3 = _mm_loadu_si128((const __m128i *)(b + 3 * rs + j));
                    const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
                    const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
                    _mm_storeu_si128((__m128i *)(d + j * 4), _mm_unpacklo_epi16(lo01, lo23));
                    _mm_storeu_si128((__m128i *)(d + j * 4 + 16), _mm_unpackhi_epi16(lo01, lo23));
                    _mm_storeu_si128((__m128i *)(d + j * 4 + 32), _mm_unpacklo_epi16(hi01, hi23));
                    _mm_storeu_si128((__m128i *)(d + j * 4 + 48), _mm_unpackhi_epi16(hi01, hi23));
                }
                (void)t;
#else
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    for (t = 0; t < 4; ++t)
                        d[j * 4 + t] = b[t * rs + j];
#endif
                continue;
            }
            for (j = 0; j < AOTC_GEMM_NR; ++j)
                for (t = 0; t < 4; ++t)
                    d[j * 4 + t] = j < nr && 4 * q + t < kc ? B[(4 * q + t) * rs + (j0 + j) * cs] : 0;
        }
    }
}

/* The tile's sums over `quads` quads, in plain C: sum[i][j] of A panel a, B panel b, with A
 * uint8 and B int8 when a_unsigned (a constant where inlined), else the other way round. */
static inline void aotc_igemm_sums(const int a_unsigned, int64_t quads, const uint8_t *restrict a,
                                   const uint8_t *restrict b, int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR])
{
    int64_t q, i, j, t;
    for (i = 0; i < AOTC_GEMM_MR; ++i)
        for (j = 0; j < AOTC_GEMM_NR; ++j)
            sum[i][j] = 0;
    for (q = 0; q < quads; ++q)
        for (i = 0; i < AOTC_GEMM_MR; ++i)
            for (j = 0; j < AOTC_GEMM_NR; ++j) {
                int32_t s = 0;
                for (t = 0; t < 4; ++t) {
                    const uint8_t x = a[(q * AOTC_GEMM_MR + i) * 4 + t], y = b[(q * AOTC_GEMM_NR + j) * 4 + t];
                    s += a_unsigned ? (int32_t)x * (int32_t)(int8_t)y : (int32_t)(int8_t)x * (int32_t)y;
                }
                sum[i][j] += s;
            }
}

#if AOTC_IGEMM_AVX512
/* The tile with AVX-512 VNNI: per quad, the 4 bytes of each row of A broadcast to every lane,
 * one vpdpbusd per vector of 16 columns (its first multiplicand is the unsigned one). A whole
 * tile of a C with contiguous rows is stored from the registers (as aotc_igemm_tile stores it,
 * C + sum when accumulate); others go through `sum` (returns 0: the caller stores them). */
#define AOTC_IGEMM_V (AOTC_GEMM_NR / 16)
__attribute__((target("avx512f,avx512vnni"))) static inline int
aotc_igemm_tile_vnni(const int a_unsigned, int64_t quads, const uint8_t *restrict a, const uint8_t *restrict b,
                     int32_t *C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr, int accumulate,
                     int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR])
{
    __m512i acc[AOTC_GEMM_MR][AOTC_IGEMM_V];
    int64_t q;
    int i, v;
    AOTC_UNROLL_FULLY
    for (i = 0; i < AOTC_GEMM_MR; ++i) {
        AOTC_UNROLL_FULLY
        for (v = 0; v < AOTC_IGEMM_V; ++v)
            acc[i][v] = _mm512_setzero_si512();
    }
    for (q = 0; q < quads; ++q) {
        __m512i bq[AOTC_IGEMM_V];
        if (AOTC_GEMM_PREFETCH)
            AOTC_PREFETCH(b + (q + AOTC_GEMM_PREFETCH / 4) * AOTC_GEMM_NR * 4);
        AOTC_UNROLL_FULLY
        for (v = 0; v < AOTC_IGEMM_V; ++v)
            bq[v] = _mm512_loadu_si512((const void *)(b + (q * AOTC_GEMM_NR + 16 * v) * 4));
        AOTC_UNROLL_FULLY
        for (i = 0; i < AOTC_GEMM_MR; ++i) {
            int32_t four;
            __m512i aq;
            memcpy(&four, a + (q * AOTC_GEMM_MR + i) * 4, 4);
            aq = _mm512_set1_epi32(four);
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_IGEMM_V; ++v)
                acc[i][v] = a_unsigned ? _mm512_dpbusd_epi32(acc[i][v], aq, bq[v])
                                       : _mm512_dpbusd_epi32(acc[i][v], bq[v], aq);
        }
    }
    if (mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR && csc == 1) {
        AOTC_UNROLL_FULLY
        for (i = 0; i < AOTC_GEMM_MR; ++i) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_IGEMM_V; ++v) {
                int32_t *c = C + i * rsc + 16 * v;
                _mm512_storeu_si512((void *)c, accumulate ? _mm512_add_epi32(_mm512_loadu_si512((const void *)c), acc[i][v])
                                                          : acc[i][v]);
            }
        }
        return 1;
    }
    AOTC_UNROLL_FULLY
    for (i = 0; i < AOTC_GEMM_MR; ++i) {
        AOTC_UNROLL_FULLY
        for (v = 0; v < AOTC_IGEMM_V; ++v)
            _mm512_storeu_si512((void *)&sum[i][16 * v], acc[i][v]);
    }
    return 0;
}

/* The VNNI tile for one row of C (a batch-1 product: an LSTM step, where the MR-row tile would
 * compute MR rows for one): its quads go round AOTC_IGEMM_CHAINS separate sums, added at the
 * end, since each vpdpbusd waits for the last one into its sum and one row has few sums (the
 * float one-row tile does the same, aotc_gemm_packed.h). Stores as aotc_igemm_tile_vnni does. */
#define AOTC_IGEMM_CHAINS 4
__attribute__((target("avx512f,avx512vnni"))) static inline int
aotc_igemm_row_vnni(const int a_unsigned, int64_t quads, const uint8_t *restrict a, const uint8_t *restrict b,
                    int32_t *C, int64_t csc, int64_t nr, int accumulate, int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR])
{
    __m512i acc[AOTC_IGEMM_CHAINS][AOTC_IGEMM_V];
    int64_t q = 0;
    int u, v;
    AOTC_UNROLL_FULLY
    for (u = 0; u < AOTC_IGEMM_CHAINS; ++u) {
        AOTC_UNROLL_FULLY
        for (v = 0; v < AOTC_IGEMM_V; ++v)
            acc[u][v] = _mm512_setzero_si512();
    }
    for (; q < quads; q += AOTC_IGEMM_CHAINS) {
        AOTC_UNROLL_FULLY
        for (u = 0; u < AOTC_IGEMM_CHAINS; ++u) {
            int32_t four;
            __m512i aq;
            if (q + u >= quads)
                break;
            memcpy(&four, a + (q + u) * AOTC_GEMM_MR * 4, 4);
            aq = _mm512_set1_epi32(four);
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_IGEMM_V; ++v) {
                const __m512i bq = _mm512_loadu_si512((const void *)(b + ((q + u) * AOTC_GEMM_NR + 16 * v) * 4));
                acc[u][v] = a_unsigned ? _mm512_dpbusd_epi32(acc[u][v], aq, bq) : _mm512_dpbusd_epi32(acc[u][v], bq, aq);
            }
        }
    }
    AOTC_UNROLL_FULLY
    for (v = 0; v < AOTC_IGEMM_V; ++v) {
        __m512i total = acc[0][v];
        AOTC_UNROLL_FULLY
        for (u = 1; u < AOTC_IGEMM_CHAINS; ++u)
            total = _mm512_add_epi32(total, acc[u][v]);
        if (nr == AOTC_GEMM_NR && csc == 1) {
            int32_t *c = C + 16 * v;
            _mm512_storeu_si512((void *)c, accumulate ? _mm512_add_epi32(_mm512_loadu_si512((const void *)c), total)
                                                      : total);
        } else {
            _mm512_storeu_si512((void *)&sum[0][16 * v], total);
        }
    }
    return nr == AOTC_GEMM_NR && csc == 1;
}

/* The tile with AVX-512BW, for CPUs without VNNI. Per quad, each vector of 16 columns' bytes
 * (4 a column) is widened into two of 32 16-bit values, columns 0-7 and 8-15; a row's 4 bytes of
 * A, widened, go to every 64-bit lane; vpmaddwd then sums each column's first two products in
 * one 32-bit lane and its last two in the next. The pairs of lanes are added once, at the end.
 * That is two accumulators per 16 columns, so the tile's rows run in two halves (each reading
 * the B panel again, from the L1 cache), to stay within the 32 registers. Stores as the VNNI
 * tile does. */
#define AOTC_IGEMM_HALF (AOTC_GEMM_MR / 2)
__attribute__((target("avx512f,avx512bw"))) static inline int
aotc_igemm_tile_bw(const int a_unsigned, int64_t quads, const uint8_t *restrict a, const uint8_t *restrict b,
                   int32_t *C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr, int accumulate,
                   int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR])
{
    /* the column sums: even lanes of the pair sums of columns 0-7 and then of 8-15, plus the odd */
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const int whole = mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR && csc == 1;
    int h, i, v;
    for (h = 0; h < AOTC_GEMM_MR; h += AOTC_IGEMM_HALF) {
        __m512i lo[AOTC_IGEMM_HALF][AOTC_IGEMM_V], hi[AOTC_IGEMM_HALF][AOTC_IGEMM_V];
        int64_t q;
        AOTC_UNROLL_FULLY
        for (i = 0; i < AOTC_IGEMM_HALF; ++i) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_IGEMM_V; ++v)
                lo[i][v] = hi[i][v] = _mm512_setzero_si512();
        }
        for (q = 0; q < quads; ++q) {
            __m512i blo[AOTC_IGEMM_V], bhi[AOTC_IGEMM_V];
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_IGEMM_V; ++v) {
                const uint8_t *p = b + (q * AOTC_GEMM_NR + 16 * v) * 4;
                const __m256i b0 = _mm256_loadu_si256((const void *)p), b1 = _mm256_loadu_si256((const void *)(p + 32));
                /* B is the int8 operand when A is the uint8 one */
                blo[v] = a_unsigned ? _mm512_cvtepi8_epi16(b0) : _mm512_cvtepu8_epi16(b0);
                bhi[v] = a_unsigned ? _mm512_cvtepi8_epi16(b1) : _mm512_cvtepu8_epi16(b1);
            }
            AOTC_UNROLL_FULLY
            for (i = 0; i < AOTC_IGEMM_HALF; ++i) {
                int32_t four;
                __m128i a4;
                __m512i aw;
                memcpy(&four, a + (q * AOTC_GEMM_MR + h + i) * 4, 4);
                a4 = _mm_cvtsi32_si128(four);
                aw = _mm512_broadcastq_epi64(a_unsigned ? _mm_cvtepu8_epi16(a4) : _mm_cvtepi8_epi16(a4));
                AOTC_UNROLL_FULLY
                for (v = 0; v < AOTC_IGEMM_V; ++v) {
                    lo[i][v] = _mm512_add_epi32(lo[i][v], _mm512_madd_epi16(blo[v], aw));
                    hi[i][v] = _mm512_add_epi32(hi[i][v], _mm512_madd_epi16(bhi[v], aw));
                }
            }
        }
        AOTC_UNROLL_FULLY
        for (i = 0; i < AOTC_IGEMM_HALF; ++i) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_IGEMM_V; ++v) {
                const __m512i s = _mm512_add_epi32(_mm512_permutex2var_epi32(lo[i][v], even, hi[i][v]),
                                                   _mm512_permutex2var_epi32(lo[i][v], odd, hi[i][v]));
                if (whole) {
                    int32_t *c = C + (h + i) * rsc + 16 * v;
                    _mm512_storeu_si512((void *)c, accumulate ? _mm512_add_epi32(_mm512_loadu_si512((const void *)c), s) : s);
                } else {
                    _mm512_storeu_si512((void *)&sum[h + i][16 * v], s);
                }
            }
        }
    }
    return whole;
}

/* Which tile this CPU runs (libgcc's cpuid table, filled when the program starts) */
static inline int aotc_igemm_tile_kind(void)
{
#ifndef AOTC_IGEMM_NO_VNNI
    if (__builtin_cpu_supports("avx512vnni"))
        return AOTC_IGEMM_TILE_VNNI;
#endif
    return AOTC_IGEMM_TILE_AVX512BW;
}
#else
static inline int aotc_igemm_tile_kind(void)
{
    return AOTC_IGEMM_TILE_PLAIN;
}
#endif

/* The tile's sums over `quads` quads by the tile of `kind`: stored into C (whole tiles of a C
 * with contiguous columns, = or += when accumulate; returns 1) or else into `sum` (returns 0) */
static inline int aotc_igemm_tile_by(int a_unsigned, int kind, int64_t quads, const uint8_t *a, const uint8_t *b,
                                     int32_t *C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr, int accumulate,
                                     int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR])
{
#if AOTC_IGEMM_AVX512
    if (kind == AOTC_IGEMM_TILE_VNNI && mr == 1)
        return a_unsigned ? aotc_igemm_row_vnni(1, quads, a, b, C, csc, nr, accumulate, sum)
                          : aotc_igemm_row_vnni(0, quads, a, b, C, csc, nr, accumulate, sum);
    if (kind == AOTC_IGEMM_TILE_VNNI)
        return a_unsigned ? aotc_igemm_tile_vnni(1, quads, a, b, C, rsc, csc, mr, nr, accumulate, sum)
                          : aotc_igemm_tile_vnni(0, quads, a, b, C, rsc, csc, mr, nr, accumulate, sum);
    if (kind == AOTC_IGEMM_TILE_AVX512BW)
        return a_unsigned ? aotc_igemm_tile_bw(1, quads, a, b, C, rsc, csc, mr, nr, accumulate, sum)
                          : aotc_igemm_tile_bw(0, quads, a, b, C, rsc, csc, mr, nr, accumulate, sum);
#else
    (void)kind, (void)C, (void)rsc, (void)csc, (void)mr, (void)nr, (void)accumulate;
#endif
    if (a_unsigned)
        aotc_igemm_sums(1, quads, a, b, sum);
    else
        aotc_igemm_sums(0, quads, a, b, sum);
    return 0;
}

/* The tile's sums into `sum` (for the generated whole tiles below) */
static inline void aotc_igemm_tile_sums(int a_unsigned, int kind, int64_t quads, const uint8_t *a, const uint8_t *b,
                                        int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR])
{
    aotc_igemm_tile_by(a_unsigned, kind, quads, a, b, NULL, 0, 0, AOTC_GEMM_MR, AOTC_GEMM_NR, 0, sum);
}

/* A whole MR x NR tile of an integer GEMM's last K block, epilogue included: epilogue(a . b over
 * `quads` quads (+ C when accumulate: the earlier K blocks' sums)) for the tile at rows i0..,
 * columns j0.. of C (at the tile; C's columns contiguous). The C emitter generates one where
 * the epilogue (the zero point taken off, requantization, the next layer's input) can run on
 * the sums of aotc_igemm_tile_sums, a row of lanes at a time, and needs no int32 C stored: the
 * sums then never leave the L1 cache, where storing them and running the epilogue over C
 * after took up to a third of a quantized 1x1 convolution. The edge tiles keep the plain tile
 * and the epilogue function. Generated where the compiler takes OpenMP's SIMD pragmas (as
 * for the float GEMM's, aotc_gemm_packed.h). */
typedef void (*aotc_whole_itile_fn)(void *args, int kind, int64_t quads, const uint8_t *a, const uint8_t *b,
                                    int32_t *C, int64_t i0, int64_t j0, int accumulate);
#if defined(AOTC_OPENMP_SIMD)
#define AOTC_ITILE_EPILOGUES 1
#define AOTC_WHOLE_ITILE(fn) fn
#define AOTC_ITILE_LANES _Pragma("omp simd")
#else
#define AOTC_ITILE_EPILOGUES 0
#define AOTC_WHOLE_ITILE(fn) NULL
#endif

/* One tile: C[0:mr, 0:nr] (=, or += when accumulate) a . b over `quads` quads (one packed panel
 * each); element (i, j) of C at C[i*rsc + j*csc]. */
AOTC_NOINLINE static void aotc_igemm_tile(int a_unsigned, int kind, int64_t quads, const uint8_t *a, const uint8_t *b,
                                          int32_t *C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr, int accumulate)
{
    int32_t sum[AOTC_GEMM_MR][AOTC_GEMM_NR];
    int64_t i, j;
    if (aotc_igemm_tile_by(a_unsigned, kind, quads, a, b, C, rsc, csc, mr, nr, accumulate, sum))
        return;
    for (i = 0; i < mr; ++i)
        for (j = 0; j < nr; ++j)
            C[i * rsc + j * csc] = accumulate ? C[i * rsc + j * csc] + sum[i][j] : sum[i][j];
}

/* One integer GEMM (see the top of this file): A as (A, rsa, csa) with element (i, k) at
 * A[i*rsa + k*csa], or packed at compile time when rsa == csa == 0; B likewise with (k, j) at
 * B[k*rsb + j*csb]; C with (i, j) at C[i*rsc + j*csc]. `work` holds the packed blocks of the
 * strided operand (work_bytes per thread). */
typedef struct {
    int64_t M, N, K;
    const void *A;
    int64_t rsa, csa;
    const void *B;
    int64_t rsb, csb;
    int a_unsigned;             /* 1: A uint8, B int8; 0: A int8, B uint8 */
    int32_t *C;
    int64_t rsc, csc;
    int accumulate;
    int split;                  /* AOTC_GEMM_SPLIT_*: how threads share C */
    uint8_t *work;
    int64_t work_bytes;
    aotc_tile_fn epilogue;      /* NULL: none */
    void *epilogue_args;
    aotc_whole_itile_fn tile;   /* NULL, or the epilogue's whole tiles (csc must be 1) */
} aotc_igemm_call;

/* B's K block at pc (kc long) for columns [col, col + nc) as NR-column panels of quads: where
 * it was packed at compile time, or packed here into bwork */
static const uint8_t *aotc_igemm_b_block(const aotc_igemm_call *g, int64_t pc, int64_t kc, int64_t col, int64_t nc,
                                         uint8_t *bwork)
{
    const uint8_t *B = (const uint8_t *)g->B;
    if (g->rsb == 0 && g->csb == 0) {
        const int64_t Npad = (g->N + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR;
        return B + pc * Npad + col * ((kc + 3) / 4 * 4);
    }
    aotc_igemm_pack_b(kc, nc, B + pc * g->rsb + col * g->csb, g->rsb, g->csb, bwork);
    return bwork;
}

/* ---- AMX-INT8 (AOTC_IGEMM_AMX, the target's [gemm] int8_amx) ----
 * Where the CPU has AMX-INT8 (aotc_amx_ready), a product of at least 16 rows, columns and K runs
 * on the tiles: TDPBUSD (uint8 x int8) or TDPBSUD (int8 x uint8) adds 16 x 16 sums of 64 products
 * each, exactly in int32 as the other tiles. B's panels are the tiles' layout already: with
 * NR = 32, a quad row of a panel is 128 bytes, its first 64 the 4 bytes of columns 0-15, its last
 * 64 those of 16-31, so a B tile is 16 quad rows read 128 bytes apart. A is laid out in rows of
 * its block, k contiguous and rounded up to 64 with zeros (Ar[i*kp + k]; rows up to a multiple of
 * 32, zero), from the strided A or from its quad panels. The last K step of a panel may read up
 * to 15 quad rows past it (k past kc, times A's zeros): the packed constants and the scratch have
 * AOTC_IGEMM_AMX_TAIL bytes after them (schedule/gemm_cpu.py). 32 x 32 blocks of C: four tiles of
 * sums, stored, then the epilogue. */
#if AOTC_AMX && defined(AOTC_IGEMM_AMX) && AOTC_IGEMM_AMX && AOTC_IGEMM_AVX512 && AOTC_GEMM_NR == 32 && \
    !defined(AOTC_IGEMM_NO_AMX) && AOTC_GEMM_MC % 32 == 0
#define AOTC_IGEMM_ON_AMX 1
#define AOTC_IGEMM_AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw")))
#define AOTC_IGEMM_AMX_MIN 16
#define AOTC_IGEMM_AMX_TAIL 2048

static int64_t aotc_igemm_round(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

/* Ar <- rows [0, m) of A's block (kc long), strided (element (i, k) at A[i*rs + k*cs]) */
static void aotc_igemm_amx_rows(int64_t m, int64_t kc, const uint8_t *A, int64_t rs, int64_t cs, uint8_t *Ar)
{
    const int64_t kp = aotc_igemm_round(kc, 64), rows = aotc_igemm_round(m, 32);
    int64_t i, k;
    for (i = 0; i < rows; ++i) {
        uint8_t *d = Ar + i * kp;
        if (i >= m) {
            memset(d, 0, (size_t)kp);
            continue;
        }
        if (cs == 1) {
            memcpy(d, A + i * rs, (size_t)kc);
        } else {
            for (k = 0; k < kc; ++k)
                d[k] = A[i * rs + k * cs];
        }
        memset(d + kc, 0, (size_t)(kp - kc));
    }
}

/* Ar <- rows [0, m) of A's block from its quad panels (MR rows, kc4 = kc rounded up to 4): a
 * row's 16 quads (64 k) gathered at a time, MR quads apart */
AOTC_IGEMM_AMX_TARGET static void aotc_igemm_amx_panel_rows(int64_t m, int64_t kc, const uint8_t *Ap, uint8_t *Ar)
{
    const int64_t kc4 = (kc + 3) / 4 * 4, kp = aotc_igemm_round(kc, 64), rows = aotc_igemm_round(m, 32);
    const __m512i down = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(AOTC_GEMM_MR));
    int64_t i, q;
    for (i = 0; i < rows; ++i) {
        uint8_t *d = Ar + i * kp;
        const uint8_t *p = Ap + (i / AOTC_GEMM_MR) * kc4 * AOTC_GEMM_MR + (i % AOTC_GEMM_MR) * 4;
        if (i >= m) {
            memset(d, 0, (size_t)kp);
            continue;
        }
        for (q = 0; q < kp / 4; q += 16) {
            const int64_t left = kc4 / 4 - q;
            const __mmask16 live = (__mmask16)(left >= 16 ? 0xffff : left > 0 ? (1u << left) - 1 : 0);
            const __m512i x = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, down,
                                                          p + q * AOTC_GEMM_MR * 4, 4);
            _mm512_storeu_si512((void *)(d + 4 * q), x);
        }
    }
}

/* out[32 x 32] (row stride 32) <- a . b over kp values of k: a 32 rows of Ar (row stride kp), b
 * one NR = 32 panel of quads, from its first quad */
AOTC_IGEMM_AMX_TARGET static void aotc_igemm_amx_tile(int a_unsigned, int64_t kp, const uint8_t *a, const uint8_t *b,
                                                      int32_t *out)
{
    int64_t k;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (k = 0; k < kp; k += 64) {
        _tile_loadd(4, a + k, kp);
        _tile_loadd(5, a + 16 * kp + k, kp);
        _tile_loadd(6, b + k * 32, 128);         /* quads k/4 .. k/4 + 15, columns 0-15 */
        _tile_loadd(7, b + k * 32 + 64, 128);    /* ... columns 16-31 */
        if (a_unsigned) {
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(2, 5, 6);
            _tile_dpbusd(3, 5, 7);
        } else {
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(2, 5, 6);
            _tile_dpbsud(3, 5, 7);
        }
    }
    _tile_stored(0, out, 128);
    _tile_stored(1, out + 16, 128);
    _tile_stored(2, out + 16 * 32, 128);
    _tile_stored(3, out + 16 * 32 + 16, 128);
}

/* Rows [m0, m1) x columns [n0, n1) of C on the tiles (aotc_igemm_block's contract). `work`: the
 * other tiles' scratch (its layout), then A's rows. */
static void aotc_igemm_block_amx(const aotc_igemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, uint8_t *work)
{
    const int a_packed = g->rsa == 0 && g->csa == 0, b_packed = g->rsb == 0 && g->csb == 0;
    const int64_t K = g->K, M = m1 - m0, N = n1 - n0;
    const int64_t kstep = aotc_igemm_kstep(K);
    const int64_t Mpad = (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR * AOTC_GEMM_MR;
    const uint8_t *A = (const uint8_t *)g->A;
    uint8_t *bwork = work;
    uint8_t *Ar = work + (b_packed ? 0 : kstep * aotc_igemm_round(aotc_gemm_min(AOTC_GEMM_NC, g->N), AOTC_GEMM_NR)) +
                  (a_packed ? 0 : kstep * aotc_igemm_round(aotc_gemm_min(AOTC_GEMM_MC, g->M), AOTC_GEMM_MR));
    int32_t *C0 = g->C + m0 * g->rsc + n0 * g->csc;
    int32_t sums[32 * 32] __attribute__((aligned(64)));
    int64_t jc, pc, ic, jr, ir, i, j;
    aotc_amx_tiles_on();
    for (jc = 0; jc < N; jc += AOTC_GEMM_NC) {
        const int64_t nc = aotc_gemm_min(AOTC_GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc), kc4 = (kc + 3) / 4 * 4, kp = aotc_igemm_round(kc, 64);
            const int add = g->accumulate || pc > 0, last = pc + kc == K;
            const uint8_t *bp = aotc_igemm_b_block(g, pc, kc, n0 + jc, nc, bwork);
            for (ic = 0; ic < M; ic += AOTC_GEMM_MC) {
                const int64_t mc = aotc_gemm_min(AOTC_GEMM_MC, M - ic);
                if (a_packed)
                    aotc_igemm_amx_panel_rows(mc, kc, A + pc * Mpad + (m0 + ic) * kc4, Ar);
                else
                    aotc_igemm_amx_rows(mc, kc, A + (m0 + ic) * g->rsa + pc * g->csa, g->rsa, g->csa, Ar);
                for (jr = 0; jr < nc; jr += 32)
                    for (ir = 0; ir < mc; ir += 32) {
                        const int64_t mr = aotc_gemm_min(32, mc - ir), nr = aotc_gemm_min(32, nc - jr);
                        int32_t *c = C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc;
                        aotc_igemm_amx_tile(g->a_unsigned, kp, Ar + ir * kp, bp + jr * kc4, sums);
                        for (i = 0; i < mr; ++i)
                            for (j = 0; j < nr; ++j) {
                                int32_t *e = c + i * g->rsc + j * g->csc;
                                *e = add ? *e + sums[i * 32 + j] : sums[i * 32 + j];
                            }
                        if (last && g->epilogue)
                            g->epilogue(g->epilogue_args, m0 + ic + ir, m0 + ic + ir + mr,
                                        n0 + jc + jr, n0 + jc + jr + nr);
                    }
            }
        }
    }
    aotc_amx_tiles_off();
}

/* Does this product run on the tiles? (Decided by the whole product, as the float one's.) */
static int aotc_igemm_on_tiles(const aotc_igemm_call *g)
{
    return g->M >= AOTC_IGEMM_AMX_MIN && g->N >= AOTC_IGEMM_AMX_MIN && g->K >= AOTC_IGEMM_AMX_MIN &&
           aotc_amx_ready(AOTC_AMX_INT8);
}
#else
#define AOTC_IGEMM_ON_AMX 0
#endif

/* Rows [m0, m1) x columns [n0, n1) of C (m0 a multiple of MR, n0 of NR). */
static void aotc_igemm_block(const aotc_igemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, uint8_t *work)
{
    const int a_packed = g->rsa == 0 && g->csa == 0, b_packed = g->rsb == 0 && g->csb == 0;
    const int64_t K = g->K, M = m1 - m0, N = n1 - n0;
    const int64_t kstep = aotc_igemm_kstep(K);
    const int64_t Mpad = (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR * AOTC_GEMM_MR;
    const int64_t nc_max = aotc_gemm_min(AOTC_GEMM_NC, N);
    const uint8_t *A = (const uint8_t *)g->A;
    uint8_t *bwork = work;
    uint8_t *awork = b_packed ? work : work + kstep * ((nc_max + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR);
    int32_t *C0 = g->C + m0 * g->rsc + n0 * g->csc;
    const int kind = aotc_igemm_tile_kind();
    int64_t jc, pc, ic, jr, ir, i, j;
    if (M <= 0 || N <= 0)
        return;
#if AOTC_IGEMM_ON_AMX
    if (aotc_igemm_on_tiles(g)) {
        aotc_igemm_block_amx(g, m0, m1, n0, n1, work);
        return;
    }
#endif
    if (K == 0) {
        if (!g->accumulate)
            for (i = 0; i < M; ++i)
                for (j = 0; j < N; ++j)
                    C0[i * g->rsc + j * g->csc] = 0;
        if (g->epilogue)
            g->epilogue(g->epilogue_args, m0, m1, n0, n1);
        return;
    }
    for (jc = 0; jc < N; jc += AOTC_GEMM_NC) {
        const int64_t nc = aotc_gemm_min(AOTC_GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc), kc4 = (kc + 3) / 4 * 4;
            const int last = pc + kc == K;
            const uint8_t *bp = aotc_igemm_b_block(g, pc, kc, n0 + jc, nc, bwork);
            for (ic = 0; ic < M; ic += AOTC_GEMM_MC) {
                const int64_t mc = aotc_gemm_min(AOTC_GEMM_MC, M - ic);
                const uint8_t *ap;
                if (a_packed) {
                    ap = A + pc * Mpad + (m0 + ic) * kc4;
                } else {
                    aotc_igemm_pack_a(mc, kc, A + (m0 + ic) * g->rsa + pc * g->csa, g->rsa, g->csa, awork);
                    ap = awork;
                }
                /* tiles along the rows of C, each finished by the epilogue after the last K block
                   (as in aotc_sgemm_block) */
                for (ir = 0; ir < mc; ir += AOTC_GEMM_MR)
                    for (jr = 0; jr < nc; jr += AOTC_GEMM_NR) {
                        const int64_t mr = aotc_gemm_min(AOTC_GEMM_MR, mc - ir);
                        const int64_t nr = aotc_gemm_min(AOTC_GEMM_NR, nc - jr);
                        if (last && g->tile && mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR) {
                            g->tile(g->epilogue_args, kind, kc4 / 4, ap + ir * kc4, bp + jr * kc4,
                                    C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc, m0 + ic + ir, n0 + jc + jr,
                                    g->accumulate || pc > 0);
                            continue;
                        }
                        aotc_igemm_tile(g->a_unsigned, kind, kc4 / 4, ap + ir * kc4, bp + jr * kc4,
                                        C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc, g->rsc, g->csc, mr, nr,
                                        g->accumulate || pc > 0);
                        if (last && g->epilogue)
                            g->epilogue(g->epilogue_args, m0 + ic + ir, m0 + ic + ir + mr,
                                        n0 + jc + jr, n0 + jc + jr + nr);
                    }
            }
        }
    }
}

/* Thread `thread` of a split integer GEMM: panels [begin, end) of the split dimension. */
static void aotc_igemm_part(void *args, int64_t begin, int64_t end, int thread)
{
    const aotc_igemm_call *g = (const aotc_igemm_call *)args;
    uint8_t *work = g->work ? g->work + thread * g->work_bytes : NULL;
    if (g->split == AOTC_GEMM_SPLIT_ROWS)
        aotc_igemm_block(g, begin * AOTC_GEMM_MR, aotc_gemm_min(end * AOTC_GEMM_MR, g->M), 0, g->N, work);
    else
        aotc_igemm_block(g, 0, g->M, begin * AOTC_GEMM_NR, aotc_gemm_min(end * AOTC_GEMM_NR, g->N), work);
}

/* Runs one integer GEMM, split among the pool's threads as g->split says (pool NULL: this thread). */
static void aotc_igemm(aotc_pool *pool, const aotc_igemm_call *g)
{
    if (!pool || g->split == AOTC_GEMM_SPLIT_NONE) {
        aotc_igemm_block(g, 0, g->M, 0, g->N, g->work);
        return;
    }
    if (g->split == AOTC_GEMM_SPLIT_ROWS)
        aotc_parallel_for(pool, (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR, aotc_igemm_part, (void *)g);
    else
        aotc_parallel_for(pool, (g->N + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR, aotc_igemm_part, (void *)g);
}

#endif
