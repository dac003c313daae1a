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
 * The weights come in one of two layouts:
 * - As the quantizer packed them: row n of B is its blocks one after another, blob = bs / per
 *   bytes each (per = 8 / bits values in a byte, low bits first). Read by plain C
 *   (aotc_nbits_gemm_plain), which GCC vectorizes: the targets without AVX-512, and weights
 *   that are not constants.
 * - Tiles, relaid at compile time in AVX-512 builds (aotc/passes/caches.py): columns in tiles of
 *   16 (the last one padded with zero weights), each tile's positions (K padded to whole
 *   blocks) in groups of span = 4 x per, a group in 64 bytes: byte 4c + i holds, in its value
 *   t, position 4t + i of column c. One vpdpbusd of a group's values t against the 4
 *   activations 4t .. 4t + 3 broadcast makes 16 columns' sums at once, with no lanes to add up;
 *   a block's sums are scaled by 16 columns' scales in one load (relaid the same way,
 *   [tiles, blocks, 16], as are the scales x zero points, which stand for the zero points).
 *   Read by AVX-512 VNNI (aotc_nbits_tiles_vnni, 64 products of uint8 weights and int8
 *   activations an instruction, summed exactly in int32) where the CPU has it, chosen at run
 *   time, else by plain C (aotc_nbits_tiles_plain).
 *
 * Layout of the quantized rows (aotc_nbits_quantize): row m's blocks one after another, bs
 * bytes each (a last block shorter than bs padded with zeros). For tiles, in A's order; for
 * the packed layout, within a block in the weights' byte order: value k of a block at
 * (k % per) * blob + k / per, so that byte j of a weight block and position t * blob + j of
 * its row meet, and the dot product reads both in order (value t of every byte against one
 * run of activations). */
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

/* Rows m < M of A (K floats each) quantized in blocks of bs as the header says: qa (M rows of
 * blocks * bs bytes: for tiles, in A's order, else in the blocks' byte order), a_scale and a_sum
 * (M rows of blocks). */
static void aotc_nbits_quantize(const float *A, int64_t M, int64_t K, int64_t bs, int64_t bits, int64_t tiles,
                                int8_t *qa, float *a_scale, float *a_sum)
{
    const int64_t blocks = (K + bs - 1) / bs, per = tiles ? 1 : 8 / bits, blob = bs / per;
    memset(qa, 0, (size_t)(M * blocks * bs));
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < blocks; b++) {
            const float *a = A + m * K + b * bs;
            const int64_t len = K - b * bs < bs ? K - b * bs : bs;
            int8_t *q = qa + (m * blocks + b) * bs;
            float amax = 0.0f;
            for (int64_t k = 0; k < len; k++)
                amax = fmaxf(amax, fabsf(a[k]));
            const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
            int32_t sum = 0;
            for (int64_t k = 0; k < len; k++) {
                const int32_t v = (int32_t)nearbyintf(a[k] * inv);
                q[(k % per) * blob + k / per] = (int8_t)v;
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

/* aotc_nbits_gemm_plain's product from tiles (the header; columns n0 .. n1 - 1 inside one tile),
 * their scales S16 and scales x zero points ZS16 (NULL: none). Plain C. */
static void aotc_nbits_tiles_plain(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits,
                                   const int8_t *qa, const float *a_scale, const float *a_sum, const uint8_t *T,
                                   const float *S16, const float *ZS16, float *Y, int64_t ldy)
{
    const int64_t blocks = (K + bs - 1) / bs, width = blocks * bs, t = n0 / 16;
    const int64_t span = 4 * (8 / bits);
    const int32_t mask = (1 << bits) - 1;
    const uint8_t *tile = T + t * width * 16 * bits / 8;
    for (int64_t n = n0; n < n1; n++) {
        const int64_t c = n % 16;
        for (int64_t m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                int32_t dot = 0;
                for (int64_t p = b * bs; p < (b + 1) * bs; p++) {
                    const int32_t byte = tile[(p / span) * 64 + c * 4 + p % 4];
                    dot += (int32_t)qa[m * width + p] * ((byte >> ((p % span) / 4 * bits)) & mask);
                }
                const int64_t at = (t * blocks + b) * 16 + c;
                const float zs = ZS16 ? ZS16[at] : S16[at] * (float)(1 << (bits - 1));
                acc += a_scale[m * blocks + b] * S16[at] * (float)dot - a_sum[m * blocks + b] * zs;
            }
            Y[m * ldy + n] = acc;
        }
    }
}

#if AOTC_NBITS_VNNI
/* How far ahead (bytes) the tiles' loop asks for weights: the tiles are one stream, but the
 * CPU's prefetchers stop at each 4 KB page. (A 1B decoder's step at 1 thread, Intel Xeon: 46.1
 * ms without, 42.9 at 2048, 45.2 at 4096.) */
#define AOTC_NBITS_TILE_AHEAD 2048

/* Rows m0 .. m0 + R - 1 of one tile's product (R, bits and zero_points constants where it is
 * inlined): 16 columns of tiles (the header) against the quantized rows q (width bytes each,
 * A's order), stored in columns `keep` of y (rows ldy apart). A block's products go round two
 * int32 chains a row (at 8 bits a block is an even number of groups: bs >= 16), then are
 * scaled: (sum x a_scale - the zero point's share) x the 16 columns' scales, the share
 * a_sum x 2^(bits-1) without zero points, and with them a_sum x the 16 columns' scales x zero
 * points (zs16). One pass over the tile's weights serves the R rows. */
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
aotc_nbits_tile_rows(const int R, const int bits, const int zero_points, int64_t blocks, int64_t bs,
                     const uint8_t *tile, const int8_t *q, int64_t width, const float *as, const float *asum,
                     const float *s16, const float *zs16, float *y, int64_t ldy, __mmask16 keep)
{
    const int per = 8 / bits;                     /* values in a byte */
    const int64_t span = 4 * per, groups = bs / span;
    const __m512i mask = _mm512_set1_epi8((char)((1 << bits) - 1));
    __m512 acc[8];
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *w = tile + b * groups * 64;
        const int8_t *qb = q + b * bs;
        __m512i chain[2][8];
        for (int r = 0; r < R; r++)
            chain[0][r] = chain[1][r] = _mm512_setzero_si512();
        /* (8 bits: two groups an iteration, one a chain; else a group's values t alternate) */
        const int step = per == 1 ? 2 : 1;
        for (int64_t g0 = 0; g0 < groups; g0 += step) {
            for (int h = 0; h < step; h++) {
                const int64_t g = g0 + h;
                _mm_prefetch((const char *)(w + g * 64 + AOTC_NBITS_TILE_AHEAD), _MM_HINT_T0);
                const __m512i x = _mm512_loadu_si512((const void *)(w + g * 64));
                for (int t = 0; t < per; t++) {
                    /* value t of each byte (vpsrlw moves the next byte's bits in: the mask takes them off) */
                    const __m512i v = bits == 8 ? x : _mm512_and_si512(t ? _mm512_srli_epi16(x, t * bits) : x, mask);
                    const int c = per == 1 ? h : t % 2;
                    for (int r = 0; r < R; r++) {
                        int32_t a;                /* the row's 4 activations of these positions */
                        memcpy(&a, qb + r * width + g * span + 4 * t, 4);
                        chain[c][r] = _mm512_dpbusd_epi32(chain[c][r], v, _mm512_set1_epi32(a));
                    }
                }
            }
        }
        const __m512 s = _mm512_loadu_ps(s16 + b * 16);
        for (int r = 0; r < R; r++) {
            const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(chain[0][r], chain[1][r]));
            const __m512 a_scale = _mm512_set1_ps(as[r * blocks + b]);
            if (zero_points) {
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dot, a_scale), s, acc[r]);
                acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(asum[r * blocks + b]), _mm512_loadu_ps(zs16 + b * 16), acc[r]);
            } else {
                const __m512 share = _mm512_set1_ps(asum[r * blocks + b] * (float)(1 << (bits - 1)));
                acc[r] = _mm512_fmadd_ps(_mm512_fmsub_ps(dot, a_scale, share), s, acc[r]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(y + r * ldy, keep, acc[r]);
}

/* R rows (AOTC_NBITS_TILE_ROWS or 1) of one tile by aotc_nbits_tile_rows, each combination of
 * R, bits and zero points a copy of its own */
#define AOTC_NBITS_TILE_ROWS 6
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline void
aotc_nbits_tile_pass(const int R, int64_t bits, int64_t blocks, int64_t bs, const uint8_t *tile, const int8_t *q,
                     int64_t width, const float *as, const float *asum, const float *s16, const float *zs16, float *y,
                     int64_t ldy, __mmask16 keep)
{
    if (bits == 4 && zs16)
        aotc_nbits_tile_rows(R, 4, 1, blocks, bs, tile, q, width, as, asum, s16, zs16, y, ldy, keep);
    else if (bits == 4)
        aotc_nbits_tile_rows(R, 4, 0, blocks, bs, tile, q, width, as, asum, s16, NULL, y, ldy, keep);
    else if (bits == 8 && zs16)
        aotc_nbits_tile_rows(R, 8, 1, blocks, bs, tile, q, width, as, asum, s16, zs16, y, ldy, keep);
    else if (bits == 8)
        aotc_nbits_tile_rows(R, 8, 0, blocks, bs, tile, q, width, as, asum, s16, NULL, y, ldy, keep);
    else if (zs16)
        aotc_nbits_tile_rows(R, 2, 1, blocks, bs, tile, q, width, as, asum, s16, zs16, y, ldy, keep);
    else
        aotc_nbits_tile_rows(R, 2, 0, blocks, bs, tile, q, width, as, asum, s16, NULL, y, ldy, keep);
}

/* Columns n0 .. n1 - 1 (n0 a multiple of 16, n1 - n0 at most 16: one tile) of every row from
 * tiles T, scales S16 and scales x zero points ZS16 (NULL: none), AOTC_NBITS_TILE_ROWS rows a
 * pass, then one at a time. (A 1B decoder's 128-token prompt at 1 thread, Intel Xeon: 828 ms
 * at 4 rows a pass, 771 at 6, 785 at 8.) */
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static void
aotc_nbits_tiles_vnni(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits, const int8_t *qa,
                      const float *a_scale, const float *a_sum, const uint8_t *T, const float *S16, const float *ZS16,
                      float *Y, int64_t ldy)
{
    const int64_t blocks = (K + bs - 1) / bs, width = blocks * bs, t = n0 / 16;
    const uint8_t *tile = T + t * width * 16 * bits / 8;
    const float *s16 = S16 + t * blocks * 16, *zs16 = ZS16 ? ZS16 + t * blocks * 16 : NULL;
    const __mmask16 keep = (__mmask16)((1u << (n1 - n0)) - 1u);
    const int64_t passes = M / AOTC_NBITS_TILE_ROWS;
    for (int64_t i = 0; i < passes; i++) {
        const int64_t m = i * AOTC_NBITS_TILE_ROWS;
        aotc_nbits_tile_pass(AOTC_NBITS_TILE_ROWS, bits, blocks, bs, tile, qa + m * width, width, a_scale + m * blocks,
                             a_sum + m * blocks, s16, zs16, Y + m * ldy + n0, ldy, keep);
    }
    for (int64_t i = 0; i < M % AOTC_NBITS_TILE_ROWS; i++) {
        const int64_t m = passes * AOTC_NBITS_TILE_ROWS + i;
        aotc_nbits_tile_pass(1, bits, blocks, bs, tile, qa + m * width, width, a_scale + m * blocks, a_sum + m * blocks,
                             s16, zs16, Y + m * ldy + n0, ldy, keep);
    }
}
#endif

/* Y[m, n] for n0 <= n < n1, every m < M (see aotc_nbits_gemm_plain), by the fastest product this
 * CPU runs. tiles: B, S and ZS are relaid by tiles of 16 columns (the header; rows quantized in
 * A's order, n0 a multiple of 16 and n1 - n0 at most 16). ZS (where has_zero_scaled): S x the
 * zero points, made at compile time (passes/caches.py), which the products read instead of
 * unpacking the zero points (Z, where has_zero) each call. zs: blocks floats of scratch. */
static void aotc_nbits_gemm(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits, int64_t tiles,
                            const int8_t *qa, const float *a_scale, const float *a_sum, const uint8_t *B,
                            const float *S, const uint8_t *Z, int64_t has_zero, const float *ZS,
                            int64_t has_zero_scaled, float *Y, int64_t ldy, float *zs)
{
    if (!has_zero_scaled)
        ZS = NULL;
    if (tiles) {
#if AOTC_NBITS_VNNI
        /* (libgcc's cpuid table, filled when the program starts) */
        if (__builtin_cpu_supports("avx512vnni")) {
            aotc_nbits_tiles_vnni(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, ZS, Y, ldy);
            return;
        }
#endif
        aotc_nbits_tiles_plain(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, ZS, Y, ldy);
        return;
    }
    if (!has_zero)
        Z = NULL;
    aotc_nbits_gemm_plain(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, Z, Z ? ZS : NULL, Y, ldy, zs);
}

#endif
