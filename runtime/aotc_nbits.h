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
 * bytes each (a last block shorter than bs padded with zeros), and within a block the values in
 * the weights' byte order: value k of a block at (k % per) * blob + k / per, per = 8 / bits
 * values in a byte, blob = bs / per bytes in a block. Byte j of a weight block and position
 * t * blob + j of its row then meet, so the dot product reads both in order: value t of every
 * byte against one run of activations. (4-bit blocks of 32 on the VNNI product: pairs of
 * blocks interleaved, aotc_nbits_paired.)
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

/* Does this CPU run the VNNI product for these weights (`aotc_nbits_gemm`)? */
static inline int aotc_nbits_uses_vnni(int64_t bits, int64_t bs)
{
#if AOTC_NBITS_VNNI
    /* (libgcc's cpuid table, filled when the program starts) */
    return (bits == 4 || bits == 8) && bs >= 32 && __builtin_cpu_supports("avx512vnni");
#else
    (void)bits, (void)bs;
    return 0;
#endif
}

/* The paired order: 4-bit weights in blocks of 32 on the VNNI product, which unpacks the 32
 * bytes of two blocks as their 32 low nibbles, then their 32 high ones. The quantized rows
 * follow: within each pair of blocks (b even, b + 1), value k = 2j + t of block b + i at
 * t * 32 + i * 16 + j (a last block without a partner keeps its own order). */
static inline int aotc_nbits_paired(int64_t bits, int64_t bs)
{
    return bits == 4 && bs == 32 && aotc_nbits_uses_vnni(bits, bs);
}

/* Rows m < M of A (K floats each) quantized in blocks of bs as the header says: qa (M rows of
 * blocks * bs bytes, in the blocks' byte order or the paired one), a_scale and a_sum (M rows
 * of blocks). */
static void aotc_nbits_quantize(const float *A, int64_t M, int64_t K, int64_t bs, int64_t bits, int8_t *qa,
                                float *a_scale, float *a_sum)
{
    const int64_t blocks = (K + bs - 1) / bs, per = 8 / bits, blob = bs / per;
    const int paired = aotc_nbits_paired(bits, bs);
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

/* One 64-position chunk (positions [p, p + 64), two blocks of 32) of columns n .. n + 3 of
 * aotc_nbits_quad_rows' product for one row q, added to acc: the four column products (16 int32
 * lanes each: lanes 0-3 and 8-11 the chunk's first block, 4-7 and 12-15 its second, the paired
 * order) added across lanes into one vector of (lane group, column) sums, scaled by the four
 * columns' scales for the two blocks as one 8-float load from the quad's s4, less the zero
 * point's share where the weights have none (`no_zero`: 8; zero points come off at the row's
 * end). The weights: w, the quad's packed columns (when unpacked is NULL), or unpacked, its
 * columns as bytes. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"), always_inline)) static inline __m512
aotc_nbits_quad_chunk(__m512 acc, int64_t p, const int8_t *q, const float *as, const float *asum, const float *s4,
                      const uint8_t *w, const uint8_t *unpacked, int64_t blocks, int64_t width, int no_zero)
{
    const int64_t bs = 32, blob = 16;
    /* the zero point's share, a_sum x S x 8 a block, each block in two lane groups */
    const __m512 zpart = _mm512_set1_ps(4.0f);
    const __m512i qv = _mm512_loadu_si512((const void *)(q + p));
    __m512i d[4];
    for (int c = 0; c < 4; c++) {
        const __m512i wv = unpacked ? _mm512_loadu_si512((const void *)(unpacked + c * width + p))
                                    : aotc_nbits_w64(w + c * blocks * blob, p, bs, 4);
        d[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, qv);
    }
    /* per 128-bit lane group: the sums of its 4 lanes for columns 0..3 */
    const __m512i e01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
    const __m512i e23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
    const __m512i f = _mm512_add_epi32(_mm512_unpacklo_epi64(e01, e23), _mm512_unpackhi_epi64(e01, e23));
    const __m512 al = aotc_nbits_lanes(as, p, bs, 4);
    const __m512 zl = no_zero ? _mm512_mul_ps(aotc_nbits_lanes(asum, p, bs, 4), zpart) : _mm512_setzero_ps();
    /* the groups: first block, second, first, second; in each, columns 0..3 */
    const __m512 sl = _mm512_broadcast_f32x8(_mm256_loadu_ps(s4 + (p / bs) * 4));
    return _mm512_fmadd_ps(_mm512_fmsub_ps(_mm512_cvtepi32_ps(f), al, zl), sl, acc);
}

/* Columns n .. n + 3 (n a multiple of 4) for every row, 4-bit weights in blocks of 32, by chunks
 * of aotc_nbits_quad_chunk: the four columns' scales come as one load
 * from S4 (S4[((n / 4) * blocks + b) * 4 + n % 4] = S[n, b]: the scales relaid by column quads at
 * compile time, aotc/passes/caches.py), instead of each column's scales spread over its lanes by
 * a broadcast and a permute (aotc_nbits_cols_vnni: 1.26-1.37x slower on a decoder's products).
 * `unpacked`, zero points (zs: 4 x blocks floats; no_zero, a constant where it is inlined: none)
 * and an odd last block as there.
 * Reading packed weights, the loop asks for the next quad's weights a line at a time as it
 * reads this one's (128 positions: 64 bytes of each column). A column's weights are a few
 * hundred bytes to a few KB, and the CPU's prefetchers follow a stream only inside a 4 KB page:
 * without it, each quad started on memory (K 2048: a quad is one page). */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"), always_inline)) static inline void
aotc_nbits_quad_rows(const int no_zero, int64_t M, int64_t n, int64_t K, const int8_t *qa, const float *a_scale,
                     const float *a_sum, const uint8_t *B, const float *S, const float *S4, const uint8_t *unpacked,
                     const float *zs, float *Y, int64_t ldy)
{
    const int64_t bs = 32, blocks = (K + bs - 1) / bs, blob = 16, width = blocks * bs;
    const float *s4 = S4 + (n / 4) * blocks * 4;
    const uint8_t *w = B + n * blocks * blob;
    for (int64_t m = 0; m < M; m++) {
        const int8_t *q = qa + m * width;
        const float *as = a_scale + m * blocks, *asum = a_sum + m * blocks;
        __m512 acc = _mm512_setzero_ps();
        int64_t p = 0;
        if (unpacked) {
            for (; p + 64 <= width; p += 64)
                acc = aotc_nbits_quad_chunk(acc, p, q, as, asum, s4, w, unpacked, blocks, width, no_zero);
        } else {
            for (; p + 128 <= width; p += 128) {
                for (int c = 0; c < 4; c++)
                    _mm_prefetch((const char *)(w + (c + 4) * blocks * blob + p / 2), _MM_HINT_T0);
                acc = aotc_nbits_quad_chunk(acc, p, q, as, asum, s4, w, NULL, blocks, width, no_zero);
                acc = aotc_nbits_quad_chunk(acc, p + 64, q, as, asum, s4, w, NULL, blocks, width, no_zero);
            }
            if (p + 64 <= width) {
                acc = aotc_nbits_quad_chunk(acc, p, q, as, asum, s4, w, NULL, blocks, width, no_zero);
                p += 64;
            }
        }
        const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
        float total[4];
        _mm_storeu_ps(total, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
        for (int c = 0; c < 4; c++) {
            if (p < width)
                total[c] += aotc_nbits_last_block(n + c, blocks, bs, 4, q, as, asum, B, S, no_zero);
            Y[m * ldy + n + c] = no_zero ? total[c] : total[c] - aotc_nbits_fdot(asum, zs + c * blocks, blocks);
        }
    }
}

/* aotc_nbits_quad_rows with zero points and without, each a copy of its own, in a function apart
 * from its caller's loop */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"), noinline)) static void
aotc_nbits_quad_vnni(int64_t M, int64_t n, int64_t K, const int8_t *qa, const float *a_scale, const float *a_sum,
                     const uint8_t *B, const float *S, const float *S4, const uint8_t *unpacked, const float *zs,
                     float *Y, int64_t ldy)
{
    if (zs)
        aotc_nbits_quad_rows(0, M, n, K, qa, a_scale, a_sum, B, S, S4, unpacked, zs, Y, ldy);
    else
        aotc_nbits_quad_rows(1, M, n, K, qa, a_scale, a_sum, B, S, S4, unpacked, NULL, Y, ldy);
}

/* as aotc_nbits_gemm_plain, for 4 and 8 bits in blocks of at least 32, with vpdpbusd (64
 * products a step, exact in int32), four columns at a time; with several rows, each column's
 * weights are unpacked once into `scratch` first (4 x blocks x bs bytes). zs: 4 x blocks
 * floats. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
aotc_nbits_gemm_vnni(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits, const int8_t *qa,
                     const float *a_scale, const float *a_sum, const uint8_t *B, const float *S, const float *S4,
                     const uint8_t *Z, const float *ZS, float *Y, int64_t ldy, float *zs, float *scratch)
{
    const int64_t blocks = (K + bs - 1) / bs, blob = bs * bits / 8, width = blocks * bs;
    uint8_t *work = (uint8_t *)(void *)scratch;
    const int quads = S4 && bits == 4 && bs == 32 && n0 % 4 == 0;
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
        if (nc == 4 && quads)
            aotc_nbits_quad_vnni(M, n, K, qa, a_scale, a_sum, B, S, S4, unpacked, Z ? zc : NULL, Y, ldy);
        else if (nc == 4)
            aotc_nbits_cols_vnni(4, M, n, K, bs, bits, qa, a_scale, a_sum, B, S, unpacked, Z ? zc : NULL, Y, ldy);
        else
            aotc_nbits_cols_vnni(1, M, n, K, bs, bits, qa, a_scale, a_sum, B, S, unpacked, Z ? zc : NULL, Y, ldy);
        n += nc;
    }
}

#endif

/* Y[m, n] for n0 <= n < n1, every m < M (see aotc_nbits_gemm_plain), by the fastest product this
 * CPU runs. S4 (where has_quads): the same scales relaid by column quads (aotc_nbits_quad_vnni),
 * which the VNNI product of 4-bit weights in blocks of 32 reads instead. ZS (where
 * has_zero_scaled, with zero points): S x the zero points, [N, blocks], made at compile time
 * (passes/caches.py), which the products read instead of unpacking the zero points each call.
 * Scratch: zs 4 x blocks floats, work blocks x bs floats (4 x blocks x bs bytes). */
static void aotc_nbits_gemm(int64_t M, int64_t n0, int64_t n1, int64_t K, int64_t bs, int64_t bits, const int8_t *qa,
                            const float *a_scale, const float *a_sum, const uint8_t *B, const float *S,
                            const float *S4, int64_t has_quads, const uint8_t *Z, int64_t has_zero,
                            const float *ZS, int64_t has_zero_scaled, float *Y, int64_t ldy, float *zs, float *work)
{
    if (!has_zero)
        Z = NULL;
    if (!has_quads)
        S4 = NULL;
    if (!has_zero_scaled || !Z)
        ZS = NULL;
#if AOTC_NBITS_VNNI
    if (aotc_nbits_uses_vnni(bits, bs)) {
        aotc_nbits_gemm_vnni(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, S4, Z, ZS, Y, ldy, zs, work);
        return;
    }
#endif
    (void)S4;
    aotc_nbits_gemm_plain(M, n0, n1, K, bs, bits, qa, a_scale, a_sum, B, S, Z, ZS, Y, ldy, zs);
}

#endif
