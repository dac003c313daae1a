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

/* A cache updated in place (a TensorScatter the caller may give one array for its input and
 * its output): the input's bytes copied into the output only where they are two arrays. */
static inline void aotc_copy_unless_same(void *dst, const void *src, size_t bytes)
{
    if (dst != src)
        memcpy(dst, src, bytes);
}

#if defined(__linux__) && !defined(__cplusplus)
/* Linux's madvise and its MADV_HUGEPAGE (14 on every architecture), declared here: the
 * generated C sources ask for POSIX alone (_POSIX_C_SOURCE), which hides both. (The CUDA
 * target's C++ host code keeps its few host buffers in ordinary pages.) */
extern int madvise(void *addr, size_t length, int advice);
#define AOTC_MADV_HUGEPAGE 14
#define AOTC_HUGE_PAGES 1
#endif
/* at least this many bytes are allocated in 2 MiB pages where the kernel gives them on request
 * (transparent huge pages in "madvise" mode, a common default): weights and workspaces of
 * tens of MB are then read through 512x fewer TLB entries. Measured (Intel Xeon, 1 thread): 16
 * 1x1 convolutions of 512 <-> 2048 channels at 7 x 7, their 64 MB of weights beyond the caches,
 * 17.5 -> 14.9 ms (ONNX Runtime 13.0) */
#define AOTC_HUGE_PAGE_MIN ((size_t)4 << 20)
#define AOTC_HUGE_PAGE ((size_t)2 << 20)

/* `bytes` of memory aligned to `align` (a power of two); *raw is what to free(). */
static inline void *aotc_aligned_alloc(size_t bytes, size_t align, void **raw)
{
#if defined(AOTC_HUGE_PAGES)
    if (bytes >= AOTC_HUGE_PAGE_MIN && align <= AOTC_HUGE_PAGE) {
        const size_t size = (bytes + AOTC_HUGE_PAGE - 1) / AOTC_HUGE_PAGE * AOTC_HUGE_PAGE;
        void *h = NULL;
        if (posix_memalign(&h, AOTC_HUGE_PAGE, size) == 0) {
            (void)madvise(h, size, AOTC_MADV_HUGEPAGE);     /* (a kernel without them: 4 KiB pages) */
            *raw = h;
            return h;
        }
    }
#endif
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
#if defined(__device__)                   /* CUDA (whose headers define __device__): host and device */
#define AOTC_ELEMENT_FN static inline __host__ __device__
#elif defined(__GNUC__)
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

/* aotc:small-types-begin (the OpenCL printer copies the code from here to the end mark into the
 * kernels that use it, with C99's fixed-width type names defined: keep it OpenCL C too) */
/* 8- and 4-bit floats (float8 E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ; float4 E2M1): stored one per
 * byte (E2M1 in the byte's low 4 bits, as ml_dtypes holds it), computed in float. A format is
 * its width in bits, mantissa bits, exponent bias, largest finite value, and which codes are
 * special: */
#define AOTC_SMALL_IEEE 0   /* E5M2: the all-ones exponent is infinity (mantissa 0) or NaN */
#define AOTC_SMALL_FN 1     /* E4M3FN: all-ones exponent and mantissa is NaN; no infinity */
#define AOTC_SMALL_FNUZ 2   /* E4M3FNUZ, E5M2FNUZ: 0x80 (-0) is the NaN; no infinity, no -0 */
#define AOTC_SMALL_NONE 3   /* E2M1: every code is a finite value */

AOTC_ELEMENT_FN float aotc_small_to_float(uint32_t b, int bits, int man, int bias, int kind)
{
    union { uint32_t u; float f; } v;
    const uint32_t sign = (b >> (bits - 1)) & 1u, mag = b & ((1u << (bits - 1)) - 1u);
    const uint32_t exp = mag >> man, m = mag & ((1u << man) - 1u), top = (1u << (bits - 1 - man)) - 1u;
    float f;
    if ((kind == AOTC_SMALL_FNUZ && sign && !mag) || (kind == AOTC_SMALL_FN && mag == (1u << (bits - 1)) - 1u) ||
        (kind == AOTC_SMALL_IEEE && exp == top)) {
        v.u = (sign << 31) | (kind == AOTC_SMALL_IEEE && !m ? 0x7f800000u : 0x7fc00000u);
        return v.f;
    }
    if (exp) {
        v.u = ((uint32_t)((int)exp - bias + 127) << 23) | (m << (23 - man));
        f = v.f;
    } else {                                  /* zero, subnormal: m quanta of 2^(1 - bias - man) */
        v.u = (uint32_t)(127 + 1 - bias - man) << 23;
        f = (float)m * v.f;
    }
    return sign ? -f : f;
}

/* f rounded to the nearest code, ties to even; past the largest finite value (infinity too):
 * infinity (E5M2), NaN (E4M3FN, the FNUZ formats), the largest value (E2M1). A NaN: the format's
 * NaN (E2M1: -0, as ml_dtypes). (Cast's saturation is done before, in float: ops/narrow.py.) */
AOTC_ELEMENT_FN uint8_t aotc_small_from_float(float f, int bits, int man, int bias, float largest, int kind)
{
    union { float f; uint32_t u; } v, q;
    uint32_t sign, code;
    int e;
    float a, n;
    v.f = f;
    sign = (v.u >> 31) << (bits - 1);
    if (f != f)
        return (uint8_t)(kind == AOTC_SMALL_FNUZ ? 0x80u : kind == AOTC_SMALL_NONE ? sign
                         : kind == AOTC_SMALL_FN ? sign | 0x7fu : sign | 0x7eu);
    a = f < 0.0f ? -f : f;
    e = (int)((v.u >> 23) & 0xffu) - 127;     /* the quantum: 2^(max(e, 1 - bias) - man) */
    if (e < 1 - bias)
        e = 1 - bias;
    q.u = (uint32_t)(e - man + 127) << 23;
    n = 0.0f;
    if (a <= 2.0f * largest) {                /* a / q < 2^(man + 2): n = a / q to nearest even */
        const float t = a / q.f;
        const uint32_t whole = (uint32_t)t;
        const float rest = t - (float)whole;
        n = (float)(whole + (rest > 0.5f || (rest == 0.5f && (whole & 1u))));
    }
    if (!(a <= 2.0f * largest) || n * q.f > largest) {
        if (kind == AOTC_SMALL_IEEE)
            return (uint8_t)(sign | (((1u << (bits - 1 - man)) - 1u) << man));
        if (kind == AOTC_SMALL_NONE)
            return (uint8_t)(sign | ((1u << (bits - 1)) - 1u));
        return (uint8_t)(kind == AOTC_SMALL_FNUZ ? 0x80u : sign | 0x7fu);
    }
    /* n quanta: a mantissa with its implicit bit (a carry into the exponent adds up right) */
    code = ((uint32_t)(e + bias - 1) << man) + (uint32_t)n;
    if (kind == AOTC_SMALL_FNUZ && code == 0)
        return 0;                             /* no -0 */
    return (uint8_t)(sign | code);
}

#define AOTC_SMALL_FLOAT(name, bits, man, bias, largest, kind) \
    AOTC_ELEMENT_FN float aotc_##name##_to_float(uint8_t b) \
    { return aotc_small_to_float(b, bits, man, bias, kind); } \
    AOTC_ELEMENT_FN uint8_t aotc_##name##_from_float(float f) \
    { return aotc_small_from_float(f, bits, man, bias, largest, kind); }
AOTC_SMALL_FLOAT(f8e4m3fn, 8, 3, 7, 448.0f, AOTC_SMALL_FN)
AOTC_SMALL_FLOAT(f8e4m3fnuz, 8, 3, 8, 240.0f, AOTC_SMALL_FNUZ)
AOTC_SMALL_FLOAT(f8e5m2, 8, 2, 15, 57344.0f, AOTC_SMALL_IEEE)
AOTC_SMALL_FLOAT(f8e5m2fnuz, 8, 2, 16, 57344.0f, AOTC_SMALL_FNUZ)
AOTC_SMALL_FLOAT(f4e2m1, 4, 1, 1, 6.0f, AOTC_SMALL_NONE)

/* E8M0: a power of two, 2^(b - 127), 255 the NaN (the code is a float32's exponent field) */
AOTC_ELEMENT_FN float aotc_f8e8m0_to_float(uint8_t b)
{
    union { uint32_t u; float f; } v;
    v.u = b == 255u ? 0x7fc00000u : b ? (uint32_t)b << 23 : 0x00400000u;
    return v.f;
}

/* (f is a power of two or NaN: ops/narrow.py rounds before the store) */
AOTC_ELEMENT_FN uint8_t aotc_f8e8m0_from_float(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    return (uint8_t)((v.u >> 23) & 0xffu);
}

/* 4- and 2-bit integers: one per byte, the value in the byte's low bits (two's complement for
 * the signed ones), as ml_dtypes holds them; computed in int8_t / uint8_t. */
AOTC_ELEMENT_FN int8_t aotc_int4_to_int(uint8_t b) { return (int8_t)((int)((b & 15u) ^ 8u) - 8); }
AOTC_ELEMENT_FN uint8_t aotc_int4_from_int(int8_t v) { return (uint8_t)((unsigned)v & 15u); }
AOTC_ELEMENT_FN uint8_t aotc_uint4_to_int(uint8_t b) { return (uint8_t)(b & 15u); }
AOTC_ELEMENT_FN uint8_t aotc_uint4_from_int(uint8_t v) { return (uint8_t)(v & 15u); }
AOTC_ELEMENT_FN int8_t aotc_int2_to_int(uint8_t b) { return (int8_t)((int)((b & 3u) ^ 2u) - 2); }
AOTC_ELEMENT_FN uint8_t aotc_int2_from_int(int8_t v) { return (uint8_t)((unsigned)v & 3u); }
AOTC_ELEMENT_FN uint8_t aotc_uint2_to_int(uint8_t b) { return (uint8_t)(b & 3u); }
AOTC_ELEMENT_FN uint8_t aotc_uint2_from_int(uint8_t v) { return (uint8_t)(v & 3u); }
/* aotc:small-types-end */

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

/* ---------------------------------------------------------------- subnormal floats
 * A run computes with subnormal floats (below 1.2e-38 in magnitude) as zero: x86 cores take a
 * microcode assist, tens of times slower, for every operation that meets one, and trained
 * weights hold them. aotc_fpenv_flush() sets this thread's flush-to-zero and
 * denormals-are-zero modes (x86: MXCSR's FTZ and DAZ bits; AArch64: FPCR's FZ) and returns the
 * state before, which aotc_fpenv_restore() puts back; the thread pool's workers take the
 * caller's state for each job (aotc_threads.h). Elsewhere these do nothing. */
#if defined(__SSE2__) || defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
typedef unsigned int aotc_fpenv;
#define AOTC_FPENV_FLUSH 0x8040u                  /* FTZ (bit 15) and DAZ (bit 6) */
static inline aotc_fpenv aotc_fpenv_get(void) { return _mm_getcsr(); }
static inline void aotc_fpenv_restore(aotc_fpenv e) { _mm_setcsr(e); }
#elif defined(__aarch64__)
typedef unsigned long aotc_fpenv;
#define AOTC_FPENV_FLUSH (1ul << 24)              /* FZ */
static inline aotc_fpenv aotc_fpenv_get(void)
{
    unsigned long e;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(e));
    return e;
}
static inline void aotc_fpenv_restore(aotc_fpenv e) { __asm__ __volatile__("msr fpcr, %0" : : "r"(e)); }
#else
typedef int aotc_fpenv;
#define AOTC_FPENV_FLUSH 0
static inline aotc_fpenv aotc_fpenv_get(void) { return 0; }
static inline void aotc_fpenv_restore(aotc_fpenv e) { (void)e; }
#endif

static inline aotc_fpenv aotc_fpenv_flush(void)
{
    aotc_fpenv before = aotc_fpenv_get();
    if (AOTC_FPENV_FLUSH && (before & AOTC_FPENV_FLUSH) != AOTC_FPENV_FLUSH)
        aotc_fpenv_restore(before | AOTC_FPENV_FLUSH);
    return before;
}

/* The lanes of a 16-lane vector that hold the first n of a row's remaining elements (none for
 * n <= 0, all for n >= 16): the mask (an AVX-512 __mmask16) of a row's last, partial vector
 * (aotc_lerp.h, aotc_softmax.h). As a plain integer, so that this header, which every
 * generated source includes, need not include <immintrin.h>: its parsing alone was 0.24 s of
 * a 0.34 s build of a one-node model. */
static inline uint16_t aotc_mask16(int64_t n)
{
    return (uint16_t)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u);
}

#endif
