/* aotc_math.h: float32 exp, tanh, erf and sigmoid that a C compiler vectorizes.
 *
 * libm's expf / tanhf / erff are calls a loop cannot vectorize (without -ffast-math, whose
 * other rewrites would break NaN and infinity semantics), and tanhf / erff take 15-17 ns a
 * call here: the GELU of a transformer's feed-forward layer spent more time in erff than in
 * its GEMM. These are branch-free: range reduction and polynomials in plain arithmetic,
 * comparisons as selects, so that in a loop the compiler evaluates them a vector at a time.
 * The coefficients are near-minimax fits made by tools/math_fit.py; tests/test_math.py
 * measures every function against libm in ULP over a dense sweep of floats and at the special
 * values (NaN, +-inf, +-0, overflow and underflow bounds), where the results are libm's.
 * Generated C includes this header; the generated code calls these for float32 math.
 */
#ifndef AOTC_MATH_H
#define AOTC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Always inlined: a call left in a loop keeps the loop scalar. GCC stops inlining into a
 * function that has grown past its limits, and a kernel called once is inlined into the run
 * function, which in a large model grows past them (YOLO's sigmoid after a Transpose ran as
 * 102,000 scalar calls: 0.74 ms for what takes ~0.05 ms vectorized). */
#if defined(__GNUC__)
#define AOTC_MATH_FN static inline __attribute__((always_inline))
#else
#define AOTC_MATH_FN static inline
#endif

/* x, as a value the compiler cannot see: generated code reads the constant bound of a
 * maximum or minimum select (`x < c ? c : x`: Relu, Clip, HardSigmoid) through these, once at
 * the top of a function, so that GCC compiles each such select of vectors to one MAXPS / MINPS
 * (whose NaN and signed-zero rules are the select's) instead of merging a clamp's two selects,
 * by the order of their known bounds, into mask arithmetic (aotc/codegen/c/printer.py). */
#if defined(__GNUC__)
static inline float aotc_opaque_f32(float x)
{
    __asm__("" : "+m"(x));
    return x;
}
static inline double aotc_opaque_f64(double x)
{
    __asm__("" : "+m"(x));
    return x;
}
#else
static inline float aotc_opaque_f32(float x) { return x; }
static inline double aotc_opaque_f64(double x) { return x; }
#endif

AOTC_MATH_FN float aotc_float_from_bits(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

AOTC_MATH_FN int32_t aotc_float_bits(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

/* A non-negative float (or NaN) clamped into [lo, hi] (non-negative floats given by their bits)
 * on its bits: non-negative floats order as their bits do, and a NaN's bits (sign clear, as
 * fabsf leaves it) are above every finite one's, so a NaN gives hi. Two integer max / min
 * where a float clamp with its NaN test vectorizes as compares and blends. */
AOTC_MATH_FN float aotc_clamp_nonnegative(float ax, int32_t lo, int32_t hi)
{
    int32_t b = aotc_float_bits(ax);
    b = b < lo ? lo : b;
    b = b > hi ? hi : b;
    return aotc_float_from_bits(b);
}

/* |m| with the sign of s, on their bits (m non-negative) */
AOTC_MATH_FN float aotc_with_sign_of(float m, float s)
{
    return aotc_float_from_bits(aotc_float_bits(m) | (aotc_float_bits(s) & INT32_MIN));
}

/* exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 (ln 2 in two parts, so r
 * is exact), |r| <= ln2 / 2; exp(r) = 1 + r q(r). Returns exp(r), and n in *n. */
AOTC_MATH_FN float aotc_exp_reduced(float x, int32_t *n)
{
    const float fn = (x * 1.44269502f + 12582912.0f) - 12582912.0f;   /* round to nearest */
    *n = (int32_t)fn;
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float q = 0.0013888869434595108f;
    q = q * r + 0.00836906861513853f;
    q = q * r + 0.041667137295007706f;
    q = q * r + 0.16666506230831146f;
    q = q * r + 0.4999999701976776f;
    q = q * r + 1.0f;
    return 1.0f + r * q;
}

/* exp(x) for x in [-104, 89] (no NaN): 2^n as two factors of at most 2^64 each, so results
 * down in the subnormals (x > -104) round once. The callers that know their argument's range
 * call this, without aotc_expf's edge selects. */
AOTC_MATH_FN float aotc_exp_in_range(float x)
{
    int32_t n;
    const float p = aotc_exp_reduced(x, &n);
    const int32_t n1 = n / 2, n2 = n - n1;
    return p * aotc_float_from_bits((n1 + 127) << 23) * aotc_float_from_bits((n2 + 127) << 23);
}

/* exp(x) for x in [-87, 88] (no NaN), where 2^n is one normal float: one factor, and no
 * halving of n (a GELU's erf spent about a seventh of its time on the two factors) */
AOTC_MATH_FN float aotc_exp_normal(float x)
{
    int32_t n;
    const float p = aotc_exp_reduced(x, &n);
    return p * aotc_float_from_bits((n + 127) << 23);
}

AOTC_MATH_FN float aotc_expf(float x)
{
    /* every value below is finite (NaN computes as 0) until the end picks the result: each
     * select has both of its values computed already, which compilers if-convert to vector
     * blends even when floating-point traps are honoured (no speculated division) */
    const float xn = x == x ? x : 0.0f;
    const float xl = xn < -104.0f ? -104.0f : xn;
    const float xc = xl > 89.0f ? 89.0f : xl;
    const float y = aotc_exp_in_range(xc);
    return x != x ? x : (x > 88.72283935546875f ? INFINITY : (x < -103.97208404541016f ? 0.0f : y));
}

/* sigmoid(x) = 1 / (1 + exp(-x)), from e = exp(-|x|) (in (0, 1], so nothing overflows and no
 * edge needs a select): 1 / (1 + e) for x >= 0, e / (1 + e) below. exp as in aotc_expf, with
 * the argument clamped at -104, where e rounds to 0. Written out rather than as
 * 1 / (1 + aotc_expf(-x)): aotc_expf's overflow and NaN selects are half its work, and YOLO's
 * SiLU epilogues (5.7 million sigmoids a run) took 0.69 ns an element that way, 0.42 this way.
 * Where the source runs with subnormal floats computed as zero (AOTC_SUBNORMALS_FLUSHED: the
 * generated run functions' default), 2^n is one factor: |x| clamped at 88 keeps n >= -127,
 * whose factor's bits are 0 (e = 0), and every e below 2^-126 is a subnormal, flushed to zero
 * as the two factors' product would be, so the results are the same (0.42 -> 0.37 ns). */
AOTC_MATH_FN float aotc_sigmoidf(float x)
{
    const float ax = fabsf(x);
#if AOTC_SUBNORMALS_FLUSHED
    const float a = ax < 88.0f ? ax : 88.0f;                         /* NaN: 88 (the end returns x) */
#else
    const float a = ax < 104.0f ? ax : 104.0f;                       /* NaN: 104 (the end returns x) */
#endif
    const float fn = (a * -1.44269502f + 12582912.0f) - 12582912.0f;   /* round(-a / ln 2) */
    const int32_t n = (int32_t)fn;
    float r = -a - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float q = 0.0013888869434595108f;
    q = q * r + 0.00836906861513853f;
    q = q * r + 0.041667137295007706f;
    q = q * r + 0.16666506230831146f;
    q = q * r + 0.4999999701976776f;
    q = q * r + 1.0f;
    const float p = 1.0f + r * q;
#if AOTC_SUBNORMALS_FLUSHED
    const float e = p * aotc_float_from_bits((n + 127) << 23);
#else
    const int32_t n1 = n / 2, n2 = n - n1;                           /* 2^n in two normal factors */
    const float e = p * aotc_float_from_bits((n1 + 127) << 23) * aotc_float_from_bits((n2 + 127) << 23);
#endif
    const float y = (x < 0.0f ? e : 1.0f) / (1.0f + e);
    return x != x ? x : y;
}

/* tanh: x q(x^2) for |x| < 0.625; beyond, 1 - 2 / (exp(2|x|) + 1) with the sign of x (which
 * is +-1 to float precision from |x| = 9.01 on). The exp's argument is in [0, 18.2] (NaN:
 * 18.2, the end returns x), where aotc_exp_normal gives aotc_expf's values without its edge
 * selects and second factor of 2^n. */
AOTC_MATH_FN float aotc_tanhf(float x)
{
    const float ax = fabsf(x);
    const float s = x * x;
    float q = 0.002128507010638714f;
    q = q * s + -0.008159113116562366f;
    q = q * s + 0.02169182151556015f;
    q = q * s + -0.053944699466228485f;
    q = q * s + 0.13333183526992798f;
    q = q * s + -0.333333283662796f;
    q = q * s + 1.0f;
    const float small = x * q;
    const float e = aotc_exp_normal(2.0f * (ax < 9.1f ? ax : 9.1f));
    const float big = 1.0f - 2.0f / (e + 1.0f);
    const float y = ax < 0.625f ? small : (x < 0.0f ? -big : big);
    return x != x ? x : y;
}

/* erf: x q(x^2) for |x| < 1; beyond, 1 - erfc(|x|) with the sign of x, where
 * erfc(a) = exp(q(a - 2) - a^2) (q fits log(erfc(a)) + a^2: no division, one exp), until erf
 * rounds to 1 (|x| > 3.92). */
AOTC_MATH_FN float aotc_erff(float x)
{
    const float ax = fabsf(x);
    const float s = x * x;
    float q = -9.64151604421204e-06f;
    q = q * s + 0.0001125694761867635f;
    q = q * s + -0.0008482828852720559f;
    q = q * s + 0.005220945458859205f;
    q = q * s + -0.0268654003739357f;
    q = q * s + 0.11283782124519348f;
    q = q * s + -0.37612637877464294f;
    q = q * s + 1.128379225730896f;
    const float small = x * q;
    const float a = aotc_clamp_nonnegative(ax, 0x3f800000, 0x407ae148);   /* [1, 3.92]; NaN: 3.92 */
    const float u = a - 2.0f;
    float c = 1.6457678384540486e-06f;
    c = c * u + -1.9860914107994176e-05f;
    c = c * u + 0.00013526783732231706f;
    c = c * u + -0.0007333005778491497f;
    c = c * u + 0.0035709876101464033f;
    c = c * u + -0.016464753076434135f;
    c = c * u + 0.07624908536672592f;
    c = c * u + -0.4181608557701111f;
    c = c * u + -1.3649412393569946f;
    const float tail = 1.0f - aotc_exp_normal(c - a * a);     /* argument in [-17.6, -0.8] */
    const float big = ax > 3.92f ? 1.0f : tail;
    const float y = ax < 1.0f ? small : aotc_with_sign_of(big, x);
    return x != x ? x : y;
}

#endif
