/* aotc runtime: helpers the generated sources use (not the public header): aligned memory,
 * weights files, loop pragmas, float16 / bfloat16 conversions, a monotonic clock. Copied into
 * each artifact; everything is static inline or a macro. The including file defines
 * _POSIX_C_SOURCE (the generated sources do, first thing). */
#ifndef AOTC_SUPPORT_H
#define AOTC_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* CRC-32 as zlib, gzip and PNG compute it (IEEE 802.3 polynomial, reflected 0xEDB88320, initial
 * value and final xor 0xFFFFFFFF): aotc_crc32(t, 0, p, n) == Python's zlib.crc32(bytes). It detects
 * every error burst of up to 32 bits (any one damaged byte) and misses random damage with odds
 * of 2^-32. Slicing-by-16: sixteen bytes per step through sixteen 256-entry tables that
 * aotc_crc32_tables fills (16 KiB, the caller's: no global to initialize); about 3 GB/s. */
static inline void aotc_crc32_tables(uint32_t t[16][256])
{
    uint32_t i, c;
    int k;
    for (i = 0; i < 256; ++i) {
        c = i;
        for (k = 0; k < 8; ++k)
            c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        t[0][i] = c;
    }
    for (i = 0; i < 256; ++i)
        for (k = 1; k < 16; ++k)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
}

/* four bytes, little-endian */
static inline uint32_t aotc_load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Continues the CRC-32 `crc` (0 to start) over n more bytes. */
static inline uint32_t aotc_crc32(const uint32_t t[16][256], uint32_t crc, const unsigned char *p, size_t n)
{
    uint32_t a, b, c, d;
    crc = ~crc;
    for (; n >= 16; n -= 16, p += 16) {
        a = crc ^ aotc_load_le32(p);
        b = aotc_load_le32(p + 4);
        c = aotc_load_le32(p + 8);
        d = aotc_load_le32(p + 12);
        crc = t[15][a & 0xffu] ^ t[14][(a >> 8) & 0xffu] ^ t[13][(a >> 16) & 0xffu] ^ t[12][a >> 24]
            ^ t[11][b & 0xffu] ^ t[10][(b >> 8) & 0xffu] ^ t[9][(b >> 16) & 0xffu] ^ t[8][b >> 24]
            ^ t[7][c & 0xffu] ^ t[6][(c >> 8) & 0xffu] ^ t[5][(c >> 16) & 0xffu] ^ t[4][c >> 24]
            ^ t[3][d & 0xffu] ^ t[2][(d >> 8) & 0xffu] ^ t[1][(d >> 16) & 0xffu] ^ t[0][d >> 24];
    }
    for (; n; --n, ++p)
        crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xffu];
    return ~crc;
}

/* Reads a weights file of exactly `bytes` bytes into 64-byte aligned memory and checks its
 * CRC-32 against `crc32` (the one the compile computed; it is summed per 1 MiB chunk as the
 * chunk is read, while it is still in cache). Returns AOTC_OK; AOTC_ERR_NULL_ARGUMENT (no
 * path); AOTC_ERR_WEIGHTS_FILE (missing, unreadable, shorter or longer);
 * AOTC_ERR_WEIGHTS_CHECKSUM (the right size, other bytes); AOTC_ERR_OUT_OF_MEMORY. On failure
 * *weights is NULL and *raw (maybe NULL) is still the caller's to free(). */
static inline int aotc_read_weights(const char *path, size_t bytes, uint32_t crc32, void **raw,
                                    const void **weights)
{
    uint32_t table[16][256];
    uint32_t crc = 0;
    FILE *f;
    unsigned char *buf;
    size_t done, want, got;
    *raw = NULL;
    *weights = NULL;
    if (!path)
        return AOTC_ERR_NULL_ARGUMENT;
    buf = (unsigned char *)aotc_aligned_alloc(bytes, 64, raw);
    if (!buf)
        return AOTC_ERR_OUT_OF_MEMORY;
    f = fopen(path, "rb");
    if (!f)
        return AOTC_ERR_WEIGHTS_FILE;
    aotc_crc32_tables(table);
    for (done = 0; done < bytes; done += got) {
        want = bytes - done < ((size_t)1 << 20) ? bytes - done : ((size_t)1 << 20);
        got = fread(buf + done, 1, want, f);
        if (got != want) {
            fclose(f);
            return AOTC_ERR_WEIGHTS_FILE;
        }
        crc = aotc_crc32((const uint32_t (*)[256])table, crc, buf + done, got);
    }
    if (fgetc(f) != EOF || ferror(f)) {
        fclose(f);
        return AOTC_ERR_WEIGHTS_FILE;
    }
    fclose(f);
    if (crc != crc32)
        return AOTC_ERR_WEIGHTS_CHECKSUM;
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

/* A vectorized reduction loop: `clauses` names its accumulators and how they combine
 * (`reduction(+:sum)`), so the compiler may give each vector lane its own copy and combine them
 * at the end, which reorders a floating-point sum (GCC and Clang do not otherwise). OpenMP's
 * SIMD pragmas need -fopenmp-simd (no OpenMP runtime); the C targets pass it with
 * -DAOTC_OPENMP_SIMD. Without them the loop stays as written: the same result, serially. */
#if defined(AOTC_OPENMP_SIMD)
#define AOTC_VECTORIZE_REDUCTION(clauses) AOTC_PRAGMA(omp simd clauses)
#else
#define AOTC_VECTORIZE_REDUCTION(clauses)
#endif

/* Conversions the kernels' loops call on every element: always inlined, since a call left in
 * a loop keeps it scalar (see aotc_math.h). */
#if defined(__GNUC__)
#define AOTC_ELEMENT_FN static inline __attribute__((always_inline))
#else
#define AOTC_ELEMENT_FN static inline
#endif

/* float16 / bfloat16 storage: values are stored as 16-bit patterns and computed in float. */
AOTC_ELEMENT_FN float aotc_half_to_float(uint16_t h)
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

AOTC_ELEMENT_FN uint16_t aotc_half_from_float(float f)
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

AOTC_ELEMENT_FN float aotc_bf16_to_float(uint16_t b)
{
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

AOTC_ELEMENT_FN uint16_t aotc_bf16_from_float(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x7fffffu))
        return (uint16_t)((v.u >> 16) | 0x40u);             /* quiet nan */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);   /* round to nearest even */
}

/* An output of run-time size (aotc/passes/bounded.py): the kernels wrote it in the row-major
 * layout of its capacity cap[]; move it, in place, into the dense row-major layout of its
 * run's shape dims[] (each dims[a] <= cap[a]). Every element moves to a lower or equal
 * address, so walking them in order never overwrites one still to be moved. */
static inline void aotc_compact(void *data, size_t elem, int rank, const int64_t *cap, const int64_t *dims)
{
    unsigned char *p = (unsigned char *)data;
    int64_t idx[16] = {0}, total = 1, row;
    size_t dst = 0;
    int a;
    if (rank == 0 || rank > 16)
        return;
    for (a = 0; a < rank; ++a)
        total *= dims[a];
    if (total == 0)
        return;
    row = dims[rank - 1];
    for (;;) {          /* one run of the last axis per step, `idx` its start */
        int64_t src = 0;
        for (a = 0; a < rank; ++a)
            src = src * cap[a] + idx[a];
        if ((size_t)src * elem != dst)
            memmove(p + dst, p + (size_t)src * elem, (size_t)row * elem);
        dst += (size_t)row * elem;
        for (a = rank - 2; a >= 0; --a) {
            if (++idx[a] < dims[a])
                break;
            idx[a] = 0;
        }
        if (a < 0)
            return;
    }
}

/* Milliseconds on a monotonic clock (kernel profiling). */
static inline double aotc_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#endif
