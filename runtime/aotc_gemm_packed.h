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
 * see aotc/schedule/gemm_cpu.py for its size), or, with rs == cs == 0, already packed: constant
 * weights are packed once at compile time, K block after K block, each block holding all
 * the panels (Mpad = M rounded up to MR):
 *   A: block at k0 starts at Ap + k0*Mpad; its panel p at + p*kc*MR   (B likewise with NR)
 * so the tiles read every operand as one forward stream. B may also be a convolution's
 * im2col matrix packed straight from the convolution's input (aotc_im2col), so that no
 * im2col buffer is written and read back.
 *
 * Blocking (Goto/BLIS): columns in blocks of NC, K in blocks of KC (B block in L2/L3), rows in
 * blocks of MC (A block in L2), then NR x MR tiles (B micro-panel in L1). The tile prefetches
 * both streams AOTC_GEMM_PREFETCH k steps ahead (0: no prefetch), and, where B is packed at
 * compile time (weights, which come from memory), a part of the B panel after its own into L2
 * (aotc_ahead), so that the panel's misses are spread over the tiles before it.
 *
 * C is strided too (element (i, j) at C[i*rsc + j*csc]), so a product computed transposed
 * lands in place. When a tile's last K block is stored, the call's `epilogue` (if any) runs on
 * it while it is in cache: that is where the compiler puts bias, activation and residual adds;
 * or, for the whole tiles of a call with `tile`, a tile the compiler generated computes the
 * sums (aotc_sgemm_tile_sums) and runs the epilogue on them in registers before any store.
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
 * C99: with GCC or Clang the tile is written in their vector extension (AOTC_TILE_VECTORS),
 * elsewhere in plain C that the compiler vectorizes over NR; the unroll pragmas, noinline and
 * prefetch hints are GCC/Clang spellings and vanish elsewhere. */
#ifndef AOTC_GEMM_PACKED_H
#define AOTC_GEMM_PACKED_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
#define AOTC_ALWAYS_INLINE static inline __attribute__((always_inline))
#define AOTC_NOINLINE __attribute__((noinline))
#define AOTC_PREFETCH(p) __builtin_prefetch(p)
#define AOTC_PREFETCH_W(p) __builtin_prefetch(p, 1)
#define AOTC_PREFETCH_L2(p) __builtin_prefetch(p, 0, 2)
#else
#define AOTC_ALWAYS_INLINE static inline
#define AOTC_NOINLINE
#define AOTC_PREFETCH(p) ((void)0)
#define AOTC_PREFETCH_W(p) ((void)0)
#define AOTC_PREFETCH_L2(p) ((void)0)
#endif
#define AOTC_CACHE_LINE_FLOATS 16



static int64_t aotc_gemm_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t aotc_gemm_max(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* The K block size for a K: K in ceil(K / KC) blocks as equal as can be, so none is a sliver
 * (aotc/kernel/gemm.py computes the same to lay out constants packed at compile time). */
static int64_t aotc_sgemm_kstep(int64_t K)
{
    const int64_t blocks = (K + AOTC_GEMM_KC - 1) / AOTC_GEMM_KC;
    return blocks ? (K + blocks - 1) / blocks : 0;
}

/* Packing an operand whose panels run across its contiguous direction (A by rows, B stored
 * transposed) is a transpose. With AVX-512, 16 x 16 blocks of it are transposed in registers:
 * the copy element by element took as long as the product itself on a 1x1 convolution of a
 * channels-last input to 24 channels (K 144, N 3136: B packed 0.11 ms of 0.38). */
#if defined(__AVX512F__)
#include <immintrin.h>
#define AOTC_PACK_TRANSPOSE 1
/* r[0..15] (16 rows of 16 floats) transposed in registers: t[c] holds the rows' elements c,
 * row i in lane i */
static inline void aotc_transpose16_regs(__m512 r[16], __m512 t[16])
{
    int i, e;
    /* per 128-bit lane L of four rows a, b, c, d: [a0 b0 a1 b1], [a2 b2 a3 b3], then
       [a0 b0 c0 d0] ... [a3 b3 c3 d3]: the lane's 4 x 4 block transposed */
    for (i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (i = 0; i < 16; i += 4) {
        const __m512d ab0 = _mm512_castps_pd(t[i]), ab1 = _mm512_castps_pd(t[i + 1]);
        const __m512d cd0 = _mm512_castps_pd(t[i + 2]), cd1 = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(ab0, cd0));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(ab0, cd0));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(ab1, cd1));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(ab1, cd1));
    }
    /* r[4q + e]: lane L holds rows 4q..4q+3 at column 4L + e; column 4L + e is lane L of
       r[e], r[4 + e], r[8 + e], r[12 + e], gathered by two rounds of 128-bit lane shuffles */
    for (e = 0; e < 4; ++e) {
        const __m512 x0 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88);        /* L0 L2 | L0 L2 */
        const __m512 y0 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xDD);        /* L1 L3 | L1 L3 */
        const __m512 x1 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
        const __m512 y1 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xDD);
        t[e] = _mm512_shuffle_f32x4(x0, x1, 0x88);                            /* column e */
        t[8 + e] = _mm512_shuffle_f32x4(x0, x1, 0xDD);                        /* column 8 + e */
        t[4 + e] = _mm512_shuffle_f32x4(y0, y1, 0x88);                        /* column 4 + e */
        t[12 + e] = _mm512_shuffle_f32x4(y0, y1, 0xDD);                       /* column 12 + e */
    }
}

/* The `rows` (at most 16) rows of 16 floats at s, s + ld, ... (only the first `valid` of each
 * read, the rest taken as zero), transposed: column c (the rows' elements c, in lanes 0..15;
 * lanes past `rows` zero) stored to d + c * dld, for c < valid, its lanes in `keep` only. */
static inline void aotc_transpose16_part(const float *s, int64_t ld, int rows, int valid, float *d, int64_t dld,
                                         __mmask16 keep)
{
    const __mmask16 m = aotc_mask16(valid);
    __m512 r[16], t[16];
    int i;
    for (i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(m, s + i * ld) : _mm512_setzero_ps();
    aotc_transpose16_regs(r, t);
    for (i = 0; i < valid; ++i)
        _mm512_mask_storeu_ps(d + i * dld, keep, t[i]);
}

static inline void aotc_transpose16(const float *s, int64_t ld, int rows, int valid, float *d, int64_t dld)
{
    aotc_transpose16_part(s, ld, rows, valid, d, dld, (__mmask16)0xFFFF);
}
#else
#define AOTC_PACK_TRANSPOSE 0
#endif

/* Ap <- rows [0, m) x cols [0, kc) of A (element (i, k) at A[i*rs + k*cs]) as MR-row panels
 * of kc rows each; rows past m are zero. */
static void aotc_sgemm_pack_a(int64_t m, int64_t kc, const float *A, int64_t rs, int64_t cs,
                              float *restrict Ap)
{
    int64_t i0, i, k;
#if AOTC_PACK_TRANSPOSE && (AOTC_GEMM_MR == 8 || AOTC_GEMM_MR == 16)
    if (cs == 1 && rs != 1) {
        /* A by rows: 16 rows at a time transposed, each column's lanes the k-th element of
           one panel (MR 16) or of two (MR 8: its first 8 lanes in one, the rest in the next) */
        for (i0 = 0; i0 < m; i0 += 16) {
            const int rows = (int)aotc_gemm_min(16, m - i0);
            float col[16 * 16];
            for (k = 0; k < kc; k += 16) {
                const int valid = (int)aotc_gemm_min(16, kc - k);
                int c;
                aotc_transpose16(A + i0 * rs + k, rs, rows, valid, col, 16);
                for (c = 0; c < valid; ++c) {
                    float *p = Ap + i0 * kc + (k + c) * AOTC_GEMM_MR;
                    if (AOTC_GEMM_MR == 16) {
                        memcpy(p, col + c * 16, 16 * sizeof(float));
                    } else {
                        memcpy(p, col + c * 16, 8 * sizeof(float));
                        if (rows > 8)
                            memcpy(p + 8 * kc, col + c * 16 + 8, 8 * sizeof(float));
                    }
                }
            }
        }
        return;
    }
#endif
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
        } else if (cs == 1) {
            /* the last, partial panel of contiguous rows: stated apart so that it stays a
               vector copy (left to the general loop below, GCC vectorized it for cs == 1 or
               not depending on what else the header held: LeNet-5 1.10x slower once) */
            for (k = 0; k < kc; ++k) {
                for (j = 0; j < nr; ++j)
                    Bp[k * AOTC_GEMM_NR + j] = b[k * rs + j];
                for (; j < AOTC_GEMM_NR; ++j)
                    Bp[k * AOTC_GEMM_NR + j] = 0.0f;
            }
#if AOTC_PACK_TRANSPOSE && AOTC_GEMM_NR % 16 == 0
        } else if (rs == 1 && cs != 1) {
            /* B stored transposed (column j contiguous): 16 columns x 16 rows at a time */
            for (j = 0; j < AOTC_GEMM_NR; j += 16)
                for (k = 0; k < kc; k += 16)
                    aotc_transpose16(b + j * cs + k, cs, (int)aotc_gemm_max(0, aotc_gemm_min(16, nr - j)),
                                     (int)aotc_gemm_min(16, kc - k), Bp + k * AOTC_GEMM_NR + j, AOTC_GEMM_NR);
#endif
        } else {
            for (k = 0; k < kc; ++k)
                for (j = 0; j < AOTC_GEMM_NR; ++j)
                    Bp[k * AOTC_GEMM_NR + j] = j < nr ? b[k * rs + j * cs] : 0.0f;
        }
    }
}

/* B of a convolution read from its input: the im2col matrix without the buffer. Element
 * (k, j), for k = (c*KH + kh)*KW + kw and j = oh*OW + ow, is x[(c*H + ih)*W + iw] with
 * ih = oh*SH - PH + kh*DH and iw = ow*SW - PW + kw*DW, or 0 where (ih, iw) is outside the
 * H x W input (aotc/kernel/ir.py ConvWindow; a 1-D convolution has H = KH = 1). */
typedef struct {
    const float *x;                 /* the input's first channel (of this group) */
    int64_t H, W, KH, KW, SH, SW, DH, DW, PH, PW, OH, OW;
} aotc_im2col;

/* d[0, len) <- s[0], s[SW], ..., s[SW*(len - 1)], or zeros when s is NULL */
static inline void aotc_copy_short(float *d, const float *s, int64_t len, int64_t SW)
{
    int64_t u;
    for (u = 0; u < len; ++u)
        d[u] = s ? s[u * SW] : 0.0f;
}

/* ceil(a / SW) for a > 0, without a division at strides 1 and 2 (the packer plans often) */
static inline int64_t aotc_im2col_steps(int64_t a, int64_t SW)
{
    return SW == 1 ? a : SW == 2 ? (a + 1) >> 1 : (a + SW - 1) / SW;
}

/* The columns [lo, hi) of a run of `len` output columns whose input columns are iw, iw + SW,
 * ... that lie inside [0, W). */
static void aotc_im2col_inside(int64_t iw, int64_t len, int64_t SW, int64_t W, int64_t *lo, int64_t *hi)
{
    int64_t l = 0, h = len;
    if (iw < 0)
        l = aotc_gemm_min(len, aotc_im2col_steps(-iw, SW));
    if (iw + (len - 1) * SW >= W)
        h = iw >= W ? 0 : aotc_gemm_min(len, aotc_im2col_steps(W - iw, SW));
    *lo = l;
    *hi = h < l ? l : h;
}

/* One copy into a panel row: dst[at, at + len) <- the channel's x[src], x[src + SW], ...,
 * within one group of 16 columns (`lanes`: the columns of its group it fills) */
typedef struct {
    int32_t src;               /* (a channel of a convolution's input has far fewer elements) */
    uint16_t lanes;
    uint8_t at, len;
} aotc_im2col_seg;

/* the columns planned together: one panel of B, or several of A's narrower ones */
#define AOTC_IM2COL_SPAN (AOTC_GEMM_NR > 64 ? AOTC_GEMM_NR : 64)
#define AOTC_IM2COL_GROUPS ((AOTC_IM2COL_SPAN + 15) / 16)   /* groups of 16 columns in a span's row */
#define AOTC_IM2COL_TAPS 64                                 /* taps planned at a time */
#define AOTC_IM2COL_AHEAD 2                                 /* channels read ahead of the packing */
#if AOTC_IM2COL_SPAN > 255
#error "the im2col packer keeps a span's columns in 8 bits: AOTC_GEMM_NR must be below 256"
#endif
#if AOTC_GEMM_MR > AOTC_GEMM_NR
#error "the im2col packer packs A's panels in B's panels' room: AOTC_GEMM_MR must be at most AOTC_GEMM_NR"
#endif
/* with AVX-512 and NR a multiple of 16, a stride-1 panel row is built in registers, 16 columns
 * at a time: each segment an expanding load into its lanes (reading just the segment) */
#if defined(__AVX512F__) && AOTC_GEMM_NR % 16 == 0
#define AOTC_IM2COL_EXPAND 1
#include <immintrin.h>
#else
#define AOTC_IM2COL_EXPAND 0
#endif

/* d[0, len) <- s[0], s[SW], ..., s[SW*(len - 1)] (len > 0): with AVX2, 8 floats at a time at
 * strides 1 and 2 (a stride-2 block is 16 loaded floats, the even ones kept; the last of them
 * is never needed, so it is not loaded, which keeps every read inside the segment); the
 * remainder, and other strides, one at a time. */
#if defined(__AVX2__) && !AOTC_IM2COL_EXPAND
#include <immintrin.h>
static inline void aotc_im2col_copy(float *restrict d, const float *restrict s, int64_t len, int64_t SW)
{
    int64_t u = 0;
    if (SW == 1) {
        for (; u + 8 <= len; u += 8)
            _mm256_storeu_ps(d + u, _mm256_loadu_ps(s + u));
    } else if (SW == 2) {
        const __m256i first7 = _mm256_set_epi32(0, -1, -1, -1, -1, -1, -1, -1);
        for (; u + 8 <= len; u += 8) {
            const __m256 a = _mm256_loadu_ps(s + 2 * u);                    /* s0 .. s7 */
            const __m256 b = _mm256_maskload_ps(s + 2 * u + 8, first7);    /* s8 .. s14 */
            /* even elements, per 128-bit half: s0 s2 s8 s10 | s4 s6 s12 s14; then the quarters
               in order: s0 s2 s4 s6 s8 s10 s12 s14 */
            const __m256 e = _mm256_shuffle_ps(a, b, 0x88);
            _mm256_storeu_ps(d + u, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
        }
    }
    for (; u < len; ++u)
        d[u] = s[u * SW];
}
#else
static inline void aotc_im2col_copy(float *restrict d, const float *restrict s, int64_t len, int64_t SW)
{
    aotc_copy_short(d, s, len, SW);
}
#endif

/* Is v a convolution over its input's patches side by side (ViT's patch embedding: stride =
 * kernel, no dilation, no padding, the last patch inside the input)? Then element (k, j) for
 * k = (c, kh, kw), j = (oh, ow) is x[c][oh*KH + kh][ow*KW + kw]: the KW values of one patch
 * row are contiguous. */
static inline int aotc_im2col_patches(const aotc_im2col *v)
{
    return v->SH == v->KH && v->SW == v->KW && v->DH == 1 && v->DW == 1 && v->PH == 0 && v->PW == 0 &&
           v->OH * v->KH <= v->H && v->OW * v->KW <= v->W;
}

#if AOTC_PACK_TRANSPOSE
/* aotc_sgemm_pack_im2col for patches (aotc_im2col_patches) in panels of `width` columns, a
 * multiple of 16 or 8: 16 columns at a time, each of their patch rows (up to 16 consecutive k)
 * loaded as a vector and the 16 x 16 block transposed into 16 panel rows. (Read one float at a
 * time at stride KW, ViT's patch embedding spent a third of its time packing.) */
static void aotc_pack_patches(const aotc_im2col *v, int64_t k0, int64_t kc, int64_t j0, int64_t n, int64_t width,
                              float *restrict P)
{
    const int64_t taps = v->KH * v->KW, panel_floats = kc * width;
    const int64_t columns = (n + width - 1) / width * width;      /* zeros past n, to the panel's end */
    const float *at[16];
    int64_t j, k;
    for (j = 0; j < columns; j += 16) {
        const int cols = (int)aotc_gemm_max(0, aotc_gemm_min(16, n - j));
        float *d = P + (j / width) * panel_floats + j % width;
        int i;
        for (i = 0; i < cols; ++i) {          /* the patch of column j + i */
            const int64_t oh = (j0 + j + i) / v->OW, ow = (j0 + j + i) % v->OW;
            at[i] = v->x + oh * v->KH * v->W + ow * v->KW;
        }
        for (k = 0; k < kc;) {
            const int64_t c = (k0 + k) / taps, kh = (k0 + k) % taps / v->KW, kw = (k0 + k) % v->KW;
            const int valid = (int)aotc_gemm_min(16, aotc_gemm_min(v->KW - kw, kc - k));
            const int64_t from = (c * v->H + kh) * v->W + kw;
            const __mmask16 m = aotc_mask16(valid);
            __m512 r[16], t[16];
            for (i = 0; i < 16; ++i)
                r[i] = i < cols ? _mm512_maskz_loadu_ps(m, at[i] + from) : _mm512_setzero_ps();
            aotc_transpose16_regs(r, t);
            for (i = 0; i < valid; ++i) {     /* row k + i: lanes 0-15 the 16 columns */
                float *row = d + (k + i) * width;
                if (width % 16 == 0) {
                    _mm512_storeu_ps(row, t[i]);
                } else {                      /* width 8: two panels, the second if it exists */
                    _mm256_storeu_ps(row, _mm512_castps512_ps256(t[i]));
                    if (j + 8 < columns)
                        _mm256_storeu_ps(row + panel_floats, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t[i]), 1)));
                }
            }
            k += valid;
        }
    }
}
#endif

/* P <- rows [k0, k0 + kc) x cols [j0, j0 + n) of the im2col matrix of v as panels of `width`
 * columns: NR-column panels of B (as aotc_sgemm_pack_b lays them out), or with width MR the
 * MR-row panels of an A that is the im2col matrix transposed (as aotc_sgemm_pack_a lays them
 * out: a convolution computed as Cᵀ = im2colᵀ . Wᵀ, aotc_sgemm_call's aim2col).
 *
 * The columns go in spans: one panel, or for panels narrower than 16 columns as many as make
 * AOTC_IM2COL_SPAN columns (MR-row panels one at a time made each k row a few floats read from
 * a channel that the next row leaves: packing 324 x 2304 took as long as writing an im2col
 * buffer and packing that). A span's columns are runs along output rows. What a tap (kh, kw)
 * copies from a channel does not depend on the channel, so each span first plans its taps: per
 * tap and group of 16 columns, the pieces of its runs that read inside the input (segments, at
 * most 16 per group, none across a panel's edge); a span's row, for k = (c, tap), is then
 * those segments' copies from channel c over zeros (the padding, and the columns past n), into
 * each panel's row k. The plan holds AOTC_IM2COL_TAPS taps: kernels with more are planned
 * again as their taps come. */
static void aotc_sgemm_pack_im2col(const aotc_im2col *v, int64_t k0, int64_t kc, int64_t j0, int64_t n,
                                   int64_t width, float *restrict P)
{
    enum { G = AOTC_IM2COL_GROUPS, T = AOTC_IM2COL_TAPS };
    const int64_t H = v->H, W = v->W, SW = v->SW, KK = v->KH * v->KW;
#if AOTC_PACK_TRANSPOSE
    if (aotc_im2col_patches(v) && (width % 16 == 0 || width == 8)) {
        aotc_pack_patches(v, k0, kc, j0, n, width, P);
        return;
    }
#endif
    const int64_t span = width >= 16 ? width : AOTC_IM2COL_SPAN / width * width;
    const int64_t panel_floats = kc * width;      /* from one panel to the next */
    int64_t run_at[AOTC_IM2COL_SPAN + 1], run_h[AOTC_IM2COL_SPAN], run_w[AOTC_IM2COL_SPAN];
    aotc_im2col_seg seg[T][G][16];
    int count[T][G];                 /* segments of tap t0 + i in group g */
    unsigned char full[T];           /* tap t0 + i's segments fill every panel's row */
    int64_t p, k, r, t;
    for (p = 0; p < n; p += span, P += span / width * panel_floats) {
        const int64_t ns = aotc_gemm_min(span, n - p);                   /* the span's columns */
        const int64_t panels = (ns + width - 1) / width, groups = (panels * width + 15) / 16;
        int64_t runs = 0, c = k0 / KK, tap = k0 % KK, t0 = 0, t1 = 0;
        /* the span's runs: columns [run_at[r], run_at[r + 1]) are one output row, whose first
           one reads input row run_h[r] + kh*DH, column run_w[r] + kw*DW */
        for (t = 0; t < ns; ++runs) {
            const int64_t j = j0 + p + t, oh = j / v->OW, ow = j % v->OW;
            run_at[runs] = t;
            run_h[runs] = oh * v->SH - v->PH;
            run_w[runs] = ow * SW - v->PW;
            t += aotc_gemm_min(v->OW - ow, ns - t);
        }
        run_at[runs] = ns;
        for (k = 0; k < kc; ++k) {
            float *restrict dst = P + k * width;        /* row k of the span's first panel */
            const float *xc = v->x + c * H * W;
            const int i = (int)(tap - t0);
            int g, e;
            if (tap < t0 || tap >= t1) {          /* plan taps [tap, t1) */
                t0 = tap;
                t1 = aotc_gemm_min(KK, tap + T);
                int64_t kh = t0 / v->KW, kw = t0 % v->KW;
                for (t = t0; t < t1; ++t, kw = kw + 1 == v->KW ? 0 : kw + 1, kh += kw == 0) {
                    int64_t covered = 0;
                    for (g = 0; g < groups; ++g)
                        count[t - t0][g] = 0;
                    for (r = 0; r < runs; ++r) {
                        const int64_t len = run_at[r + 1] - run_at[r];
                        const int64_t ih = run_h[r] + kh * v->DH, iw = run_w[r] + kw * v->DW;
                        int64_t lo, hi;
                        if (ih < 0 || ih >= H)
                            continue;
                        aotc_im2col_inside(iw, len, SW, W, &lo, &hi);
                        covered += hi - lo;
                        while (hi > lo) {          /* in pieces within groups and panels */
                            const int64_t at = run_at[r] + lo;
                            const int64_t piece = aotc_gemm_min(hi - lo, aotc_gemm_min(16 - at % 16, width - at % width));
                            aotc_im2col_seg *q = &seg[t - t0][at / 16][count[t - t0][at / 16]++];
                            q->src = (int32_t)(ih * W + iw + lo * SW);
                            q->at = (uint8_t)at;
                            q->len = (uint8_t)piece;
                            q->lanes = (uint16_t)(((1u << piece) - 1u) << (at % 16));
                            lo += piece;
                        }
                    }
                    full[t - t0] = covered == panels * width;
                }
                k -= 1;                           /* and this k again, with its plan */
                continue;
            }
#if AOTC_IM2COL_EXPAND
            if (tap == 0 && t1 - t0 == KK) {
                /* a channel's first row: the rows that channel c + AHEAD will read, on their way to
                   L1 (each channel's few rows are a short stream of their own, 4.9 KB from the
                   last one in a 35 x 35 plane, which the hardware's prefetchers did not follow:
                   the loads below waited on L2 / L3 for most of the packing's time) */
                const float *ahead = xc + AOTC_IM2COL_AHEAD * H * W;
                for (t = 0; t < KK; t += v->KW)               /* each kernel row's first tap */
                    for (g = 0; g < groups; ++g)
                        for (e = 0; e < count[t][g]; ++e) {
                            AOTC_PREFETCH(ahead + seg[t][g][e].src);
                            AOTC_PREFETCH(ahead + seg[t][g][e].src + (SW == 2 ? 16 : 15));
                        }
            }
            if ((SW == 1 || SW == 2) && (width % 16 == 0 || width == 8)) {
                /* 16 columns at a time in a register: a segment at stride 1 is an expanding load
                   into its lanes; at stride 2 its 2*len - 1 floats are loaded, the even ones
                   taken and expanded into its lanes. A group lies in one panel (width a multiple
                   of 16) or, at width 8, its halves in two */
                const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
                for (g = 0; g < groups; ++g) {
                    __m512 acc = _mm512_setzero_ps();
                    for (e = 0; e < count[i][g]; ++e) {
                        const aotc_im2col_seg *q = &seg[i][g][e];
                        if (SW == 1) {
                            acc = _mm512_mask_expandloadu_ps(acc, (__mmask16)q->lanes, xc + q->src);
                        } else {
                            const int reads = 2 * q->len - 1;
                            const __mmask16 lo = (__mmask16)(reads >= 16 ? 0xFFFFu : (1u << reads) - 1u);
                            const __mmask16 hi = (__mmask16)(reads > 16 ? (1u << (reads - 16)) - 1u : 0u);
                            const __m512 a = _mm512_maskz_loadu_ps(lo, xc + q->src);
                            /* (a segment of at most 8 columns reads within the first 16 floats) */
                            const __m512 b = hi ? _mm512_maskz_loadu_ps(hi, xc + q->src + 16) : _mm512_setzero_ps();
                            acc = _mm512_mask_expand_ps(acc, (__mmask16)q->lanes, _mm512_permutex2var_ps(a, even, b));
                        }
                    }
                    if (width == 8) {
                        float *d = dst + 2 * g * panel_floats;
                        _mm256_storeu_ps(d, _mm512_castps512_ps256(acc));
                        if (2 * g + 1 < panels)
                            _mm256_storeu_ps(d + panel_floats, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
                    } else {
                        _mm512_storeu_ps(dst + (16 * g / width) * panel_floats + 16 * g % width, acc);
                    }
                }
            } else
#endif
            {
                int64_t q;
                if (!full[i])
                    for (q = 0; q < panels; ++q)
                        aotc_copy_short(dst + q * panel_floats, NULL, width, 1);
                for (g = 0; g < groups; ++g)
                    for (e = 0; e < count[i][g]; ++e) {
                        const int at = seg[i][g][e].at;
                        aotc_im2col_copy(dst + (at / width) * panel_floats + at % width, xc + seg[i][g][e].src,
                                         seg[i][g][e].len, SW);
                    }
            }
            if (++tap == KK) {
                tap = 0;
                ++c;
            }
        }
    }
}

/* What a tile brings into L2 while it computes: `lines` cache lines from p, one per k step (a
 * B packed at compile time: the panel after the tile's, so that a weight panel that comes from
 * memory arrives over the tiles before it instead of as one burst of misses in its first tile;
 * prefetched in a burst before each tile, the same lines made a product whose weights were in
 * L3 7% slower). lines 0: nothing. */
typedef struct {
    const float *p;
    int64_t lines;
} aotc_ahead;

/* With GCC or Clang, the tile is held in vectors of the target's width (the compiler's vector
 * extension), so that the accumulators are values, not an array: an array of floats stays in
 * memory around the k loop (zeroed there first, stored there after it, read back for the
 * stores), which cost a 1x1 convolution's short K loops ~7% (measured on the 8 x 32 AVX-512
 * tile, tools/gemm_bench.py). */
#if defined(__AVX512F__)
#define AOTC_TILE_VW 16
#elif defined(__AVX__)
#define AOTC_TILE_VW 8
#else
#define AOTC_TILE_VW 4
#endif
#if !defined(AOTC_TILE_VECTORS)        /* (defined 0: the plain C tile, which tests compile too) */
#if defined(__GNUC__) && AOTC_GEMM_NR % AOTC_TILE_VW == 0
#define AOTC_TILE_VECTORS 1
#else
#define AOTC_TILE_VECTORS 0
#endif
#endif
#if AOTC_TILE_VECTORS
#include <string.h>
typedef float aotc_tile_vec __attribute__((vector_size(AOTC_TILE_VW * sizeof(float))));
static inline aotc_tile_vec aotc_tile_load(const float *p)
{
    aotc_tile_vec v;
    memcpy(&v, p, sizeof v);
    return v;
}
#endif

#if AOTC_TILE_VECTORS
#define AOTC_TILE_V (AOTC_GEMM_NR / AOTC_TILE_VW)      /* vectors in a row of the tile */

/* The sums of one tile: acc[i][v] = the first `rows` rows of a . b over kc steps (a one packed A
 * panel, kc x MR; b one packed B panel, kc x NR), the vectors of row i. Inlined wherever it is
 * used, so that acc stays in registers: in aotc_sgemm_tile_rows, and in the tiles the C
 * emitter generates for a GEMM whose epilogue runs on the sums before they are stored
 * (aotc_sgemm_call.tile). */
AOTC_ALWAYS_INLINE void aotc_sgemm_tile_sums(const int rows, int64_t kc, const float *restrict a,
                                             const float *restrict b, aotc_tile_vec acc[][AOTC_TILE_V],
                                             aotc_ahead ahead)
{
    int64_t i, j, k;
    int v;
    AOTC_UNROLL_FULLY
    for (i = 0; i < rows; ++i) {
        AOTC_UNROLL_FULLY
        for (v = 0; v < AOTC_TILE_V; ++v)
            acc[i][v] = (aotc_tile_vec){ 0.0f };
    }
    for (k = 0; k < kc; ++k) {
        aotc_tile_vec bk[AOTC_TILE_V];
        if (AOTC_GEMM_PREFETCH) {
            AOTC_PREFETCH(a + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_MR);
            for (j = 0; j < AOTC_GEMM_NR; j += AOTC_CACHE_LINE_FLOATS)
                AOTC_PREFETCH(b + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_NR + j);
        }
        if (k < ahead.lines)
            AOTC_PREFETCH_L2(ahead.p + k * AOTC_CACHE_LINE_FLOATS);
        AOTC_UNROLL_FULLY
        for (v = 0; v < AOTC_TILE_V; ++v)
            bk[v] = aotc_tile_load(b + k * AOTC_GEMM_NR + v * AOTC_TILE_VW);
        AOTC_UNROLL_FULLY
        for (i = 0; i < rows; ++i) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_TILE_V; ++v)
                acc[i][v] += a[k * AOTC_GEMM_MR + i] * bk[v];
        }
    }
}
#endif

/* The columns of a whole tile, for a product computed transposed (C stored with rsc == 1, so
 * that a column of the tile is MR consecutive floats): with 8-row tiles of 16-lane vectors
 * (c-avx512's 8 x 32), the sums transposed into NR vectors of 8, col[j] = rows 0..7 of column j,
 * by three stages of two-vector shuffles per 8 x 16 block (each stage trades one bit of the
 * row number, which says which vector, for one bit of the column number, which says which
 * lane; the last stage also puts the lanes in order). 24 shuffles per block then give 16
 * vector stores where there were 128 scalar ones, and let the epilogue run on the sums. */
#if AOTC_TILE_VECTORS && AOTC_GEMM_MR == 8 && AOTC_TILE_VW == 16 && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define AOTC_TILE_COLUMNS 1
#endif
#endif
#ifndef AOTC_TILE_COLUMNS
#define AOTC_TILE_COLUMNS 0
#endif
#if AOTC_TILE_COLUMNS
typedef float aotc_tile_col __attribute__((vector_size(AOTC_GEMM_MR * sizeof(float))));
static inline aotc_tile_col aotc_tile_load_col(const float *p)
{
    aotc_tile_col v;
    memcpy(&v, p, sizeof v);
    return v;
}

AOTC_ALWAYS_INLINE void aotc_sgemm_tile_columns(aotc_tile_vec acc[][AOTC_TILE_V], aotc_tile_col col[AOTC_GEMM_NR])
{
    int v, q;
    AOTC_UNROLL_FULLY
    for (v = 0; v < AOTC_TILE_V; ++v) {
        aotc_tile_vec s1[8], s2[8], s3[8];
        /* rows 2q and 2q + 1: lanes 0-7 of both (columns 0-7), then lanes 8-15 */
        AOTC_UNROLL_FULLY
        for (q = 0; q < 4; ++q) {
            s1[2 * q] = __builtin_shufflevector(acc[2 * q][v], acc[2 * q + 1][v],
                                                0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
            s1[2 * q + 1] = __builtin_shufflevector(acc[2 * q][v], acc[2 * q + 1][v],
                                                    8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
        }
        /* s1[4 r2 + 2 r1 + j3]: lane 8 r0 + (j & 7) holds row 4 r2 + 2 r1 + r0, column j */
        AOTC_UNROLL_FULLY
        for (q = 0; q < 4; ++q) {
            const int r2 = q >> 1, j3 = q & 1;
            s2[4 * r2 + 2 * j3] = __builtin_shufflevector(s1[4 * r2 + j3], s1[4 * r2 + 2 + j3],
                                                          0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
            s2[4 * r2 + 2 * j3 + 1] = __builtin_shufflevector(s1[4 * r2 + j3], s1[4 * r2 + 2 + j3],
                                                              4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
        }
        /* s2[4 r2 + 2 j3 + j2]: lane 8 r1 + 4 r0 + (j & 3) holds row 4 r2 + 2 r1 + r0, column j */
        AOTC_UNROLL_FULLY
        for (q = 0; q < 4; ++q) {
            s3[2 * q] = __builtin_shufflevector(s2[q], s2[4 + q],
                                                0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
            s3[2 * q + 1] = __builtin_shufflevector(s2[q], s2[4 + q],
                                                    2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
        }
        /* s3[p]: lanes 0-7 rows 0-7 of column 2p, lanes 8-15 of column 2p + 1 */
        AOTC_UNROLL_FULLY
        for (q = 0; q < 8; ++q) {
            col[v * 16 + 2 * q] = __builtin_shufflevector(s3[q], s3[q], 0, 1, 2, 3, 4, 5, 6, 7);
            col[v * 16 + 2 * q + 1] = __builtin_shufflevector(s3[q], s3[q], 8, 9, 10, 11, 12, 13, 14, 15);
        }
    }
}
#endif

/* C's cache lines of a tile (rows [0, mr) x columns [0, nr)), for writing, while the tile
 * computes: a C written once and not in cache otherwise makes every store of the tile wait for
 * its line (measured: 1x1 convolutions at 56x56 were 25% slower than with the bias written
 * first, which had brought C in) */
static inline void aotc_sgemm_prefetch_c(float *C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr)
{
    int64_t i, j;
    if (csc == 1) {
        for (i = 0; i < mr; ++i)
            for (j = 0; j < nr; j += AOTC_CACHE_LINE_FLOATS)
                AOTC_PREFETCH_W(C + i * rsc + j);
    } else if (rsc == 1) {
        for (j = 0; j < nr; ++j)
            AOTC_PREFETCH_W(C + j * csc);
    }
}

/* The micro-kernel: C[0:mr, 0:nr] (=, or += when accumulate) a * b over kc steps, where a is
 * one packed A panel (kc x MR) and b one packed B panel (kc x NR); element (i, j) of C at
 * C[i*rsc + j*csc]. It computes the panel's first `rows` rows (mr <= rows <= MR): a constant
 * where it is inlined, so that each instance keeps rows x NR accumulators (aotc_sgemm_tile:
 * all MR rows; aotc_sgemm_tile_half: an edge tile of at most half of them). */
static inline void aotc_sgemm_tile_rows(const int rows, int64_t kc, const float *restrict a,
                                        const float *restrict b, float *restrict C, int64_t rsc, int64_t csc,
                                        int64_t mr, int64_t nr, int accumulate, aotc_ahead ahead)
{
    float part[AOTC_GEMM_MR][AOTC_GEMM_NR];   /* the tile, for the edge tiles' stores */
    const int whole = mr == rows && nr == AOTC_GEMM_NR && csc == 1;
    int64_t i, j, k;
    aotc_sgemm_prefetch_c(C, rsc, csc, mr, nr);
#if AOTC_TILE_VECTORS
    {
        aotc_tile_vec acc[AOTC_GEMM_MR][AOTC_TILE_V];
        int v;
        (void)k;
        aotc_sgemm_tile_sums(rows, kc, a, b, acc, ahead);
#if AOTC_TILE_COLUMNS
        if (rows == AOTC_GEMM_MR && mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR && rsc == 1) {
            aotc_tile_col col[AOTC_GEMM_NR];
            aotc_sgemm_tile_columns(acc, col);
            AOTC_UNROLL_FULLY
            for (j = 0; j < AOTC_GEMM_NR; ++j) {
                float *c = C + j * csc;
                const aotc_tile_col sum = accumulate ? aotc_tile_load_col(c) + col[j] : col[j];
                memcpy(c, &sum, sizeof sum);
            }
            return;
        }
#endif
        if (whole) {
            AOTC_UNROLL_FULLY
            for (i = 0; i < rows; ++i) {
                AOTC_UNROLL_FULLY
                for (v = 0; v < AOTC_TILE_V; ++v) {
                    float *c = C + i * rsc + v * AOTC_TILE_VW;
                    const aotc_tile_vec sum = accumulate ? aotc_tile_load(c) + acc[i][v] : acc[i][v];
                    memcpy(c, &sum, sizeof sum);
                }
            }
            return;
        }
        AOTC_UNROLL_FULLY
        for (i = 0; i < rows; ++i) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < AOTC_TILE_V; ++v)
                memcpy(&part[i][v * AOTC_TILE_VW], &acc[i][v], sizeof acc[i][v]);
        }
    }
#else
    for (i = 0; i < rows; ++i)
        for (j = 0; j < AOTC_GEMM_NR; ++j)
            part[i][j] = 0.0f;
    for (k = 0; k < kc; ++k) {
        if (AOTC_GEMM_PREFETCH) {
            AOTC_PREFETCH(a + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_MR);
            for (j = 0; j < AOTC_GEMM_NR; j += AOTC_CACHE_LINE_FLOATS)
                AOTC_PREFETCH(b + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_NR + j);
        }
        if (k < ahead.lines)
            AOTC_PREFETCH_L2(ahead.p + k * AOTC_CACHE_LINE_FLOATS);
        AOTC_UNROLL_FULLY
        for (i = 0; i < rows; ++i) {
            AOTC_UNROLL_NOT
            for (j = 0; j < AOTC_GEMM_NR; ++j)
                part[i][j] += a[k * AOTC_GEMM_MR + i] * b[k * AOTC_GEMM_NR + j];
        }
    }
    if (whole) {
        for (i = 0; i < rows; ++i)
            for (j = 0; j < AOTC_GEMM_NR; ++j)
                C[i * rsc + j] = accumulate ? C[i * rsc + j] + part[i][j] : part[i][j];
        return;
    }
#endif
    if (rsc == 1) {         /* C stored transposed: columns are contiguous */
        for (j = 0; j < nr; ++j)
            for (i = 0; i < mr; ++i)
                C[j * csc + i] = accumulate ? C[j * csc + i] + part[i][j] : part[i][j];
    } else {
        for (i = 0; i < mr; ++i)
            for (j = 0; j < nr; ++j)
                C[i * rsc + j * csc] = accumulate ? C[i * rsc + j * csc] + part[i][j] : part[i][j];
    }
}

AOTC_NOINLINE static void aotc_sgemm_tile(int64_t kc, const float *restrict a, const float *restrict b,
                                          float *restrict C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr,
                                          int accumulate, aotc_ahead ahead)
{
    aotc_sgemm_tile_rows(AOTC_GEMM_MR, kc, a, b, C, rsc, csc, mr, nr, accumulate, ahead);
}

#define AOTC_GEMM_HALF_MR ((AOTC_GEMM_MR + 1) / 2)
AOTC_NOINLINE static void aotc_sgemm_tile_half(int64_t kc, const float *restrict a, const float *restrict b,
                                               float *restrict C, int64_t rsc, int64_t csc, int64_t mr, int64_t nr,
                                               int accumulate, aotc_ahead ahead)
{
    aotc_sgemm_tile_rows(AOTC_GEMM_HALF_MR, kc, a, b, C, rsc, csc, mr, nr, accumulate, ahead);
}

/* The micro-kernel for one row of C (batch-1 products: an LSTM step, a classifier head):
 * C[0, 0:nr] (=, or += when accumulate) a * b over kc steps, a being the first row of one
 * packed A panel, so that 1 x NR is computed instead of MR x NR. One row has only NR / VW
 * accumulators, and each k step's multiply-adds wait for the previous step's (4 cycles of
 * latency each): the k steps go round AOTC_ROW_CHAINS separate sums, added at the end, so that
 * the multiply-adds of consecutive steps overlap (the sum's order differs from the MR-row
 * tile's: tests/test_gemm.py compares the two). */
#define AOTC_ROW_CHAINS 4
AOTC_NOINLINE static void aotc_sgemm_tile_row(int64_t kc, const float *restrict a, const float *restrict b,
                                              float *restrict C, int64_t csc, int64_t nr, int accumulate)
{
    float acc[AOTC_GEMM_NR];
    int64_t j, k;
#if AOTC_TILE_VECTORS
    {
        enum { V = AOTC_GEMM_NR / AOTC_TILE_VW };
        aotc_tile_vec part[AOTC_ROW_CHAINS][V];
        int u, v;
        AOTC_UNROLL_FULLY
        for (u = 0; u < AOTC_ROW_CHAINS; ++u) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < V; ++v)
                part[u][v] = (aotc_tile_vec){ 0.0f };
        }
        for (k = 0; k + AOTC_ROW_CHAINS <= kc; k += AOTC_ROW_CHAINS) {
            if (AOTC_GEMM_PREFETCH)
                for (j = 0; j < AOTC_ROW_CHAINS * AOTC_GEMM_NR; j += AOTC_CACHE_LINE_FLOATS)
                    AOTC_PREFETCH(b + (k + AOTC_GEMM_PREFETCH) * AOTC_GEMM_NR + j);
            AOTC_UNROLL_FULLY
            for (u = 0; u < AOTC_ROW_CHAINS; ++u) {
                const float ak = a[(k + u) * AOTC_GEMM_MR];
                AOTC_UNROLL_FULLY
                for (v = 0; v < V; ++v)
                    part[u][v] += ak * aotc_tile_load(b + (k + u) * AOTC_GEMM_NR + v * AOTC_TILE_VW);
            }
        }
        for (; k < kc; ++k) {
            const float ak = a[k * AOTC_GEMM_MR];
            AOTC_UNROLL_FULLY
            for (v = 0; v < V; ++v)
                part[0][v] += ak * aotc_tile_load(b + k * AOTC_GEMM_NR + v * AOTC_TILE_VW);
        }
        AOTC_UNROLL_FULLY
        for (v = 0; v < V; ++v) {
            aotc_tile_vec sum = part[0][v];
            AOTC_UNROLL_FULLY
            for (u = 1; u < AOTC_ROW_CHAINS; ++u)
                sum += part[u][v];
            memcpy(&acc[v * AOTC_TILE_VW], &sum, sizeof sum);
        }
    }
#else
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
#endif
    for (j = 0; j < nr; ++j)
        C[j * csc] = accumulate ? C[j * csc] + acc[j] : acc[j];
}

/* One row of C over AOTC_ROW_PANELS consecutive NR-column panels of B (a batch-1 classifier head,
 * an LSTM step: most of the time in reading the weights): C[0, 0:n] (=, or += when accumulate)
 * a * b, the panels kc * NR floats apart in b, n <= AOTC_ROW_PANELS * NR. One panel at a time,
 * the tiles read the weights as one forward stream, which one core drew from memory at about
 * 14 GB/s; eight streams at once drew 27 GB/s (2048 x 1000 weights from DRAM, AMD EPYC Zen 4:
 * 0.55 -> 0.31 ms) and read cached weights 1.4x faster too. The panels' accumulators are
 * independent sums, so each k step's multiply-adds overlap without the one-panel kernel's
 * separate chains (the sum's order is the MR-row tile's). */
#if AOTC_TILE_VW == 16
#define AOTC_ROW_PANELS 8          /* 16 of the 32 vector registers (NR = 2 vectors) */
#else
#define AOTC_ROW_PANELS 4
#endif
/* The unit threads split such a row in (aotc_sgemm_row_unit): half a group, done by the same
 * kernel on half as many panels (panels = AOTC_ROW_HALF), whose sums are the same bits, panel by
 * panel. With whole groups as the unit, threads were uneven wherever the groups did not divide
 * among them: a decoder's 768-column products are 3 groups, 2 for one thread and 1 for the
 * other (the one-token step's down projection 0.23 ms at 2 threads against 0.34 at 1). */
#define AOTC_ROW_HALF (AOTC_ROW_PANELS / 2)
/* weights of at most this many bytes are read by half-groups only (aotc_sgemm_block) */
#define AOTC_ROW_CACHED_BYTES ((int64_t)1 << 20)
AOTC_ALWAYS_INLINE void aotc_sgemm_tile_row_panels_of(const int panels, int64_t kc, const float *restrict a,
                                                      const float *restrict b, float *restrict C, int64_t csc,
                                                      int64_t n, int accumulate)
{
    float acc[AOTC_ROW_PANELS * AOTC_GEMM_NR];
    int64_t j, k;
    int p;
#if AOTC_TILE_VECTORS
    {
        enum { V = AOTC_GEMM_NR / AOTC_TILE_VW };
        aotc_tile_vec sum[AOTC_ROW_PANELS][V];
        int v;
        AOTC_UNROLL_FULLY
        for (p = 0; p < panels; ++p) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < V; ++v)
                sum[p][v] = (aotc_tile_vec){ 0.0f };
        }
        for (k = 0; k < kc; ++k) {
            const float ak = a[k * AOTC_GEMM_MR];
            AOTC_UNROLL_FULLY
            for (p = 0; p < panels; ++p) {
                AOTC_UNROLL_FULLY
                for (v = 0; v < V; ++v)
                    sum[p][v] += ak * aotc_tile_load(b + (p * kc + k) * AOTC_GEMM_NR + v * AOTC_TILE_VW);
            }
        }
        AOTC_UNROLL_FULLY
        for (p = 0; p < panels; ++p) {
            AOTC_UNROLL_FULLY
            for (v = 0; v < V; ++v)
                memcpy(&acc[p * AOTC_GEMM_NR + v * AOTC_TILE_VW], &sum[p][v], sizeof sum[p][v]);
        }
    }
#else
    for (j = 0; j < panels * AOTC_GEMM_NR; ++j)
        acc[j] = 0.0f;
    for (k = 0; k < kc; ++k) {
        const float ak = a[k * AOTC_GEMM_MR];
        for (p = 0; p < panels; ++p)
            for (j = 0; j < AOTC_GEMM_NR; ++j)
                acc[p * AOTC_GEMM_NR + j] += ak * b[(p * kc + k) * AOTC_GEMM_NR + j];
    }
#endif
    for (j = 0; j < n && j < panels * AOTC_GEMM_NR; ++j)
        C[j * csc] = accumulate ? C[j * csc] + acc[j] : acc[j];
}

AOTC_NOINLINE static void aotc_sgemm_tile_row_panels(int64_t kc, const float *restrict a, const float *restrict b,
                                                     float *restrict C, int64_t csc, int64_t n, int accumulate)
{
    aotc_sgemm_tile_row_panels_of(AOTC_ROW_PANELS, kc, a, b, C, csc, n, accumulate);
}

AOTC_NOINLINE static void aotc_sgemm_tile_row_half(int64_t kc, const float *restrict a, const float *restrict b,
                                                   float *restrict C, int64_t csc, int64_t n, int accumulate)
{
    aotc_sgemm_tile_row_panels_of(AOTC_ROW_HALF, kc, a, b, C, csc, n, accumulate);
}

/* One tile of C: the MR-row micro-kernel, the half-height one for an edge tile of at most
 * half as many rows (an 8-row product on 6-row tiles: 9 rows computed, not 12), or the one-row
 * one when the tile has one row. */
static void aotc_sgemm_tile_any(int64_t kc, const float *a, const float *b, float *C, int64_t rsc, int64_t csc,
                                int64_t mr, int64_t nr, int accumulate, aotc_ahead ahead)
{
    if (mr == 1)
        aotc_sgemm_tile_row(kc, a, b, C, csc, nr, accumulate);
    else if (mr <= AOTC_GEMM_HALF_MR && AOTC_GEMM_HALF_MR < AOTC_GEMM_MR)
        aotc_sgemm_tile_half(kc, a, b, C, rsc, csc, mr, nr, accumulate, ahead);
    else
        aotc_sgemm_tile(kc, a, b, C, rsc, csc, mr, nr, accumulate, ahead);
}

/* What runs on a finished tile: rows [i0, i1) x columns [j0, j1) of C. */
typedef void (*aotc_tile_fn)(void *args, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

/* A whole MR x NR tile of a GEMM's last K block, epilogue included: C (at the tile; its strides,
 * one of them 1, known to it) = epilogue(a . b over kc steps (+ C when accumulate)) for the
 * tile at rows i0.., columns j0.. of C. The C emitter generates one for a GEMM whose epilogue
 * can run on the sums while they are in registers, a vector at a time (aotc/codegen/c:
 * aotc_sgemm_tile_sums, then the epilogue over each vector's lanes: a row's columns, or, for
 * a product computed transposed, a column's rows by aotc_sgemm_tile_columns); the separate
 * epilogue after the stores cost up to 40% of a product with a short K (a 1x1 convolution of
 * 16 input channels). The edge tiles keep the plain tile and the epilogue function. */
typedef void (*aotc_whole_tile_fn)(void *args, int64_t kc, const float *a, const float *b, float *C,
                                   int64_t i0, int64_t j0, int accumulate, aotc_ahead ahead);
/* Generated tiles exist where the tile is held in vectors and the compiler takes OpenMP's SIMD
 * pragmas (-fopenmp-simd -DAOTC_OPENMP_SIMD): their epilogue is a loop over a vector's lanes,
 * which GCC otherwise unrolls into scalar code before it would vectorize it (3x slower than the
 * plain path on MobileNetV2). Elsewhere every tile takes the plain path. */
#if AOTC_TILE_VECTORS && defined(AOTC_OPENMP_SIMD)
#define AOTC_TILE_EPILOGUES 1
#define AOTC_WHOLE_TILE(fn) fn
#define AOTC_TILE_LANES _Pragma("omp simd")
#else
#define AOTC_TILE_EPILOGUES 0
#define AOTC_WHOLE_TILE(fn) NULL
#endif
/* and for a product computed transposed (C's rows contiguous), where the tile has columns
 * (AOTC_TILE_COLUMNS: vectors of MR = 8 floats, whose lanes are consecutive rows of C) */
#if AOTC_TILE_EPILOGUES && AOTC_TILE_COLUMNS
#define AOTC_TILE_COLUMN_EPILOGUES 1
#define AOTC_WHOLE_TILE_COLUMNS(fn) fn
#define AOTC_TILE_COLUMN_LANES _Pragma("omp simd simdlen(8)")
#else
#define AOTC_TILE_COLUMN_EPILOGUES 0
#define AOTC_WHOLE_TILE_COLUMNS(fn) NULL
#endif

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
#ifdef AOTC_GEMM_IM2COL
    const aotc_im2col *aim2col; /* not NULL: A is this convolution's im2col matrix transposed,
                                   element (i, k) the matrix's (k, i) (A unused) */
#endif
    const float *B;
    int64_t rsb, csb;
#ifdef AOTC_GEMM_IM2COL
    const aotc_im2col *bim2col; /* not NULL: B is this convolution's im2col matrix (B unused) */
#endif
    float *C;
    int64_t rsc, csc;
    int accumulate;
    int split;                  /* AOTC_GEMM_SPLIT_*: how threads share C */
    float *work;
    int64_t work_floats;
    aotc_tile_fn epilogue;      /* NULL: none */
    void *epilogue_args;
    aotc_whole_tile_fn tile;    /* NULL, or the epilogue's whole tiles (csc must be 1) */
#ifdef AOTC_GEMM_CONV_BROADCAST
    int conv_broadcast;         /* with bim2col and A packed in panels of 16 rows: the convolution
                                   summed by aotc_conv_broadcast (the schedule's choice: few
                                   output channels) */
#endif
    /* not NULL (the option bf16): A / B is a constant stored at compile time as bfloat16 in the
       AMX tiles' layout (aotc_sgemm_block_bf16 reads it as it lies; the float32 path widens
       it block by block); A / B and their strides are then unused */
    const uint16_t *Ah, *Bh;
} aotc_sgemm_call;

/* A call's im2col operands. Their fields, the packers that read them and the broadcast
 * convolution exist only in a source that defines AOTC_GEMM_IM2COL (AOTC_GEMM_CONV_BROADCAST):
 * the C emitter does where one of its products reads a convolution's input (sums by
 * broadcast), so that a call setting them elsewhere fails to compile. Elsewhere they read as
 * NULL, and the code behind them is not compiled: about half of the gcc time of a small
 * model's build. */
#ifdef AOTC_GEMM_IM2COL
#define AOTC_AIM2COL(g) ((g)->aim2col)
#define AOTC_BIM2COL(g) ((g)->bim2col)
#else
#define AOTC_AIM2COL(g) ((const aotc_im2col *)NULL)
#define AOTC_BIM2COL(g) ((const aotc_im2col *)NULL)
#endif
#if defined(AOTC_GEMM_CONV_BROADCAST) && !defined(AOTC_GEMM_IM2COL)
#error "AOTC_GEMM_CONV_BROADCAST needs AOTC_GEMM_IM2COL: a broadcast convolution reads its input as im2col"
#endif

/* The columns a split of C among threads counts in: NR-column panels, or for a one-row product
 * of a B packed at compile time (a layer's weights) half-groups of AOTC_ROW_HALF panels, which
 * aotc_sgemm_block takes together (two at a time where it can). */
#if AOTC_GEMM_NC % (AOTC_ROW_PANELS * AOTC_GEMM_NR) != 0
#error "AOTC_GEMM_NC must be a multiple of AOTC_ROW_PANELS * AOTC_GEMM_NR (8 or 4 panels)"
#endif
static int64_t aotc_sgemm_row_unit(const aotc_sgemm_call *g)
{
    const int b_packed = g->rsb == 0 && g->csb == 0 && !AOTC_BIM2COL(g) && !g->Bh;
    return g->M == 1 && b_packed ? AOTC_ROW_HALF * AOTC_GEMM_NR : AOTC_GEMM_NR;
}

/* Row m of C, columns [n0, n1), from a B that is strided with unit stride along k (rsb 1: each
 * column K floats in a row) or along n (csb 1: each row of B N floats), read as it lies: for one
 * row of products, packing B would write and read every element once more than the product reads
 * it (a decoder's attention over its cache, one query at a time: Q.K^T reads each key as a
 * column, P.V each value as a row; a 125M decoder's attention per step took 1.54 ms packing
 * them, 0.51 ms reading them in place). */
static void aotc_sgemm_one_row(const aotc_sgemm_call *g, int64_t m, int64_t n0, int64_t n1)
{
    enum { LANES = 16 };
    const float *a = g->A + m * g->rsa;
    float *c = g->C + m * g->rsc;
    const int64_t K = g->K, csa = g->csa, csc = g->csc;
    int64_t j, k;
    if (g->rsb == 1) {
        for (j = n0; j < n1; ++j) {
            const float *b = g->B + j * g->csb;
            float lane[LANES] = {0}, s = 0.0f;
            k = 0;
            if (csa == 1)                       /* LANES sums side by side: vectorized as written */
                for (; k + LANES <= K; k += LANES)
                    for (int t = 0; t < LANES; ++t)
                        lane[t] += a[k + t] * b[k + t];
            for (int t = 0; t < LANES; ++t)
                s += lane[t];
            for (; k < K; ++k)
                s += a[k * csa] * b[k];
            c[j * csc] = g->accumulate ? c[j * csc] + s : s;
        }
        return;
    }
    if (!g->accumulate)
        for (j = n0; j < n1; ++j)
            c[j * csc] = 0.0f;
    for (k = 0; k < K; ++k) {
        const float ak = a[k * csa], *b = g->B + k * g->rsb;
        if (csc == 1)
            for (j = n0; j < n1; ++j)
                c[j] += ak * b[j];
        else
            for (j = n0; j < n1; ++j)
                c[j * csc] += ak * b[j];
    }
}

/* AMX (Intel's tile registers), for the option bf16 here and for the integer GEMM
 * (aotc_igemm.h): usable when the CPU has the tiles and the feature (CPUID 7.0 EDX: bit 24
 * AMX-TILE, 22 AMX-BF16, 25 AMX-INT8) and Linux grants the process the tile state (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XTILEDATA; the grant covers every thread). Both asked once: in a
 * virtual machine CPUID traps to the hypervisor, microseconds each (asked per product, it
 * made a 128 x 128 x 64 one 4x slower). Compiled only where a GEMM may use AMX (the option bf16,
 * the target's int8_amx) and the compiler knows it (GCC 11, Clang 12): elsewhere AOTC_AMX is 0
 * and the other tiles run. */
#if defined(__x86_64__) && ((defined(AOTC_GEMM_BF16) && AOTC_GEMM_BF16) || (defined(AOTC_IGEMM_AMX) && AOTC_IGEMM_AMX)) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define AOTC_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#define AOTC_AMX_BF16 22
#define AOTC_AMX_INT8 25
long syscall(long number, ...);
static inline int aotc_amx_ready(int feature)
{
    static volatile int granted = 0;            /* 0: not asked, 1: yes, -1: no */
    static volatile unsigned features = 0;      /* CPUID 7.0 EDX, with bit 0 set once asked */
    if (!features) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        features = (__get_cpuid_count(7, 0, &a, &b, &c, &d) ? d : 0) | 1u;
    }
    if (!(features >> 24 & 1) || !(features >> feature & 1))
        return 0;
    if (!granted) {
#if defined(__linux__)
        granted = syscall(158 /* SYS_arch_prctl */, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0 ? 1 : -1;
#else
        granted = -1;
#endif
    }
    return granted > 0;
}

/* Every tile 16 rows of 64 bytes (palette 1): 0-3 sums, 4-5 A, 6-7 B. The configuration is a
   constant: GCC drops stores into a local that only the ldtilecfg asm reads. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} aotc_amx_config;
__attribute__((target("amx-tile"))) static inline void aotc_amx_tiles_on(void)
{
    static const aotc_amx_config cfg = {
        1, 0, { 0 }, { 64, 64, 64, 64, 64, 64, 64, 64 }, { 16, 16, 16, 16, 16, 16, 16, 16 } };
    _tile_loadconfig(&cfg);
}

/* (the tile state released: a thread switch then saves none of it) */
__attribute__((target("amx-tile"))) static inline void aotc_amx_tiles_off(void)
{
    _tile_release();
}
#else
#define AOTC_AMX 0
#endif

/* ---- bfloat16 products on AMX tiles (the target option bf16: AOTC_GEMM_BF16 defined 1) ----
 * On a CPU with AMX-BF16, a float32 GEMM of at least AOTC_BF16_MIN rows, columns and K runs
 * with its operands rounded to bfloat16 (to nearest even) and its products summed in float32 by
 * the tile instruction (TDPBF16PS: C[16 x 16] += A[16 x 32] . B[32 x 16]); on a CPU with
 * AVX512-BF16 but no AMX (or where the OS refuses the tile state), the same blocks by VDPBF16PS
 * (aotc_bf16_tile_dot); elsewhere (neither, a small product) the float32 path above runs, so one
 * artifact runs on every CPU its target runs on. The tiles read their operands in two layouts, K block
 * after K block (aotc_sgemm_kstep's blocks, each kc long, kp = kc rounded up to 32, zeros past
 * kc; a block's region is laid out for kstep's kp, the last block's content may be shorter):
 *   A: rows, k contiguous: element (i, k) at Ah[i*kp + k]; rows up to a multiple of 32, zero
 *   B: groups of 16 columns, each kp/2 rows of 16 pairs: element (k, 16g + c) at
 *      Bh[g*kp*16 + (k/2)*32 + 2*c + k%2] (the tiles' pair layout: one 64-byte row per two k)
 * A constant operand is stored so at compile time (aotc_sgemm_call's Ah / Bh: half the bytes of
 * float32, nothing converted per run; schedule/gemm_cpu.py pack_a_bf16 / pack_b_bf16); the
 * float32 path widens those block by block into its panels. Any other operand comes as the
 * float32 path has it (packed at compile time, or packed here by the same packers, im2col
 * included) and each block is converted into `work`, after the float32 blocks. A 32 x 32 block
 * of C is four tiles of sums (two row tiles of A against two column tiles of B), stored into a
 * float32 block and added into C; the epilogue then runs on it as on the float32 path's edge
 * tiles. schedule/gemm_cpu.py sizes the scratch (bf16_work_floats). */
#if defined(AOTC_GEMM_BF16) && AOTC_GEMM_BF16
#define AOTC_GEMM_BF16_LAYOUTS 1
#define AOTC_BF16_NC 512          /* columns of B converted at a time */
#define AOTC_BF16_MIN 16          /* smaller products stay float32 (the conversions would dominate) */
#define AOTC_BF16_A_ONCE (1 << 22) /* a constant A of at most this many values is converted once a call */
#if AOTC_GEMM_MC % 32 != 0 || AOTC_GEMM_NR % 16 != 0 || AOTC_BF16_NC % AOTC_GEMM_NR != 0
#error "the bf16 path needs AOTC_GEMM_MC a multiple of 32 and AOTC_GEMM_NR of 16"
#endif

static int64_t aotc_bf16_round(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

static float aotc_bf16_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The K block at pc of a constant stored in the tiles' layout */
static const uint16_t *aotc_bf16_a_block(const aotc_sgemm_call *g, int64_t pc, int64_t kstep)
{
    return g->Ah + pc / kstep * aotc_bf16_round(kstep, 32) * aotc_bf16_round(g->M, 32);
}

static const uint16_t *aotc_bf16_b_block(const aotc_sgemm_call *g, int64_t pc, int64_t kstep)
{
    return g->Bh + pc / kstep * aotc_bf16_round(kstep, 32) * aotc_bf16_round(g->N, 32);
}

/* Ap <- rows [0, m) of a block of A in the tiles' layout (kc long), as MR-row panels */
static void aotc_bf16_widen_a(int64_t m, int64_t kc, const uint16_t *Ah, float *restrict Ap)
{
    const int64_t kp = aotc_bf16_round(kc, 32);
    int64_t i0, i, k;
    for (i0 = 0; i0 < m; i0 += AOTC_GEMM_MR, Ap += kc * AOTC_GEMM_MR)
        for (i = 0; i < AOTC_GEMM_MR; ++i)
            for (k = 0; k < kc; ++k)
                Ap[k * AOTC_GEMM_MR + i] = i0 + i < m ? aotc_bf16_widen(Ah[(i0 + i) * kp + k]) : 0.0f;
}

/* Bp <- columns [0, n) of a block of B in the tiles' layout (kc long, starting at a group), as
 * NR-column panels */
static void aotc_bf16_widen_b(int64_t kc, int64_t n, const uint16_t *Bh, float *restrict Bp)
{
    const int64_t kp = aotc_bf16_round(kc, 32);
    int64_t j0, j, k;
    for (j0 = 0; j0 < n; j0 += AOTC_GEMM_NR, Bp += kc * AOTC_GEMM_NR)
        for (k = 0; k < kc; ++k)
            for (j = 0; j < AOTC_GEMM_NR; ++j) {
                const int64_t c = j0 + j;
                Bp[k * AOTC_GEMM_NR + j] = c < n ? aotc_bf16_widen(Bh[c / 16 * kp * 16 + k / 2 * 32 + c % 16 * 2 + k % 2])
                                                 : 0.0f;
            }
}
#else
#define AOTC_GEMM_BF16_LAYOUTS 0
#endif

/* B's K block at pc (kc long, of blocks kstep long) for columns [col, col + nc) as NR-column
 * float32 panels: where they were packed at compile time, or packed here into bwork (from the
 * convolution's input, from bfloat16 tiles widened, or from the strided B) */
static const float *aotc_sgemm_b_block(const aotc_sgemm_call *g, int64_t pc, int64_t kc, int64_t kstep, int64_t col,
                                       int64_t nc, float *bwork)
{
    if (g->rsb == 0 && g->csb == 0 && !AOTC_BIM2COL(g) && !g->Bh) {
        const int64_t Npad = (g->N + AOTC_GEMM_NR - 1) / AOTC_GEMM_NR * AOTC_GEMM_NR;
        return g->B + pc * Npad + col * kc;
    }
    if (AOTC_BIM2COL(g))
        aotc_sgemm_pack_im2col(AOTC_BIM2COL(g), pc, kc, col, nc, AOTC_GEMM_NR, bwork);
#if AOTC_GEMM_BF16_LAYOUTS
    else if (g->Bh)
        aotc_bf16_widen_b(kc, nc, aotc_bf16_b_block(g, pc, kstep) + col * aotc_bf16_round(kc, 32), bwork);
#endif
    else
        aotc_sgemm_pack_b(kc, nc, g->B + pc * g->rsb + col * g->csb, g->rsb, g->csb, bwork);
    (void)kstep;
    return bwork;
}

#if AOTC_GEMM_BF16_LAYOUTS && AOTC_AMX
#define AOTC_BF16_AMX 1
#include <immintrin.h>
#define AOTC_BF16_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

#define AOTC_BF16_ON_AMX 1      /* the tiles (TDPBF16PS) */
#define AOTC_BF16_ON_AVX512 2   /* AVX512-BF16's dot products of pairs (VDPBF16PS), no AMX */

/* How this thread computes bfloat16 products: on the tiles where the CPU has AMX-BF16 (and
 * AVX512-BF16, which the conversions use) and the OS grants the tile state; else by AVX512-BF16
 * alone where the CPU has it (AMD Zen 4 and newer); else 0 (the float32 path) */
static int aotc_bf16_ready(void)
{
    static volatile int avx512_bf16 = -1;       /* CPUID 7.1 EAX bit 5, asked once */
    if (avx512_bf16 < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        avx512_bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
    }
    if (!avx512_bf16)
        return 0;
#if defined(AOTC_BF16_NO_AMX) && AOTC_BF16_NO_AMX
    return AOTC_BF16_ON_AVX512;                 /* (a test build of the dot-product tile on AMX CPUs) */
#else
    return aotc_amx_ready(AOTC_AMX_BF16) ? AOTC_BF16_ON_AMX : AOTC_BF16_ON_AVX512;
#endif
}

/* Ah <- rows [0, m) of A's block (kc columns), as the tiles take them. From a strided A with
 * unit column stride, 16 values at a time; else from its float32 panels (MR rows, k-major). */
AOTC_BF16_TARGET static void aotc_bf16_a_rows(int64_t m, int64_t kc, const float *A, int64_t rs, uint16_t *Ah)
{
    const int64_t kp = aotc_bf16_round(kc, 32), rows = aotc_bf16_round(m, 32);
    int64_t i, k;
    for (i = 0; i < rows; ++i) {
        uint16_t *d = Ah + i * kp;
        for (k = 0; k < kp; k += 16) {
            const __mmask16 live = i < m ? (__mmask16)aotc_mask16(kc - k) : 0;
            const __m512 x = _mm512_maskz_loadu_ps(live, A + i * rs + k);
            _mm256_storeu_si256((__m256i *)(d + k), (__m256i)_mm512_cvtneps_pbh(x));
        }
    }
}

AOTC_BF16_TARGET static void aotc_bf16_a_panels(int64_t m, int64_t kc, const float *Ap, uint16_t *Ah)
{
    const int64_t kp = aotc_bf16_round(kc, 32), rows = aotc_bf16_round(m, 32);
    const __m512i down = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(AOTC_GEMM_MR));     /* a row's 16 k in a panel */
    int64_t i, k;
    for (i = 0; i < rows; ++i) {
        uint16_t *d = Ah + i * kp;
        if (i >= m) {
            memset(d, 0, (size_t)kp * sizeof *d);
            continue;
        }
        const float *p = Ap + (i / AOTC_GEMM_MR) * kc * AOTC_GEMM_MR + i % AOTC_GEMM_MR;
        for (k = 0; k < kp; k += 16) {
            const __mmask16 live = (__mmask16)aotc_mask16(kc - k);
            const __m512 x = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, down, p + k * AOTC_GEMM_MR, 4);
            _mm256_storeu_si256((__m256i *)(d + k), (__m256i)_mm512_cvtneps_pbh(x));
        }
    }
}

/* Bh <- columns [0, n) of B's block (kc rows), as the tiles take them (columns up to a multiple
 * of 32, zero past n): from B's float32 panels (NR columns, k-major; aotc_bf16_b_panels), or
 * from a strided B whose rows are contiguous (element (k, c) at B[k*rs + c]; aotc_bf16_b_rows,
 * which skips the float32 packing). Both read 16 columns of two rows k, k + 1 at a time. */
AOTC_BF16_TARGET static inline void aotc_bf16_b_group(int64_t kc, int64_t kp, const float *p, int64_t rs,
                                                      __mmask16 live, uint16_t *d)
{
    /* a pair's two k side by side: lane 2c <- k's column c, lane 2c + 1 <- k + 1's */
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                           23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    int64_t k;
    for (k = 0; k < kp; k += 2) {
        const __m512 x0 = _mm512_maskz_loadu_ps(k < kc ? live : 0, p + k * rs);
        const __m512 x1 = _mm512_maskz_loadu_ps(k + 1 < kc ? live : 0, p + (k + 1) * rs);
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);     /* x0 in lanes 0-15, x1 in 16-31 */
        _mm512_storeu_si512((void *)(d + k * 16), _mm512_permutexvar_epi16(pairs, both));
    }
}

AOTC_BF16_TARGET static void aotc_bf16_b_panels(int64_t kc, int64_t n, const float *Bp, uint16_t *Bh)
{
    const int64_t kp = aotc_bf16_round(kc, 32), groups = aotc_bf16_round(n, 32) / 16;
    int64_t gi;
    for (gi = 0; gi < groups; ++gi) {
        const int64_t col = gi * 16;
        const int live = col < aotc_bf16_round(n, AOTC_GEMM_NR);      /* (past the last panel: zeros) */
        aotc_bf16_b_group(kc, kp, Bp + (live ? (col / AOTC_GEMM_NR) * kc * AOTC_GEMM_NR + col % AOTC_GEMM_NR : 0),
                          AOTC_GEMM_NR, live ? 0xffff : 0, Bh + gi * kp * 16);
    }
}

AOTC_BF16_TARGET static void aotc_bf16_b_rows(int64_t kc, int64_t n, const float *B, int64_t rs, uint16_t *Bh)
{
    const int64_t kp = aotc_bf16_round(kc, 32), groups = aotc_bf16_round(n, 32) / 16;
    int64_t gi;
    for (gi = 0; gi < groups; ++gi) {
        const int64_t col = gi * 16, left = n - col;
        const __mmask16 live = (__mmask16)aotc_mask16(left);
        aotc_bf16_b_group(kc, kp, B + (left > 0 ? col : 0), rs, live, Bh + gi * kp * 16);
    }
}

/* out[32 x 32] (row stride ldo floats) <- (out +, when add) a . b over kp values of k: a 32 rows
 * of Ah (row stride kp), b two 16-column groups of Bh (b and b + kp * 16). (Prefetching the next
 * call's B a k step at a time was measured slower: ResNet-50 and BERT 1-5%, in one process.)
 * rows, cols: how many of out's rows and columns the caller reads (a block at C's edge), which
 * the tiles compute all of. ahead: the next call's block of A or B that may not be in cache (64 kp
 * bytes), which aotc_bf16_tile_dot brings into L2 and the tiles leave (not measured on AMX). */
AOTC_BF16_TARGET static void aotc_bf16_tile(int64_t kp, const uint16_t *a, const uint16_t *b, float *out, int64_t ldo,
                                            int add, int64_t rows, int64_t cols, const uint16_t *ahead)
{
    (void)rows;
    (void)cols;
    (void)ahead;
    const uint16_t *b1 = b + kp * 16;
    int64_t k;
    if (add) {
        _tile_loadd(0, out, ldo * 4);
        _tile_loadd(1, out + 16, ldo * 4);
        _tile_loadd(2, out + 16 * ldo, ldo * 4);
        _tile_loadd(3, out + 16 * ldo + 16, ldo * 4);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (k = 0; k < kp; k += 32) {
        _tile_loadd(4, a + k, kp * 2);
        _tile_loadd(5, a + 16 * kp + k, kp * 2);
        _tile_loadd(6, b + k * 16, 64);
        _tile_loadd(7, b1 + k * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, ldo * 4);
    _tile_stored(1, out + 16, ldo * 4);
    _tile_stored(2, out + 16 * ldo, ldo * 4);
    _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
}

#define AOTC_BF16_ONE_BY_ONE 4   /* up to this many columns past a vector's 16 are summed one by one */

/* out[r * ldo] (+, when add) <- row r of a . one column of b, for r < rows: the column's pairs
 * (lane `lane` of the 16-column group bg) gathered once, then each row's k in vectors of 16
 * pairs (VDPBF16PS along k), 8 rows at a time, each summed across its lanes at the end. About
 * a tenth of what a 16-column vector group costs (at kp 384), so that the 17 columns of a 49-
 * column product's last block (ResNet-50's 7 x 7 planes) or the 4 of a 196-column one are
 * not computed as 32 or 16. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void aotc_bf16_dot_column(int64_t kp, const uint16_t *a,
                                                                                     const uint16_t *bg, int lane,
                                                                                     float *out, int64_t ldo, int add,
                                                                                     int64_t rows)
{
    uint32_t col[(AOTC_GEMM_KC + 31) / 32 * 16];     /* the column's kp / 2 pairs */
    int64_t p, r0, i, k;
    for (p = 0; p < kp / 2; ++p)
        memcpy(&col[p], bg + p * 32 + 2 * lane, sizeof col[p]);
    for (r0 = 0; r0 < rows; r0 += 8) {
        __m512 acc[8];
#pragma GCC unroll 8
        for (i = 0; i < 8; ++i)
            acc[i] = _mm512_setzero_ps();
        for (k = 0; k < kp; k += 32) {
            const __m512bh pairs = (__m512bh)_mm512_loadu_si512((const void *)(col + k / 2));
#pragma GCC unroll 8
            for (i = 0; i < 8; ++i)          /* (rows past `rows`, up to the block's 32, are zeros) */
                acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_loadu_si512((const void *)(a + (r0 + i) * kp + k)),
                                          pairs);
        }
        for (i = 0; i < 8 && r0 + i < rows; ++i) {
            const float sum = _mm512_reduce_add_ps(acc[i]);
            out[(r0 + i) * ldo] = add ? out[(r0 + i) * ldo] + sum : sum;
        }
    }
}

/* aotc_bf16_tile's product without the tiles: the same operands (a 32 rows of Ah, b two groups
 * of Bh) and result, by AVX512-BF16's VDPBF16PS, which adds to each of 16 float32 lanes the two
 * products of a pair of bfloat16 values: 8 rows of out at a time, each row's pair (k, k + 1)
 * broadcast against the pairs of b's 32 columns, 16 accumulators of 16 columns. Only the groups
 * of 8 rows that hold one of the first `rows`, and only the 16-column vectors that hold one of
 * the first `cols`, are computed (the rest of out is left as it was): a product of 16 columns
 * (Winograd's on 4 x 4 tiles: ResNet-50's last stage) computed all 32 spent half its time on
 * columns no one reads; up to AOTC_BF16_ONE_BY_ONE columns past a vector's are summed one by
 * one (aotc_bf16_dot_column) rather than by another vector of 16.
 * Each group of 8 rows brings a quarter of `ahead` (when not NULL) into L2, a line every other k
 * pair: a layer's weights come from memory once a run, their blocks in Ah (a convolution's A) as
 * 8 short streams at a time, which the hardware prefetchers did not follow (ResNet-50 in bf16
 * spent about 15% of its time waiting on them). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void aotc_bf16_tile_dot(int64_t kp, const uint16_t *a,
                                                                                   const uint16_t *b, float *out,
                                                                                   int64_t ldo, int add, int64_t rows,
                                                                                   int64_t cols, const uint16_t *ahead)
{
    const uint16_t *b1 = b + kp * 16;
    /* a quarter of ahead a row group (8 kp values), a line every other k pair; without a block
       ahead, the prefetches read b's first line, in L1 already */
    const uint16_t *pre = ahead ? ahead : b;
    const int64_t pre_step = ahead ? 8 : 0;
    /* the columns computed in vectors; the rest, one by one */
    const int64_t vec = cols <= AOTC_BF16_ONE_BY_ONE ? 0 : cols <= 16 + AOTC_BF16_ONE_BY_ONE ? 16 : 32;
    int64_t r0, i, k, c;
    if (vec == 16) {
        for (r0 = 0; r0 < rows; r0 += 8) {
            const uint16_t *next = pre + r0 * kp * pre_step / 8;
            __m512 c0[8];
#pragma GCC unroll 8
            for (i = 0; i < 8; ++i)
                c0[i] = add ? _mm512_loadu_ps(out + (r0 + i) * ldo) : _mm512_setzero_ps();
            for (k = 0; k < kp; k += 2) {
                const __m512bh p0 = (__m512bh)_mm512_loadu_si512((const void *)(b + k * 16));
                _mm_prefetch((const char *)(next + k * pre_step), _MM_HINT_T1);
#pragma GCC unroll 8
                for (i = 0; i < 8; ++i) {
                    uint32_t pair;
                    memcpy(&pair, a + (r0 + i) * kp + k, sizeof pair);
                    c0[i] = _mm512_dpbf16_ps(c0[i], (__m512bh)_mm512_set1_epi32((int)pair), p0);
                }
            }
#pragma GCC unroll 8
            for (i = 0; i < 8; ++i)
                _mm512_storeu_ps(out + (r0 + i) * ldo, c0[i]);
        }
    } else if (vec == 32) {
        for (r0 = 0; r0 < rows; r0 += 8) {
            const uint16_t *next = pre + r0 * kp * pre_step / 8;
            __m512 c0[8], c1[8];
#pragma GCC unroll 8
            for (i = 0; i < 8; ++i) {
                c0[i] = add ? _mm512_loadu_ps(out + (r0 + i) * ldo) : _mm512_setzero_ps();
                c1[i] = add ? _mm512_loadu_ps(out + (r0 + i) * ldo + 16) : _mm512_setzero_ps();
            }
            for (k = 0; k < kp; k += 2) {
                const __m512bh p0 = (__m512bh)_mm512_loadu_si512((const void *)(b + k * 16));
                const __m512bh p1 = (__m512bh)_mm512_loadu_si512((const void *)(b1 + k * 16));
                _mm_prefetch((const char *)(next + k * pre_step), _MM_HINT_T1);
#pragma GCC unroll 8
                for (i = 0; i < 8; ++i) {
                    uint32_t pair;
                    memcpy(&pair, a + (r0 + i) * kp + k, sizeof pair);
                    const __m512bh x = (__m512bh)_mm512_set1_epi32((int)pair);
                    c0[i] = _mm512_dpbf16_ps(c0[i], x, p0);
                    c1[i] = _mm512_dpbf16_ps(c1[i], x, p1);
                }
            }
#pragma GCC unroll 8
            for (i = 0; i < 8; ++i) {
                _mm512_storeu_ps(out + (r0 + i) * ldo, c0[i]);
                _mm512_storeu_ps(out + (r0 + i) * ldo + 16, c1[i]);
            }
        }
    }
    for (c = vec; c < cols; ++c)
        aotc_bf16_dot_column(kp, a, c < 16 ? b : b1, (int)(c % 16), out + c, ldo, add, rows);
}

/* C's rows [0, mr) x columns [0, nr) at c (strides rsc, csc) <- (C +) s[32 x 32] */
static void aotc_bf16_store(const float *s, float *c, int64_t rsc, int64_t csc, int64_t mr, int64_t nr, int add)
{
    int64_t i, j;
    for (i = 0; i < mr; ++i) {
        float *ci = c + i * rsc;
        const float *si = s + i * 32;
        if (csc == 1 && add)
            for (j = 0; j < nr; ++j)
                ci[j] += si[j];
        else if (csc == 1)
            for (j = 0; j < nr; ++j)
                ci[j] = si[j];
        else
            for (j = 0; j < nr; ++j)
                ci[j * csc] = add ? ci[j * csc] + si[j] : si[j];
    }
}

/* The float32 blocks' floats at the start of one thread's work (aotc_sgemm_block's layout) */
static int64_t aotc_bf16_work_offset(const aotc_sgemm_call *g, int64_t kstep, int64_t nc_step, int a_packed,
                                     int b_packed)
{
    return (b_packed ? 0 : kstep * aotc_bf16_round(aotc_gemm_min(nc_step, g->N), AOTC_GEMM_NR)) +
           (a_packed ? 0 : kstep * aotc_bf16_round(aotc_gemm_min(AOTC_GEMM_MC, g->M), AOTC_GEMM_MR));
}

/* Rows [m0, m1) x columns [n0, n1) of C on the tiles (aotc_sgemm_block's contract). The
 * float32 path's scratch comes first in `work` (its layout, sized as for that path), then B's
 * converted columns (none when B is stored in the tiles' layout), then A's rows. */
static void aotc_sgemm_block_bf16(const aotc_sgemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                                  float *work)
{
    const int a_packed = g->rsa == 0 && g->csa == 0 && !AOTC_AIM2COL(g) && !g->Ah, b_packed = g->rsb == 0 && g->csb == 0 && !AOTC_BIM2COL(g) && !g->Bh;
    const int64_t K = g->K, M = m1 - m0, N = n1 - n0;
    const int64_t kstep = aotc_sgemm_kstep(K), kp = aotc_bf16_round(kstep, 32);
    /* the float32 path's column block (its scratch's layout); B stored for the tiles needs none */
    const int64_t nc_f32 = b_packed ? AOTC_GEMM_NC
        : aotc_gemm_min(AOTC_GEMM_NC, aotc_gemm_max(AOTC_GEMM_NR, AOTC_GEMM_MC * AOTC_GEMM_KC / kstep / AOTC_GEMM_NR * AOTC_GEMM_NR));
    /* a strided B with contiguous rows is converted from where it lies (no float32 packing) */
    const int b_rows = !g->Bh && !b_packed && !AOTC_BIM2COL(g) && g->csb == 1;
    const int64_t nc_step = g->Bh ? AOTC_GEMM_NC : nc_f32;
    const int64_t nh_step = g->Bh ? nc_step : aotc_gemm_min(nc_step, AOTC_BF16_NC);   /* columns converted at a time */
    const int64_t Mpad = (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR * AOTC_GEMM_MR;
    float *bwork = work;
    float *awork = b_packed ? work : work + kstep * aotc_bf16_round(aotc_gemm_min(nc_f32, N), AOTC_GEMM_NR);
    uint16_t *Bh = (uint16_t *)(work + aotc_bf16_work_offset(g, kstep, nc_f32, a_packed, b_packed));
    uint16_t *Ah = Bh + (g->Bh ? 0 : kp * aotc_bf16_round(aotc_gemm_min(nh_step, g->N), 32));
    /* a constant A in float32 panels small enough is converted once, K block by K block (a block
       every a_block values), for all the column blocks; else each row block as it comes */
    const int64_t a_block = aotc_bf16_round(g->M, 32) * kp;
    const int a_once = a_packed && a_block * ((K + kstep - 1) / kstep) <= AOTC_BF16_A_ONCE;
    float *C0 = g->C + m0 * g->rsc + n0 * g->csc;
    float sums[32 * 32] __attribute__((aligned(64)));
    int64_t jc, jh, pc, ic, jr, ir;
    const int amx = aotc_bf16_ready() == AOTC_BF16_ON_AMX;
    void (*const tile)(int64_t, const uint16_t *, const uint16_t *, float *, int64_t, int, int64_t, int64_t,
                       const uint16_t *) =
        amx ? aotc_bf16_tile : aotc_bf16_tile_dot;
    if (amx)
        aotc_amx_tiles_on();
    for (jc = 0; jc < N; jc += nc_step) {
        const int64_t nc = aotc_gemm_min(nc_step, N - jc);
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc), kcp = aotc_bf16_round(kc, 32);
            const int add = g->accumulate || pc > 0, last = pc + kc == K;
            /* (B in tiles is read in place, B's contiguous rows converted as they lie, below) */
            const float *bp = g->Bh || b_rows ? NULL : aotc_sgemm_b_block(g, pc, kc, kstep, n0 + jc, nc, bwork);
            for (jh = 0; jh < nc; jh += nh_step) {
                const int64_t nh = aotc_gemm_min(nh_step, nc - jh);
                const uint16_t *bh = Bh;
                if (g->Bh)
                    bh = aotc_bf16_b_block(g, pc, kstep) + (n0 + jc + jh) * kcp;
                else if (b_rows)
                    aotc_bf16_b_rows(kc, nh, g->B + pc * g->rsb + (n0 + jc + jh), g->rsb, Bh);
                else
                    aotc_bf16_b_panels(kc, nh, bp + jh * kc, Bh);
                for (ic = 0; ic < M; ic += AOTC_GEMM_MC) {
                    const int64_t mc = aotc_gemm_min(AOTC_GEMM_MC, M - ic);
                    const uint16_t *ah = Ah;
                    if (g->Ah) {
                        ah = aotc_bf16_a_block(g, pc, kstep) + (m0 + ic) * kcp;
                    } else if (a_once) {
                        ah = Ah + pc / kstep * a_block + ic * kcp;
                        if (jc == 0 && jh == 0)
                            aotc_bf16_a_panels(mc, kc, g->A + pc * Mpad + (m0 + ic) * kc, Ah + pc / kstep * a_block + ic * kcp);
                    } else if (a_packed) {
                        aotc_bf16_a_panels(mc, kc, g->A + pc * Mpad + (m0 + ic) * kc, Ah);
                    } else if (AOTC_AIM2COL(g)) {
                        aotc_sgemm_pack_im2col(AOTC_AIM2COL(g), pc, kc, m0 + ic, mc, AOTC_GEMM_MR, awork);
                        aotc_bf16_a_panels(mc, kc, awork, Ah);
                    } else if (g->csa == 1) {
                        aotc_bf16_a_rows(mc, kc, g->A + (m0 + ic) * g->rsa + pc, g->rsa, Ah);
                    } else {
                        aotc_sgemm_pack_a(mc, kc, g->A + (m0 + ic) * g->rsa + pc * g->csa, g->rsa, g->csa, awork);
                        aotc_bf16_a_panels(mc, kc, awork, Ah);
                    }
                    for (jr = 0; jr < nh; jr += 32)
                        for (ir = 0; ir < mc; ir += 32) {
                            const int64_t mr = aotc_gemm_min(32, mc - ir), nr = aotc_gemm_min(32, nh - jr);
                            const int64_t i = ic + ir, j = jc + jh + jr;
                            float *c = C0 + i * g->rsc + j * g->csc;
                            /* what a coming call reads that may not be in cache: A's next rows
                               (a constant A's continue into the next row block: a convolution's
                               weights, from memory in the first column block), else B's next
                               columns (a constant B's come from memory: a MatMul's weights) */
                            const uint16_t *ahead = ir + 32 < mc || (g->Ah && ic + mc < M) ? ah + (ir + 32) * kcp
                                : jr + 32 < nh ? bh + (jr + 32) * kcp : NULL;
                            if (mr == 32 && nr == 32 && g->csc == 1) {      /* C's own rows are the tiles' */
                                tile(kcp, ah + ir * kcp, bh + jr * kcp, c, g->rsc, add, 32, 32, ahead);
                            } else {
                                tile(kcp, ah + ir * kcp, bh + jr * kcp, sums, 32, 0, mr, nr, ahead);
                                aotc_bf16_store(sums, c, g->rsc, g->csc, mr, nr, add);
                            }
                            if (last && g->epilogue)
                                g->epilogue(g->epilogue_args, m0 + i, m0 + i + mr, n0 + j, n0 + j + nr);
                        }
                }
            }
        }
    }
    if (amx)
        aotc_amx_tiles_off();
}

/* Does this GEMM run on the tiles? (Decided by the whole product, so that a thread's block of
   it is computed as every other's: the result does not depend on the threads.) */
static int aotc_sgemm_on_tiles(const aotc_sgemm_call *g)
{
    return g->M >= AOTC_BF16_MIN && g->N >= AOTC_BF16_MIN && g->K >= AOTC_BF16_MIN && aotc_bf16_ready();
}
#endif

/* Part `tile` of `tiles` of the panel (kc x NR floats) at `panel`, for a tile to bring into L2
 * (aotc_ahead): each of the tiles that cross the panel before it brings a part; NULL: none */
static aotc_ahead aotc_sgemm_ahead(const float *panel, int64_t kc, int64_t tile, int64_t tiles)
{
    const int64_t lines = (kc * AOTC_GEMM_NR + AOTC_CACHE_LINE_FLOATS - 1) / AOTC_CACHE_LINE_FLOATS;
    const int64_t l0 = tile * lines / tiles, l1 = (tile + 1) * lines / tiles;
    aotc_ahead ahead = { NULL, 0 };
    if (panel) {
        ahead.p = panel + l0 * AOTC_CACHE_LINE_FLOATS;
        ahead.lines = aotc_gemm_min(l1 - l0, kc);
    }
    return ahead;
}

/* A convolution with few output channels (the GEMM's rows) summed without its im2col matrix
 * (aotc_sgemm_call.conv_broadcast). Packed as B, that matrix's every element feeds only M rows of
 * the product, and packing it cost more than the product: YOLO's 3 -> 16 channel stride-2 stem
 * spent 45% of its time packing, 33% in the tiles. Here 16 output channels lie in the lanes of a
 * vector and every input element is broadcast to them (an FMA with a broadcast operand), for a
 * block of consecutive output columns of a row at a time (16 columns for one group of 16
 * channels; 14 for two, each broadcast feeding both), so that nothing is packed at run time: A,
 * the weights, is packed at compile time in panels of 16 rows (one K block), tap k of a group's
 * 16 channels at its panel + 16 k. The sums are transposed in registers into C's rows; the
 * epilogue runs on each row's segment once every channel of it is stored. The products and
 * their order are the packed GEMM's (k = (c, kh, kw) ascending, one FMA each; a tap in the
 * padding, which the GEMM adds as w . 0, is skipped), so the two agree bit for bit. The
 * schedule chooses it (schedule/gemm_cpu.py sums_by_broadcast) on targets that say so (AVX-512
 * ones: a source with such a call defines AOTC_GEMM_CONV_BROADCAST), for C's columns contiguous,
 * nothing accumulated, output rows of 16 columns or more. */
#if defined(__AVX512F__) && defined(AOTC_GEMM_CONV_BROADCAST)
#define AOTC_CONV_BROADCAST 1

/* The sums of P consecutive output columns of a row for V groups of 16 channels (V x P <= 28
 * vectors: P 16 for one group, 14 for two), every tap inside the input: out[32 p + 16 g + l] is
 * column p's sum for channel l of group g, whose weights are at w + g * wg. Taps kh in [kh0,
 * kh1) (the rows inside the input); x: the input element that tap (kh0, 0) of channel 0 reads
 * for the first column. V, P and (where the caller passes one) SW are constants, so that each
 * broadcast is an FMA's operand at a fixed offset, read once for the V groups. */
static inline __attribute__((always_inline)) void aotc_conv_broadcast_block(const aotc_im2col *v, const float *restrict w,
                                                                            int64_t wg, const int V, const int P,
                                                                            int64_t channels, const float *restrict x,
                                                                            int64_t kh0, int64_t kh1, int64_t SW,
                                                                            float *restrict out)
{
    const int64_t plane = v->H * v->W, KH = v->KH, KW = v->KW, DH = v->DH * v->W, DW = v->DW;
    __m512 acc[2][16];
    int64_t c, kh, kw;
    int p, g;
    AOTC_UNROLL_FULLY
    for (g = 0; g < V; ++g)
        AOTC_UNROLL_FULLY
        for (p = 0; p < P; ++p)
            acc[g][p] = _mm512_setzero_ps();
    for (c = 0; c < channels; ++c)
        for (kh = kh0; kh < kh1; ++kh) {
            const float *row = x + c * plane + (kh - kh0) * DH;
            const float *wk = w + (c * KH + kh) * KW * 16;
            for (kw = 0; kw < KW; ++kw) {
                const __m512 w0 = _mm512_loadu_ps(wk + kw * 16);
                const __m512 w1 = V > 1 ? _mm512_loadu_ps(wk + wg + kw * 16) : w0;
                const float *s = row + kw * DW;
                AOTC_UNROLL_FULLY
                for (p = 0; p < P; ++p) {
                    const __m512 e = _mm512_set1_ps(s[p * SW]);
                    acc[0][p] = _mm512_fmadd_ps(e, w0, acc[0][p]);
                    if (V > 1)
                        acc[1][p] = _mm512_fmadd_ps(e, w1, acc[1][p]);
                }
            }
        }
    AOTC_UNROLL_FULLY
    for (g = 0; g < V; ++g)
        AOTC_UNROLL_FULLY
        for (p = 0; p < P; ++p)
            _mm512_storeu_ps(out + 32 * p + 16 * g, acc[g][p]);
}

/* One output column's sums (column ow of row oh) over the taps inside the input: out[l] for
 * channel l */
static void aotc_conv_broadcast_one(const aotc_im2col *v, const float *restrict w, int64_t channels, int64_t oh,
                                    int64_t ow, float *restrict out)
{
    const int64_t ih0 = oh * v->SH - v->PH, iw0 = ow * v->SW - v->PW;
    __m512 acc = _mm512_setzero_ps();
    int64_t c, kh, kw;
    for (c = 0; c < channels; ++c)
        for (kh = 0; kh < v->KH; ++kh) {
            const int64_t ih = ih0 + kh * v->DH;
            if (ih < 0 || ih >= v->H)
                continue;
            for (kw = 0; kw < v->KW; ++kw) {
                const int64_t iw = iw0 + kw * v->DW;
                if (iw >= 0 && iw < v->W)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(v->x[(c * v->H + ih) * v->W + iw]),
                                          _mm512_loadu_ps(w + ((c * v->KH + kh) * v->KW + kw) * 16), acc);
            }
        }
    _mm512_storeu_ps(out, acc);
}

/* P columns from x (see aotc_conv_broadcast_block) at SW 1, 2 or any */
#define AOTC_CONV_BROADCAST_AT(V, P)                                                                       \
    do {                                                                                                   \
        if (SW == 1)                                                                                       \
            aotc_conv_broadcast_block(v, w, K * 16, V, P, channels, x, kh0, kh1, 1, sums);                \
        else if (SW == 2)                                                                                  \
            aotc_conv_broadcast_block(v, w, K * 16, V, P, channels, x, kh0, kh1, 2, sums);                \
        else                                                                                               \
            aotc_conv_broadcast_block(v, w, K * 16, V, P, channels, x, kh0, kh1, SW, sums);               \
    } while (0)

/* Rows [m0, m1) x columns [n0, n1) of C = the convolution of g's bim2col (see above; m0 a
 * multiple of 16), its groups of 16 channels two at a time (14 columns a block) and the last one
 * alone (16) */
static void aotc_conv_broadcast(const aotc_sgemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    const aotc_im2col *v = AOTC_BIM2COL(g);
    const int64_t K = g->K, channels = K / (v->KH * v->KW), OW = v->OW, SW = v->SW;
    const int64_t groups = (m1 - m0 + 15) / 16;
    /* the output columns whose every tap lies inside the input's row: [lo, hi) */
    const int64_t last = v->W - 1 + v->PW - (v->KW - 1) * v->DW;
    const int64_t lo = aotc_gemm_min(OW, (v->PW + SW - 1) / SW), hi = last < 0 ? 0 : aotc_gemm_min(OW, last / SW + 1);
    float sums[16 * 32];
    int64_t q, t, j = n0;
    while (j < n1) {
        /* columns [a, b) of output row oh */
        const int64_t oh = j / OW, a = j % OW, b = aotc_gemm_min(OW, a + n1 - j);
        const int64_t ih0 = oh * v->SH - v->PH;
        /* the kernel rows inside the input: [kh0, kh1) */
        const int64_t kh0 = ih0 >= 0 ? 0 : aotc_gemm_min(v->KH, (-ih0 + v->DH - 1) / v->DH);
        const int64_t kh1 = ih0 >= v->H ? kh0 : aotc_gemm_max(kh0, aotc_gemm_min(v->KH, (v->H - 1 - ih0) / v->DH + 1));
        const int64_t ilo = aotc_gemm_max(a, lo), ihi = aotc_gemm_min(b, hi);
        /* the input rows of the next output row, into L2 while this one is summed: MobileNetV2's
           stem (its input not in cache when a run starts) took 0.464 ms without, 0.319 with */
        for (t = 0; t < channels * v->KH; ++t) {
            const int64_t ih = ih0 + v->SH + t % v->KH * v->DH;
            int64_t at;
            if (ih >= 0 && ih < v->H)
                for (at = 0; at < v->W; at += AOTC_CACHE_LINE_FLOATS)
                    AOTC_PREFETCH_L2(v->x + (t / v->KH * v->H + ih) * v->W + at);
        }
        for (q = 0; q < groups;) {
            const int V = q + 1 < groups ? 2 : 1, P = V == 2 ? 14 : 16;
            const float *w = g->A + (m0 + 16 * q) * K;
            const int rows = (int)aotc_gemm_min(16 * V, m1 - m0 - 16 * q);
            float *c = g->C + (m0 + 16 * q) * g->rsc + oh * OW;
            int64_t ow, o;
            int l;
            for (ow = a; ow < b; ++ow) {
                if (ihi - ilo >= P && ow == ilo) {
                    /* P columns at a time, the last block moved back to end at ihi */
                    for (; ow < ihi; ow += P) {
                        const float *x;
                        o = aotc_gemm_min(ow, ihi - P);
                        x = v->x + (ih0 + kh0 * v->DH) * v->W + o * SW - v->PW;
                        if (V == 2)
                            AOTC_CONV_BROADCAST_AT(2, 14);
                        else
                            AOTC_CONV_BROADCAST_AT(1, 16);
                        aotc_transpose16_part(sums, 32, P, (int)aotc_gemm_min(16, rows), c + o, g->rsc,
                                              (__mmask16)((1u << P) - 1u));
                        if (rows > 16)
                            aotc_transpose16_part(sums + 16, 32, P, rows - 16, c + 16 * g->rsc + o, g->rsc,
                                                  (__mmask16)((1u << P) - 1u));
                    }
                    ow = ihi - 1;
                    continue;
                }
                for (l = 0; l < V; ++l) {
                    int r;
                    aotc_conv_broadcast_one(v, w + l * K * 16, channels, oh, ow, sums);
                    for (r = 0; r < aotc_gemm_min(16, rows - 16 * l); ++r)
                        c[(16 * l + r) * g->rsc + ow] = sums[r];
                }
            }
            q += V;
        }
        if (g->epilogue)
            g->epilogue(g->epilogue_args, m0, m1, j, j + b - a);
        j += b - a;
    }
}
#undef AOTC_CONV_BROADCAST_AT
#elif defined(AOTC_GEMM_CONV_BROADCAST)
#error "the target's [gemm] conv_broadcast needs AVX-512: build with -mavx512f, or set conv_broadcast = false"
#else
#define AOTC_CONV_BROADCAST 0
#endif

/* Rows [m0, m1) x columns [n0, n1) of C (m0 a multiple of MR, n0 of aotc_sgemm_row_unit(g), so
 * that packed operands can be entered at their panels). */
static void aotc_sgemm_block(const aotc_sgemm_call *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                             float *work)
{
    const int a_packed = g->rsa == 0 && g->csa == 0 && !AOTC_AIM2COL(g) && !g->Ah, b_packed = g->rsb == 0 && g->csb == 0 && !AOTC_BIM2COL(g) && !g->Bh;
    const int64_t K = g->K, M = m1 - m0, N = n1 - n0;
#if AOTC_CONV_BROADCAST
    if (g->conv_broadcast) {          /* (its A is laid out for it alone) */
        if (M > 0 && N > 0)
            aotc_conv_broadcast(g, m0, m1, n0, n1);
        return;
    }
#endif
#if AOTC_BF16_AMX
    if (aotc_sgemm_on_tiles(g)) {
        aotc_sgemm_block_bf16(g, m0, m1, n0, n1, work);
        return;
    }
#endif
    if (M == 1 && !a_packed && !b_packed && !AOTC_AIM2COL(g) && !AOTC_BIM2COL(g) && !g->Ah && !g->Bh && K > 0 && N > 0 &&
        (g->rsb == 1 || g->csb == 1)) {
        aotc_sgemm_one_row(g, m0, n0, n1);
        if (g->epilogue)
            g->epilogue(g->epilogue_args, m0, m1, n0, n1);
        return;
    }
    const int64_t kstep = aotc_sgemm_kstep(K);
    /* a B packed here is packed NC columns at a time, or fewer when that block would be larger
       than MC x KC floats (A's block, which the tiles find in L2): packed blocks then stay in L2
       too, instead of being written out to L3 and read back (a convolution's 144 x 2048 im2col
       block is 1.2 MB); K = 0 (a run-time size) returns below */
    const int64_t nc_step = b_packed ? AOTC_GEMM_NC
        : aotc_gemm_min(AOTC_GEMM_NC, aotc_gemm_max(AOTC_GEMM_NR, AOTC_GEMM_MC * AOTC_GEMM_KC / (kstep ? kstep : 1) / AOTC_GEMM_NR * AOTC_GEMM_NR));
    const int64_t nc_max = aotc_gemm_min(nc_step, N);
    const int64_t Mpad = (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR * AOTC_GEMM_MR;
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
    for (jc = 0; jc < N; jc += nc_step) {
        const int64_t nc = aotc_gemm_min(nc_step, N - jc);
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc);
            const int last = pc + kc == K;
            const float *bp = aotc_sgemm_b_block(g, pc, kc, kstep, n0 + jc, nc, bwork);
            for (ic = 0; ic < M; ic += AOTC_GEMM_MC) {
                const int64_t mc = aotc_gemm_min(AOTC_GEMM_MC, M - ic);
                const int64_t tiles = (mc + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR;     /* (row tiles in the block) */
                const float *ap;
                if (a_packed) {
                    ap = g->A + pc * Mpad + (m0 + ic) * kc;
#if AOTC_GEMM_BF16_LAYOUTS
                } else if (g->Ah) {
                    aotc_bf16_widen_a(mc, kc, aotc_bf16_a_block(g, pc, kstep) + (m0 + ic) * aotc_bf16_round(kc, 32), awork);
                    ap = awork;
#endif
                } else if (AOTC_AIM2COL(g)) {
                    aotc_sgemm_pack_im2col(AOTC_AIM2COL(g), pc, kc, m0 + ic, mc, AOTC_GEMM_MR, awork);
                    ap = awork;
                } else if (mc == 1) {
                    /* one row: the one-row kernels read the panel's first row only, so only it
                       is written (an LSTM step's h . R packed 8 x 128 floats for 128 read: 5%
                       of the zoo LSTM's time) */
                    const float *a = g->A + (m0 + ic) * g->rsa + pc * g->csa;
                    int64_t k;
                    for (k = 0; k < kc; ++k)
                        awork[k * AOTC_GEMM_MR] = a[k * g->csa];
                    ap = awork;
                } else {
                    aotc_sgemm_pack_a(mc, kc, g->A + (m0 + ic) * g->rsa + pc * g->csa, g->rsa, g->csa, awork);
                    ap = awork;
                }
                if (aotc_sgemm_row_unit(g) > AOTC_GEMM_NR) {
                    /* one row of weights packed at compile time: its tiles AOTC_ROW_PANELS panels at
                       a time (aotc_sgemm_tile_row_panels), or half as many (the same sums), the
                       panels left one at a time; the groups start at multiples of
                       aotc_sgemm_row_unit(g) columns (as do a split among threads and NC), so that
                       every column gets the kernel one thread gives it */
                    float *c = C0 + ic * g->rsc + jc * g->csc;
                    /* weights that stay in L2 from one product to the next (an LSTM's recurrent
                       weights, read every time step) go by half-groups: 4 streams of 256 KB took
                       0.93 of the time of 8 in the zoo's LSTM (AMD EPYC Zen 4); from memory, 8
                       streams draw more (128 MB: 0.96) */
                    const int groups = g->K * g->N * (int64_t)sizeof(float) > AOTC_ROW_CACHED_BYTES;
                    for (jr = 0; jr < nc;) {
                        const int whole = groups && nc - jr > (AOTC_ROW_PANELS - 1) * AOTC_GEMM_NR;
                        const int half = !whole && nc - jr > (AOTC_ROW_HALF - 1) * AOTC_GEMM_NR;
                        const int64_t n = aotc_gemm_min(whole ? AOTC_ROW_PANELS * AOTC_GEMM_NR
                                                        : half ? AOTC_ROW_HALF * AOTC_GEMM_NR : AOTC_GEMM_NR, nc - jr);
                        if (whole)
                            aotc_sgemm_tile_row_panels(kc, ap, bp + jr * kc, c + jr * g->csc, g->csc, n,
                                                       g->accumulate || pc > 0);
                        else if (half)
                            aotc_sgemm_tile_row_half(kc, ap, bp + jr * kc, c + jr * g->csc, g->csc, n,
                                                     g->accumulate || pc > 0);
                        else
                            aotc_sgemm_tile_row(kc, ap, bp + jr * kc, c + jr * g->csc, g->csc, n,
                                                g->accumulate || pc > 0);
                        if (last && g->epilogue)
                            g->epilogue(g->epilogue_args, m0 + ic, m0 + ic + 1, n0 + jc + jr, n0 + jc + jr + n);
                        jr += n;
                    }
                } else if (last && g->epilogue) {
                    /* the last K block of a GEMM with an epilogue: tiles along the rows of C, each
                       finished by the epilogue, so that it reads its operands (a residual) as a
                       few forward streams (down the rows, the reads jump a row apart per tile and
                       the prefetchers lose them: 28% slower at 256 x 3136 x 64); the columns in
                       parts of B no larger than A's block, which stay in L2 while every row
                       panel crosses them (a whole NC block of B, 3 MB at KC 384, came from L3
                       for each: 128 x 768 x 2048 2.93 -> 2.24 ms, Intel Xeon) */
                    const int64_t part = aotc_gemm_max(AOTC_GEMM_NR,
                                                       AOTC_GEMM_MC * AOTC_GEMM_KC / kc / AOTC_GEMM_NR * AOTC_GEMM_NR);
                    int64_t jp;
                    for (jp = 0; jp < nc; jp += part)
                        for (ir = 0; ir < mc; ir += AOTC_GEMM_MR)
                            for (jr = jp; jr < aotc_gemm_min(jp + part, nc); jr += AOTC_GEMM_NR) {
                                const int64_t mr = aotc_gemm_min(AOTC_GEMM_MR, mc - ir);
                                const int64_t nr = aotc_gemm_min(AOTC_GEMM_NR, nc - jr);
                                float *c = C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc;
                                /* (the next part of B's panels, a part of one per tile) */
                                const aotc_ahead ahead = aotc_sgemm_ahead(b_packed && jr + part < nc ? bp + (jr + part) * kc
                                                                          : NULL, kc, ir / AOTC_GEMM_MR, tiles);
                                if (g->tile && mr == AOTC_GEMM_MR && nr == AOTC_GEMM_NR) {
                                    g->tile(g->epilogue_args, kc, ap + ir * kc, bp + jr * kc, c,
                                            m0 + ic + ir, n0 + jc + jr, g->accumulate || pc > 0, ahead);
                                    continue;
                                }
                                aotc_sgemm_tile_any(kc, ap + ir * kc, bp + jr * kc, c, g->rsc, g->csc,
                                                    mr, nr, g->accumulate || pc > 0, ahead);
                                g->epilogue(g->epilogue_args, m0 + ic + ir, m0 + ic + ir + mr,
                                            n0 + jc + jr, n0 + jc + jr + nr);
                            }
                } else {
                    /* B's micro-panel stays in L1 while the tiles walk down A's panels (and bring
                       the next panel into L2, a part each, where B was packed at compile time) */
                    for (jr = 0; jr < nc; jr += AOTC_GEMM_NR)
                        for (ir = 0; ir < mc; ir += AOTC_GEMM_MR)
                            aotc_sgemm_tile_any(kc, ap + ir * kc, bp + jr * kc,
                                                C0 + (ic + ir) * g->rsc + (jc + jr) * g->csc, g->rsc, g->csc,
                                                aotc_gemm_min(AOTC_GEMM_MR, mc - ir), aotc_gemm_min(AOTC_GEMM_NR, nc - jr),
                                                g->accumulate || pc > 0,
                                                aotc_sgemm_ahead(b_packed && jr + AOTC_GEMM_NR < nc ? bp + (jr + AOTC_GEMM_NR) * kc
                                                                 : NULL, kc, ir / AOTC_GEMM_MR, tiles));
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
    const int64_t unit = aotc_sgemm_row_unit(g);
    if (g->split == AOTC_GEMM_SPLIT_ROWS)
        aotc_sgemm_block(g, begin * AOTC_GEMM_MR, aotc_gemm_min(end * AOTC_GEMM_MR, g->M), 0, g->N, work);
    else
        aotc_sgemm_block(g, 0, g->M, begin * unit, aotc_gemm_min(end * unit, g->N), work);
}

/* Runs one GEMM, split among the pool's threads as g->split says (pool NULL: this thread).
 * (Inline only so that a source whose GEMMs are all integer ones, aotc_igemm.h, which
 * includes this header, does not warn of it unused.) */
static inline void aotc_sgemm(aotc_pool *pool, const aotc_sgemm_call *g)
{
    if (!pool || g->split == AOTC_GEMM_SPLIT_NONE) {
        aotc_sgemm_block(g, 0, g->M, 0, g->N, g->work);
        return;
    }
    if (g->split == AOTC_GEMM_SPLIT_ROWS)
        aotc_parallel_for(pool, (g->M + AOTC_GEMM_MR - 1) / AOTC_GEMM_MR, aotc_sgemm_part, (void *)g);
    else
        aotc_parallel_for(pool, (g->N + aotc_sgemm_row_unit(g) - 1) / aotc_sgemm_row_unit(g), aotc_sgemm_part,
                          (void *)g);
}

#endif
