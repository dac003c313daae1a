/* aotc runtime: one row resized along its own axis by linear interpolation, the part of a linear
 * Resize that gathers (aotc/ops/resize.py; the other axes are contiguous rows weighted and
 * summed, which the kernels' loops vectorize).
 *
 *   dst[o] = wa[o] * src[first[o / 16] + lanes[o]] + wb[o] * src[first[o / 16] + lanes[P + o]]
 *
 * for o < n_out, where wa = weights[0 .. n_out), wb = weights[n_out .. 2 n_out) and P is n_out
 * rounded up to a multiple of 16: the tables group the outputs by 16, each group's two taps
 * given as lanes 0 .. 31 of a window of 32 source elements that starts at first[group] (the
 * kernel computes the tables once, from the taps; the compiler takes this path only where
 * every group's taps fit such a window, as they do when the row grows or shrinks by less than
 * about 2x).
 *
 * With AVX-512, a group is two (masked) loads of the window, two two-register permutes that
 * pick each output's taps, and one multiply and one FMA: no gathers. Elsewhere plain C. Both
 * round as the kernels' element-wise form does: wa * a + (wb * b), the product with wb
 * rounded first. */
#ifndef AOTC_LERP_H
#define AOTC_LERP_H

#include <stdint.h>

#include "aotc_support.h"       /* aotc_mask16 */

#if defined(__GNUC__) && defined(__x86_64__) && defined(__AVX512F__) && !defined(AOTC_LERP_PLAIN)
#define AOTC_LERP_AVX512 1
#include <immintrin.h>
#else
#define AOTC_LERP_AVX512 0
#endif

static inline void aotc_lerp_row(float *restrict dst, int64_t n_out, const float *restrict src, int64_t n_src,
                                 const int64_t *restrict first, const int32_t *restrict lanes,
                                 const float *restrict weights)
{
    const int64_t padded = (n_out + 15) & ~(int64_t)15;
#if AOTC_LERP_AVX512
    for (int64_t o = 0; o < n_out; o += 16) {
        const float *w = src + first[o >> 4];
        const int64_t left = n_src - first[o >> 4];          /* the window's elements inside the row */
        const __m512 lo = _mm512_maskz_loadu_ps(aotc_mask16(left), w);
        const __m512 hi = _mm512_maskz_loadu_ps(aotc_mask16(left - 16), w + 16);
        const __m512 a = _mm512_permutex2var_ps(lo, _mm512_loadu_si512((const void *)(lanes + o)), hi);
        const __m512 b = _mm512_permutex2var_ps(lo, _mm512_loadu_si512((const void *)(lanes + padded + o)), hi);
        const __mmask16 live = aotc_mask16(n_out - o);
        const __m512 wa = _mm512_maskz_loadu_ps(live, weights + o);
        const __m512 wb = _mm512_maskz_loadu_ps(live, weights + n_out + o);
        _mm512_mask_storeu_ps(dst + o, live, _mm512_fmadd_ps(wa, a, _mm512_mul_ps(wb, b)));
    }
#else
    for (int64_t o = 0; o < n_out; ++o) {
        const float *w = src + first[o >> 4];
        dst[o] = weights[o] * w[lanes[o]] + weights[n_out + o] * w[lanes[padded + o]];
    }
#endif
}

#endif
