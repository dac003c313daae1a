/* aotc runtime: helpers the generated sources use (not the public header): aligned memory,
 * weights files, loop pragmas, float16 / bfloat16 conversions, a monotonic clock. Copied into
 * each artifact; everything is static inline or a macro. The including file defines
 * _POSIX_C_SOURCE (the generated sources do, first thing). */
#ifndef AOTC_SUPPORT_H
#define AOTC_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "aotc_runtime.h"

/* `bytes` of memory aligned to `align` (a power of two); *raw is what to free(). */
static inline void *aotc_aligned_alloc(size_t bytes, size_t align, void **raw)
{
    unsigned char *p = (unsigned char *)malloc(bytes + align);
    *raw = p;
    if (!p)
        return NULL;
    return p + (align - (uintptr_t)p % align) % align;
}

/* Reads a weights file of exactly `bytes` bytes into 64-byte aligned memory: AOTC_OK, or
 * AOTC_ERR_WEIGHTS_FILE (missing, unreadable, shorter or longer), AOTC_ERR_OUT_OF_MEMORY. */
static inline int aotc_read_weights(const char *path, size_t bytes, void **raw, const void **weights)
{
    FILE *f;
    void *buf;
    size_t got;
    *raw = NULL;
    *weights = NULL;
    if (!path)
        return AOTC_ERR_NULL_ARGUMENT;
    buf = aotc_aligned_alloc(bytes, 64, raw);
    if (!buf)
        return AOTC_ERR_OUT_OF_MEMORY;
    f = fopen(path, "rb");
    if (!f)
        return AOTC_ERR_WEIGHTS_FILE;
    got = fread(buf, 1, bytes, f);
    if (got != bytes || fgetc(f) != EOF) {
        fclose(f);
        return AOTC_ERR_WEIGHTS_FILE;
    }
    fclose(f);
    *weights = buf;
    return AOTC_OK;
}

/* Loop pragmas the printer writes: the iterations of a vectorized loop are independent (the
 * op says so), so the compiler need not prove it; an unrolled loop is unrolled. */
#if defined(__GNUC__) && !defined(__clang__)
#define AOTC_PRAGMA(x) _Pragma(#x)
#define AOTC_VECTORIZE AOTC_PRAGMA(GCC ivdep)
#define AOTC_UNROLL AOTC_PRAGMA(GCC unroll 8)
#elif defined(__clang__)
#define AOTC_PRAGMA(x) _Pragma(#x)
#define AOTC_VECTORIZE AOTC_PRAGMA(clang loop vectorize(assume_safety))
#define AOTC_UNROLL AOTC_PRAGMA(unroll 8)
#else
#define AOTC_VECTORIZE
#define AOTC_UNROLL
#endif

/* float16 / bfloat16 storage: values are stored as 16-bit patterns and computed in float. */
static inline float aotc_half_to_float(uint16_t h)
{
    union { uint32_t u; float f; } v;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) {                       /* inf / nan */
        v.u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {                    /* normal */
        v.u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {                    /* zero */
        v.u = sign;
    } else {                                  /* subnormal: normalize */
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            --exp;
        }
        v.u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    return v.f;
}

static inline uint16_t aotc_half_from_float(float f)
{
    union { float f; uint32_t u; } v;
    uint32_t sign, exp, man;
    v.f = f;
    sign = (v.u >> 16) & 0x8000u;
    exp = (v.u >> 23) & 0xffu;
    man = v.u & 0x7fffffu;
    if (exp == 0xffu)                         /* inf / nan (keep a nan a nan) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    if (exp > 142u)                           /* overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (exp >= 113u) {                        /* normal: round to nearest even */
        uint32_t h = ((exp - 112u) << 10) | (man >> 13);
        uint32_t rest = man & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            ++h;
        return (uint16_t)(sign | h);
    }
    if (exp >= 102u) {                        /* subnormal half */
        uint32_t m = man | 0x800000u, shift = 126u - exp;
        uint32_t h = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (h & 1u)))
            ++h;
        return (uint16_t)(sign | h);
    }
    return (uint16_t)sign;                    /* underflow to zero */
}

static inline float aotc_bf16_to_float(uint16_t b)
{
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

static inline uint16_t aotc_bf16_from_float(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x7fffffu))
        return (uint16_t)((v.u >> 16) | 0x40u);             /* quiet nan */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);   /* round to nearest even */
}

/* Milliseconds on a monotonic clock (kernel profiling). */
static inline double aotc_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#endif
