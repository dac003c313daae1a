/* aotc runtime: the softmax of one contiguous row of float32 values, the step between
 * attention's two products and a Softmax op over its last axis (aotc/ops/reduce.py
 * softmax_row; the compiler calls this on AVX-512 targets for float32 rows, elsewhere the
 * kernels' own loops compute the same thing).
 *
 *   dst[k] = exp(src[k] - m) / sum_j exp(src[j] - m),  k < n,  m = the row's largest value
 *
 * dst may be src (in place). The maximum skips NaN (a NaN still reaches every output through
 * its exp and the sum); the sum is in float64, as the CPU targets' accumulators are; the
 * reciprocal is taken once. `guarded`: attention's rule for a row that is -inf everywhere
 * (every key masked): zeros, not NaN; `dead`: the row is zeros whatever it holds (attention,
 * where the bias masks every key).
 *
 * Why a runtime function: a row of attention is short (197 scores in ViT), and the kernels'
 * vectorized loops spent as much on each row's ends as on its middle: three scalar tails (the
 * exp's among them), three horizontal reductions, and the general exp's overflow and NaN
 * selects. Here every pass runs in 16-lane vectors, the last one masked, and the exp is
 * aotc_expf for arguments <= 0 (x - m never exceeds 0), with the same operations in the same
 * order as aotc_math.h's, so its values are aotc_expf's. Without AVX-512, plain C. */
#ifndef AOTC_SOFTMAX_H
#define AOTC_SOFTMAX_H

#include <math.h>
#include <stdint.h>

#include "aotc_math.h"
#include "aotc_support.h"       /* aotc_mask16 */

#if defined(__GNUC__) && defined(__x86_64__) && defined(__AVX512F__) && !defined(AOTC_SOFTMAX_PLAIN)
#define AOTC_SOFTMAX_AVX512 1
#include <immintrin.h>

/* aotc_expf of 16 arguments, each <= 0 or NaN (no overflow to handle): the same reduction and
 * polynomial, contracted into FMAs as the kernels' -ffp-contract=fast compiles them. A NaN
 * goes through every step as NaN. */
static inline __m512 aotc_softmax_exp(__m512 x)
{
#if AOTC_SUBNORMALS_FLUSHED
    /* 2^n in one factor: below -88, n <= -127 makes the factor's bits 0 (a result of 0, as the
     * flushed product of two factors would be) */
    const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-88.0f), x);                /* NaN: x */
#else
    const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);               /* NaN: x */
#endif
    const __m512 big = _mm512_set1_ps(12582912.0f);
    const __m512 fn = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269502f), big), big);
    const __m512i n = _mm512_cvttps_epi32(fn);
    __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 q = _mm512_set1_ps(0.0013888869434595108f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.00836906861513853f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.041667137295007706f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.16666506230831146f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.4999999701976776f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
    const __m512 p = _mm512_fmadd_ps(r, q, _mm512_set1_ps(1.0f));
    const __m512i bias = _mm512_set1_epi32(127);
#if AOTC_SUBNORMALS_FLUSHED
    return _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, bias), 23)));
#else
    /* two normal factors, n1 = n / 2 rounded toward zero, n2 = n - n1 */
    const __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(n, _mm512_srli_epi32(n, 31)), 1);
    const __m512i n2 = _mm512_sub_epi32(n, n1);
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23))),
                                   _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23)));
    /* aotc_expf's underflow: 0 below -103.97 (x < c is false for NaN, which stays y) */
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.97208404541016f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
#endif
}
#else
#define AOTC_SOFTMAX_AVX512 0
#endif

static inline void aotc_softmax_row(float *dst, const float *src, int64_t n, int guarded, int dead)
{
    if (dead) {
        for (int64_t k = 0; k < n; ++k)
            dst[k] = 0.0f;
        return;
    }
#if AOTC_SOFTMAX_AVX512
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t k = 0; k < n; k += 16) {
        const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), aotc_mask16(n - k), src + k);
        vmax = _mm512_max_ps(v, vmax);           /* v > max ? v : max: a NaN v keeps max */
    }
    float mx = _mm512_reduce_max_ps(vmax);
    if (guarded && mx == -INFINITY)
        mx = 0.0f;
    const __m512 shift = _mm512_set1_ps(mx);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t k = 0; k < n; k += 16) {
        const __mmask16 live = aotc_mask16(n - k);
        const __m512 e = _mm512_maskz_mov_ps(live, aotc_softmax_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, src + k), shift)));
        _mm512_mask_storeu_ps(dst + k, live, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
#else
    float mx = -INFINITY;
    for (int64_t k = 0; k < n; ++k)
        mx = src[k] > mx ? src[k] : mx;
    if (guarded && mx == -INFINITY)
        mx = 0.0f;
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) {
        const float e = aotc_expf(src[k] - mx);
        dst[k] = e;
        sum += e;
    }
#endif
    if (guarded && sum == 0.0)
        sum = 1.0;
    const float inv = (float)(1.0 / sum);
#if AOTC_SOFTMAX_AVX512
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t k = 0; k < n; k += 16) {
        const __mmask16 live = aotc_mask16(n - k);
        _mm512_mask_storeu_ps(dst + k, live, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, dst + k), vinv));
    }
#else
    for (int64_t k = 0; k < n; ++k)
        dst[k] = dst[k] * inv;
#endif
}

#endif
