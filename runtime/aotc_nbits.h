/* aotc runtime: block-quantized weights times activations quantized to int8 blocks, the product
 * ONNX Runtime's MatMulNBits computes at accuracy_level 4 (aotc.MatMulNBits with
 * int8_activations, aotc/ops/nbits.py, which also writes the same arithmetic as kernel loops for
 * the targets without this header).
 *
 *   Y[m, n] = sum over blocks b of  a_scale[m, b] * S[n, b] * sum_k qa[m, k] * w[n, k]
 *                                 - a_sum[m, b] * S[n, b] * zero[n, b]
 *
 * where w are the weights' unsigned values as packed (2, 4 or 8 bits, low bits first), zero the
 * block's zero point (packed like the weights, or 2^(bits-1) without them), and each block of
 * bs values of a row of A is quantized on its own: amax = max |a|, a_scale = amax / 127,
 * qa = round-half-even(a * (127 / amax)) (0 where amax is 0), a_sum = a_scale * sum(qa). The
 * integer sums are exact; only the float sums over blocks round (in another order than ONNX
 * Runtime's: results agree to float32 rounding).
 *
 * Layout of the quantized rows (aotc_nbits_quantize): row m's blocks one after another, bs
 * bytes each (a last block shorter than bs padded with zeros). Against the weights as packed,
 * within a block the values in the weights' byte order: value k of a block at
 * (k % per) * blob + k / per, per = 8 / bits values in a byte, blob = bs / per bytes in a
 * block. Byte j of a weight block and position t * blob + j of its row then meet, so the dot
 * product reads both in order: value t of every byte against one run of activations. (4-bit
 * blocks of 32 on the VNNI product: pairs of blocks interleaved, aotc_nbits_paired.) Against
 * tiles, in their own order.
 *
 * Tiles: 4-bit weights relaid at compile time (aotc/passes/caches.py) for the VNNI product:
 * columns in tiles of 16 (the last one padded with zero weights), each tile's positions (K
 * padded to whole blocks) in groups of 8, a group in 64 bytes: byte 4c + i holds position i of
 * column c in its low nibble and position 4 + i in its high one. One vpdpbusd of a group's low
 * (or high) nibbles against 4 activations broadcast makes 16 columns' sums at once; a block's
 * sums are scaled by 16 columns' scales in one load (relaid the same way: [tiles, blocks, 16],
 * as are the scales x zero points).
 *
 * Which dot product runs is chosen at run time: AVX-512 VNNI (vpdpbusd, 64 products of uint8
 * weights and int8 activations per instruction, summed exactly in int32) for 4 and 8-bit
 * weights in blocks of at least 32, where the artifact was built with AVX-512 and the CPU has
 * VNNI; elsewhere plain C, which GCC vectorizes. */
#ifndef AOTC_NBITS_H
#define AOTC_NBITS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && !defined(AOTC_NBITS_PLAIN)
#define AOTC_NBITS_VNNI 1
#include <immintrin.h>
#else
#define AOTC_NBITS_VNNI 0
#endif

/* Does this CPU run the VNNI product for these weights (`aotc_nbits_gemm`; tiles: any block
 * size)? */
static inline int aotc_nbits_uses_vnni(int64_t bits, int64_t bs, int64_t tiles)
{
#if AOTC_NBITS_VNNI
    /* (libgcc's cpuid table, filled when the program starts) */
    return (tiles || ((bits == 4 || bits == 8) && bs >= 32)) && __builtin_cpu_supports("avx512vnni");
#else
    (void)bits, (void)bs, (void)tiles;
    return 0;
#endif
}

/* The paired order: 4-bit weights in blocks of 32 on the VNNI product, which unpacks the 32
 * bytes of two blocks as their 32 low nibbles, then their 32 high ones. The quantized rows
 * follow: within each pair of blocks (b even, b + 1), value k = 2j + t of block b + i at
 * t * 32 + i * 16 + j (a last block without a partner keeps its own order). */
static inline int aotc_nbits_paired(int64_t bits, int64_t bs)
{
    return bits == 4 && bs == 32 && aotc_nbits_uses_vnni(bits, bs, 0);
}

/* Rows m < M of A (K floats each) quantized in blocks of bs as the header says: qa (M rows of
 * blocks * bs bytes: for tiles, in A's order; else the blocks' byte order or the paired one),
 * a_scale and a_sum (M rows of blocks). */
static void aotc_nbits_quantize(const float *A, int64_t M, int64_t K, int64_t bs, int64_t bits, int64_t tiles,
                                int8_t *qa, float *a_scale, float *a_sum)
{
    const int64_t blocks = (K + bs - 1) / bs, per = tiles ? 1 : 8 / bits, blob = bs / per;
    const int paired = !tiles && aotc_nbits_paired(bits, bs);
    memset(qa, 0, (size_t)(M * blocks * bs));
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < blocks; b++) {
            const float *a = A + m * K + b * bs;
            const int64_t len = K - b * bs < bs ? K - b * bs : bs;
            int8_t *q = qa + (m * blocks + b) * bs;
            const int pair = paired && (b % 2 == 1 || b + 1 < blocks);
            float amax = 0.0f;
            for (int64_t k = 0; k < len; k++)
                amax = fmaxf(amax, fabsf(a[k]));
            const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
            int32_t sum = 0;
            for (int64_t k = 0; k < len; k++) {
                const int32_t v = (int32_t)nearbyintf(a[k] * inv);
                /* (paired: relative to this block's start, its partner's half-runs interleaved) */
                q[pair ? (k % 2) * 32 + k / 2 - (b % 2) * 16 : (k % per) * blob + k / per] = (int8_t)v;
                sum += v;
            }
            a_scale[m * blocks + b] = amax / 127.0f;
            a_sum[m * blocks + b] = amax / 127.0f * (float)sum;
        }
    }
}

/* sum_k q[k] * w[k] over one block: its blob bytes of weights, bs activations in byte order */
static inline int32_t aotc_nbits_block_dot(const uint8_t *w, const int8_t *q, int64_t blob, int64_t bits)
{
    const int64_t per = 8 / bits;
    const int32_t mask = (1 << bits) - 1;
    int32_t sum = 0;
    for (int64_t t = 0; t < per; t++)
        for (int64_t j = 0; j < blob; j++)
            sum += (int32_t)q[t * blob + j] * (((int32_t)w[j] >> (t * bits)) & mask);
    return sum;
}

/* zs[b] = S[n, b] * zero[n, b] for row n of the weights */
static inline void aotc_nbits_zero_scaled(const float *S, const uint8_t *Z, int64_t n, int64_t blocks,
                                          int64_t bits, float *zs)
{
    if (!Z) {
        for (int64_t b = 0; b < blocks; b++)
            zs[b] = S[n * blocks + b] * (float)(1 << (bits - 1));
        return;
    }
    const int64_t per = 8 / bits, zrow = (blocks + per - 1) / per;
    const int32_t mask = (1 << bits) - 1;
    for (int64_t b = 0; b < blocks; b++)
        zs[b] = S[n * blocks + b] * (float)(((int32_t)Z[n * zrow + b / per] >> ((b % per) * bits)) & mask);
}

/* Y[m, n] (rows ldy apart) for n0 <= n < n1 and every m < M, from aotc_nbits_quantize's rows.
 * B: the weights' rows, blocks * blob bytes each; S: their scales (blocks a row); Z: packed
 * zero points or NULL; ZS: S x the zero points (blocks a row), computed at compile time, or
 * NULL; zs: blocks floats of scratch. Plain C. */
static void aotc_nbits_gemm_plain(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits,
                                  const int8_t *qa, const float *a_scale, const float *a_sum, const uint8_t *B,
                                  const float *S, const uint8_t *Z, const float *ZS, float *Y, int64_t ldy,
                                  float *zs)
{
    const int64_t blocks = (K + bs - 1) / bs, blob = bs * bits / 8;
    for (int64_t n = n0; n < n1; n++) {
        const float *zc = ZS ? ZS + n * blocks : zs;
        if (!ZS)
            aotc_nbits_zero_scaled(S, Z, n, blocks, bits, zs);
        for (int64_t m = 0; m < M; m++) {
            float acc = 0.0f, corr = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const int32_t dot = aotc_nbits_block_dot(B + (n * blocks + b) * blob, qa + (m * blocks + b) * bs,
                                                         blob, bits);
                acc += a_scale[m * blocks + b] * S[n * blocks + b] * (float)dot;
                corr += a_sum[m * blocks + b] * zc[b];
            }
            Y[m * ldy + n] = acc - corr;
        }
    }
}

#if AOTC_NBITS_VNNI
/* The 64 weight values at positions [p, p + 64) of a row's blocks as bytes: 8 bits: the bytes
 * themselves; 4 bits in blocks of 128 and more: one nibble of 64 bytes; in blocks of 64 or 32:
 * the low nibbles of 32 bytes (one block of 64, or two of 32), then their high nibbles (which
 * is the block's order at 64, and the paired order at 32: see aotc_nbits_paired). */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i aotc_nbits_w64(const uint8_t *row, int64_t p,
                                                                                 int64_t bs, int64_t bits)
{
    if (bits == 8)
        return _mm512_loadu_si512((const void *)(row + p));
    const __m512i low = _mm512_set1_epi8(0x0F);
    const int64_t blob = bs / 2;
    if (blob >= 64) {
        const int64_t b = p / bs, t = (p % bs) / blob, j = p % bs % blob;
        const __m512i x = _mm512_loadu_si512((const void *)(row + b * blob + j));
        return _mm512_and_si512(t ? _mm512_srli_epi16(x, 4) : x, low);
    }
    const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(row + p / 2)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(x, 0xFFFF0000u, x, 4), low);
}

/* The scales of a 64-position chunk's 16 lanes (4 positions each) from per-block values v:
 * with blocks of 32 the chunk is two blocks (lanes 0-7 the first, 8-15 the second; 4-bit ones
 * in the paired order: lanes 0-3 and 8-11 the first, 4-7 and 12-15 the second), else inside one */
__attribute__((target("avx512f"))) static inline __m512 aotc_nbits_lanes(const float *v, int64_t p, int64_t bs,
                                                                        int64_t bits)
{
    if (bs == 32) {
        double two;                              /* v[b], v[b + 1] in one 8-byte load */
        memcpy(&two, v + p / 32, sizeof two);
        const __m512i which = bits == 4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
                                        : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        return _mm512_permutexvar_ps(which, _mm512_castpd_ps(_mm512_set1_pd(two)));
    }
    return _mm512_set1_ps(v[p / bs]);
}

/* Column n's share of an odd last block of 32 (the VNNI products take 64 positions a step),
 * which is in plain byte order: its scaled dot product, less the zero point's share where the
 * weights have none (`no_zero`: 2^(bits-1); zero points are taken off with the others). */
static inline float aotc_nbits_last_block(int64_t n, int64_t blocks, int64_t bs, int64_t bits, const int8_t *q,
                                          const float *as, const float *asum, const uint8_t *B, const float *S,
                                          int no_zero)
{
    const int64_t b = blocks - 1, blob = bs * bits / 8;
    const float s = S[n * blocks + b];
    float part = as[b] * s * (float)aotc_nbits_block_dot(B + (n * blocks + b) * blob, q + b * bs, blob, bits);
    if (no_zero)
        part -= asum[b] * (s * (float)(1 << (bits - 1)));
    return part;
}

/* sum of a[i] * b[i], i < n, in 16 lanes */
__attribute__((target("avx512f"))) static inline float aotc_nbits_fdot(const float *a, const float *b, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    float sum = _mm512_reduce_add_ps(acc);
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* One 64-position chunk (positions [p, p + 64)) of aotc_nbits_cols_vnni's columns n .. n + nc - 1
 * for one row q, added to acc[0, nc): the chunk of q is loaded once and multiplied by each
 * column's weights (`unpacked`: the columns' values as bytes, width apart; NULL: unpacked from B
 * as read), the 16 int32 lanes of each product turned to float and scaled by both sides' block
 * scales into the column's float lanes. Without zero points (zs NULL) the zero point's share,
 * a_sum x S x 2^(bits-1) a block, is taken off lane by lane (each of a block's bs / 4 lanes its
 * part). */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
aotc_nbits_cols_chunk(const int nc, __m512 *acc, int64_t p, const int8_t *q, const float *as, const float *asum,
                      int64_t n, int64_t blocks, int64_t bs, int64_t bits, const uint8_t *B, const float *S,
                      const uint8_t *unpacked, const float *zs, int64_t width)
{
    const int64_t blob = bs * bits / 8;
    const __m512 zpart = _mm512_set1_ps((float)(1 << (bits - 1)) * 4.0f / (float)bs);
    const __m512i qv = _mm512_loadu_si512((const void *)(q + p));
    const __m512 al = aotc_nbits_lanes(as, p, bs, bits);
    const __m512 zl = zs ? _mm512_setzero_ps() : _mm512_mul_ps(aotc_nbits_lanes(asum, p, bs, bits), zpart);
    for (int c = 0; c < nc; c++) {
        const __m512i w = unpacked ? _mm512_loadu_si512((const void *)(unpacked + c * width + p))
                                   : aotc_nbits_w64(B + (n + c) * blocks * blob, p, bs, bits);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, qv);
        const __m512 sl = aotc_nbits_lanes(S + (n + c) * blocks, p, bs, bits);
        /* (dot x a_scale - the zero point's share) x the weights' scale */
        acc[c] = _mm512_fmadd_ps(_mm512_fmsub_ps(_mm512_cvtepi32_ps(dot), al, zl), sl, acc[c]);
    }
}

/* Columns n .. n + nc - 1 (nc 4 or 1, a constant where it is inlined) for every row, by chunks of
 * aotc_nbits_cols_chunk; each column's float lanes are added at the row's end. (An odd last
 * block of 32 is summed by aotc_nbits_block_dot.) Reading packed weights, the loop asks for the
 * next nc columns' weights as it reads these (as aotc_nbits_quad_vnni does): 128 positions are
 * 64 bytes of a 4-bit column, 128 of an 8-bit one. */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
aotc_nbits_cols_vnni(const int nc, int64_t M, int64_t n, int64_t K, int64_t bs, int64_t bits, const int8_t *qa,
                     const float *a_scale, const float *a_sum, const uint8_t *B, const float *S, const uint8_t *unpacked,
                     const float *zs, float *Y, int64_t ldy)
{
    const int64_t blocks = (K + bs - 1) / bs, blob = bs * bits / 8, width = blocks * bs;
    for (int64_t m = 0; m < M; m++) {
        const int8_t *q = qa + m * width;
        const float *as = a_scale + m * blocks, *asum = a_sum + m * blocks;
        __m512 acc[4];
        for (int c = 0; c < nc; c++)
            acc[c] = _mm512_setzero_ps();
        int64_t p = 0;
        if (unpacked) {
            for (; p + 64 <= width; p += 64)
                aotc_nbits_cols_chunk(nc, acc, p, q, as, asum, n, blocks, bs, bits, B, S, unpacked, zs, width);
        } else {
            for (; p + 128 <= width; p += 128) {
                for (int c = 0; c < nc; c++) {
                    const char *next = (const char *)(B + (n + nc + c) * blocks * blob + p * bits / 8);
                    _mm_prefetch(next, _MM_HINT_T0);
                    if (bits == 8)
                        _mm_prefetch(next + 64, _MM_HINT_T0);
                }
                aotc_nbits_cols_chunk(nc, acc, p, q, as, asum, n, blocks, bs, bits, B, S, NULL, zs, width);
                aotc_nbits_cols_chunk(nc, acc, p + 64, q, as, asum, n, blocks, bs, bits, B, S, NULL, zs, width);
            }
            if (p + 64 <= width) {
                aotc_nbits_cols_chunk(nc, acc, p, q, as, asum, n, blocks, bs, bits, B, S, NULL, zs, width);
                p += 64;
            }
        }
        for (int c = 0; c < nc; c++) {
            float total = _mm512_reduce_add_ps(acc[c]);
            if (p < width)
                total += aotc_nbits_last_block(n + c, blocks, bs, bits, q, as, asum, B, S, !zs);
            Y[m * ldy + n + c] = zs ? total - aotc_nbits_fdot(asum, zs + c * blocks, blocks) : total;
        }
    }
}

/* How far ahead (bytes) the tiles' loop asks for weights: the tiles are one stream, but the
 * CPU's prefetchers stop at each 4 KB page. (A 1B decoder's step at 1 thread, Intel Xeon: 46.1
 * ms without, 42.9 at 2048, 45.2 at 4096.) */
#define AOTC_NBITS_TILE_AHEAD 2048

/* Rows m0 .. m0 + R - 1 (R a constant where it is inlined) of one tile's product: 16 columns of
 * tiles (the header) against the quantized rows q (width bytes each, A's order), stored in
 * columns `keep` of y (rows ldy apart). A block's groups are summed in two int32 chains per row,
 * low nibbles and high, then scaled: (sum x a_scale - the zero point's share) x the 16 columns'
 * scales, the zero point's share a_sum x 8 without zero points, and with them a_sum x the 16
 * columns' scales x zero points (zs16; zero_points a constant). One pass over the tile's
 * weights serves the R rows. */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
aotc_nbits_tile_rows(const int R, const int zero_points, int64_t blocks, int64_t bs, const uint8_t *tile,
                     const int8_t *q, int64_t width, const float *as, const float *asum, const float *s16,
                     const float *zs16, float *y, int64_t ldy, __mmask16 keep)
{
    const int64_t groups = bs / 8;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[8];
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *w = tile + b * groups * 64;
        const int8_t *qb = q + b * bs;
        __m512i lo[8], hi[8];
        for (int r = 0; r < R; r++)
            lo[r] = hi[r] = _mm512_setzero_si512();
        for (int64_t g = 0; g < groups; g++) {
            _mm_prefetch((const char *)(w + g * 64 + AOTC_NBITS_TILE_AHEAD), _MM_HINT_T0);
            const __m512i x = _mm512_loadu_si512((const void *)(w + g * 64));
            const __m512i wl = _mm512_and_si512(x, low), wh = _mm512_and_si512(_mm512_srli_epi16(x, 4), low);
            for (int r = 0; r < R; r++) {
                int32_t a0, a1;               /* the row's 4 + 4 activations of this group */
                memcpy(&a0, qb + r * width + g * 8, 4);
                memcpy(&a1, qb + r * width + g * 8 + 4, 4);
                lo[r] = _mm512_dpbusd_epi32(lo[r], wl, _mm512_set1_epi32(a0));
                hi[r] = _mm512_dpbusd_epi32(hi[r], wh, _mm512_set1_epi32(a1));
            }
        }
        const __m512 s = _mm512_loadu_ps(s16 + b * 16);
        for (int r = 0; r < R; r++) {
            const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(lo[r], hi[r]));
            const __m512 a_scale = _mm512_set1_ps(as[r * blocks + b]);
            if (zero_points) {
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dot, a_scale), s, acc[r]);
                acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(asum[r * blocks + b]), _mm512_loadu_ps(zs16 + b * 16), acc[r]);
            } else {
                const __m512 share = _mm512_set1_ps(asum[r * blocks + b] * 8.0f);
                acc[r] = _mm512_fmadd_ps(_mm512_fmsub_ps(dot, a_scale, share), s, acc[r]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(y + r * ldy, keep, acc[r]);
}

/* Columns n0 .. n1 - 1 (n0 a multiple of 16, n1 - n0 at most 16: one tile) of every row from
 * tiles T, scales S16 and scales x zero points ZS16 (NULL: none), AOTC_NBITS_TILE_ROWS rows a
 * pass, then one at a time. (A 1B decoder's 128-token prompt at 1 thread, Intel Xeon: 828 ms
 * at 4 rows a pass, 771 at 6, 785 at 8.) */
#define AOTC_NBITS_TILE_ROWS 6
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static void
aotc_nbits_tiles_vnni(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, const int8_t *qa,
                      const float *a_scale, const float *a_sum, const uint8_t *T, const float *S16, const float *ZS16,
                      float *Y, int64_t ldy)
{
    const int64_t blocks = (K + bs - 1) / bs, width = blocks * bs, t = n0 / 16;
    const uint8_t *tile = T + t * width * 8;
    const float *s16 = S16 + t * blocks * 16, *zs16 = ZS16 ? ZS16 + t * blocks * 16 : NULL;
    const __mmask16 keep = (__mmask16)((1u << (n1 - n0)) - 1u);
    const int64_t passes = M / AOTC_NBITS_TILE_ROWS;
    for (int64_t i = 0; i < passes; i++) {
        const int64_t m = i * AOTC_NBITS_TILE_ROWS;
        if (zs16)
            aotc_nbits_tile_rows(AOTC_NBITS_TILE_ROWS, 1, blocks, bs, tile, qa + m * width, width, a_scale + m * blocks,
                                 a_sum + m * blocks, s16, zs16, Y + m * ldy + n0, ldy, keep);
        else
            aotc_nbits_tile_rows(AOTC_NBITS_TILE_ROWS, 0, blocks, bs, tile, qa + m * width, width, a_scale + m * blocks,
                                 a_sum + m * blocks, s16, NULL, Y + m * ldy + n0, ldy, keep);
    }
    for (int64_t i = 0; i < M % AOTC_NBITS_TILE_ROWS; i++) {
        const int64_t m = passes * AOTC_NBITS_TILE_ROWS + i;
        if (zs16)
            aotc_nbits_tile_rows(1, 1, blocks, bs, tile, qa + m * width, width, a_scale + m * blocks, a_sum + m * blocks,
                                 s16, zs16, Y + m * ldy + n0, ldy, keep);
        else
            aotc_nbits_tile_rows(1, 0, blocks, bs, tile, qa + m * width, width, a_scale + m * blocks, a_sum + m * blocks,
                                 s16, NULL, Y + m * ldy + n0, ldy, keep);
    }
}

/* as aotc_nbits_gemm_plain, for 4 and 8 bits in blocks of at least 32, with vpdpbusd (64
 * products a step, exact in int32), four columns at a time; with several rows, each column's
 * weights are unpacked once into `scratch` first (4 x blocks x bs bytes). zs: 4 x blocks
 * floats. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
aotc_nbits_gemm_vnni(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits, const int8_t *qa,
                     const float *a_scale, const float *a_sum, const uint8_t *B, const float *S, const uint8_t *Z,
                     const float *ZS, float *Y, int64_t ldy, float *zs, float *scratch)
{
    const int64_t blocks = (K + bs - 1) / bs, blob = bs * bits / 8, width = blocks * bs;
    uint8_t *work = (uint8_t *)(void *)scratch;
    for (int64_t n = n0; n < n1;) {
        const int nc = n1 - n >= 4 ? 4 : 1;
        /* the columns' scales x zero points, consecutive (ZS's rows are) */
        const float *zc = ZS ? ZS + n * blocks : zs;
        for (int c = 0; Z && !ZS && c < nc; c++)
            aotc_nbits_zero_scaled(S, Z, n + c, blocks, bits, zs + c * blocks);
        const uint8_t *unpacked = NULL;
        if (M > 1) {
            for (int c = 0; c < nc; c++)
                for (int64_t p = 0; p + 64 <= width; p += 64)
                    _mm512_storeu_si512((void *)(work + c * width + p),
                                        aotc_nbits_w64(B + (n + c) * blocks * blob, p, bs, bits));
            unpacked = work;
        }
        if (nc == 4)
            aotc_nbits_cols_vnni(4, M, n, K, bs, bits, qa, a_scale, a_sum, B, S, unpacked, Z ? zc : NULL, Y, ldy);
        else
            aotc_nbits_cols_vnni(1, M, n, K, bs, bits, qa, a_scale, a_sum, B, S, unpacked, Z ? zc : NULL, Y, ldy);
        n += nc;
    }
}

#endif

/* aotc_nbits_gemm_plain's product from tiles (the header; columns n0 .. n1 - 1 inside one tile),
 * their scales S16 and scales x zero points ZS16 (NULL: none). Plain C. */
static void aotc_nbits_tiles_plain(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, const int8_t *qa,
                                   const float *a_scale, const float *a_sum, const uint8_t *T, const float *S16,
                                   const float *ZS16, float *Y, int64_t ldy)
{
    const int64_t blocks = (K + bs - 1) / bs, width = blocks * bs, t = n0 / 16;
    const uint8_t *tile = T + t * width * 8;
    for (int64_t n = n0; n < n1; n++) {
        const int64_t c = n % 16;
        for (int64_t m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                int32_t dot = 0;
                for (int64_t p = b * bs; p < (b + 1) * bs; p++) {
                    const int32_t byte = tile[(p / 8) * 64 + c * 4 + p % 4];
                    dot += (int32_t)qa[m * width + p] * (p % 8 < 4 ? byte & 0x0F : byte >> 4);
                }
                const int64_t at = (t * blocks + b) * 16 + c;
                const float zs = ZS16 ? ZS16[at] : S16[at] * 8.0f;
                acc += a_scale[m * blocks + b] * S16[at] * (float)dot - a_sum[m * blocks + b] * zs;
            }
            Y[m * ldy + n] = acc;
        }
    }
}

/* Y[m, n] for n0 <= n < n1, every m < M (see aotc_nbits_gemm_plain), by the fastest product this
 * CPU runs. tiles: B, S and ZS are relaid by tiles of 16 columns (the header; 4 bits, rows
 * quantized in A's order, n0 a multiple of 16 and n1 - n0 at most 16). ZS (where
 * has_zero_scaled): S x the zero points, made at compile time (passes/caches.py), which the
 * products read instead of unpacking the zero points (Z, where has_zero) each call.
 * Scratch: zs 4 x blocks floats, work blocks x bs floats (4 x blocks x bs bytes). */
static void aotc_nbits_gemm(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits, int64_t tiles,
                            const int8_t *qa, const float *a_scale, const float *a_sum, const uint8_t *B,
                            const float *S, const uint8_t *Z, int64_t has_zero, const float *ZS,
                            int64_t has_zero_scaled, float *Y, int64_t ldy, float *zs, float *work)
{
    if (!has_zero_scaled)
        ZS = NULL;
    if (tiles) {
#if AOTC_NBITS_VNNI
        if (aotc_nbits_uses_vnni(bits, bs, 1)) {
            aotc_nbits_tiles_vnni(M, n0, n1, K, bs, qa, a_scale, a_sum, B, S, ZS, Y, ldy);
            return;
        }
#endif
        aotc_nbits_tiles_plain(M, n0, n1, K, bs, qa, a_scale, a_sum, B, S, ZS, Y, ldy);
        return;
    }
    if (!has_zero)
        Z = NULL;
    if (!Z)
        ZS = NULL;
#if AOTC_NBITS_VNNI
    if (aotc_nbits_uses_vnni(bits, bs, 0)) {
        aotc_nbits_gemm_vnni(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, Z, ZS, Y, ldy, zs, work);
        return;
    }
#endif
    aotc_nbits_gemm_plain(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, Z, ZS, Y, ldy, zs);
}

#endif
