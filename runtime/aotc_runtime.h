/* aotc runtime: status codes, options and small helpers shared by every generated model.
 * Copied into each artifact; everything here is static, inline or a macro, so several models
 * can be linked into one program without symbol clashes. */
#ifndef AOTC_RUNTIME_H
#define AOTC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define AOTC_OK 0
#define AOTC_ERR_NULL_ARGUMENT 1      /* a required pointer was NULL */
#define AOTC_ERR_MISALIGNED 2         /* workspace or weights not aligned as the header says */
#define AOTC_ERR_NO_WEIGHTS 3         /* model was built with external weights: use *_run_with_weights */
#define AOTC_ERR_OUT_OF_MEMORY 4      /* create(): allocation failed */
#define AOTC_ERR_WEIGHTS_FILE 5       /* create(): weights file missing, unreadable or wrong size */
#define AOTC_ERR_BAD_OPTION 6         /* create_with_options(): an option out of range */
#define AOTC_ERR_THREADS 7            /* create(): the system refused a thread */
#define AOTC_ERR_INDEX_OUT_OF_RANGE 8 /* run: an index read from an input is outside the dim it indexes */
#define AOTC_ERR_NOT_SUPPORTED 9      /* this entry point does not exist for the artifact's target */
#define AOTC_ERR_NO_DEVICE 10         /* create(): no device of the kind the artifact needs */
#define AOTC_ERR_DEVICE 11            /* a device call failed (out of device memory, lost device...) */
#define AOTC_ERR_DEVICE_BUILD 12      /* create(): the device compiler rejected the kernels */

#define AOTC_STRERROR_CASES                                                        \
    case AOTC_OK: return "ok";                                                     \
    case AOTC_ERR_NULL_ARGUMENT: return "a required pointer argument is NULL";     \
    case AOTC_ERR_MISALIGNED: return "workspace or weights pointer is misaligned"; \
    case AOTC_ERR_NO_WEIGHTS: return "model has external weights: load them and call run_with_weights"; \
    case AOTC_ERR_OUT_OF_MEMORY: return "out of memory";                           \
    case AOTC_ERR_WEIGHTS_FILE: return "weights file missing, unreadable or of the wrong size"; \
    case AOTC_ERR_BAD_OPTION: return "an option is out of range (threads above the compiled maximum, or no such device)"; \
    case AOTC_ERR_THREADS: return "could not start a thread";                      \
    case AOTC_ERR_INDEX_OUT_OF_RANGE: return "an index read from the input data is out of range"; \
    case AOTC_ERR_NOT_SUPPORTED: return "not supported for this target (GPU targets: use create and invoke)"; \
    case AOTC_ERR_NO_DEVICE: return "no device the artifact can run on";          \
    case AOTC_ERR_DEVICE: return "a device operation failed";                      \
    case AOTC_ERR_DEVICE_BUILD: return "the device compiler rejected the generated kernels";

/* Options of <name>_create_with_options; zero-initialize, then set what you need. */
typedef struct {
    int threads;       /* CPU targets: threads of the instance (1 .. <NAME>_THREADS); 0: as many as
                          the machine has cores, up to <NAME>_THREADS */
    int platform;      /* OpenCL: platform index (0: the first with a suitable device) */
    int device;        /* OpenCL, CUDA: device index on that platform (0: the first) */
    int profile;       /* 1: time every kernel, summed over invokes (<name>_profile) */
} aotc_options;

/* Milliseconds on a monotonic clock (kernel profiling). */
static inline double aotc_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

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

#endif
