/* The CPU emulation's nvcuda::wmma (see cuda_runtime.h): the fragment types aotc's TF32 GEMM
 * uses (m16n16k8: matrix_a and matrix_b in TF32, row-major; a float accumulator). Every thread
 * of the warp holds the whole tile (a GPU spreads it over the warp's registers), so the
 * collective operations are each thread doing all of the work alike; loads check the
 * alignment the real ones require (a 32-byte aligned pointer, ldm a multiple of 4 floats). */
#ifndef AOTC_CUDA_EMU_MMA_H
#define AOTC_CUDA_EMU_MMA_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment;

template <int M, int N, int K>
struct fragment<matrix_a, M, N, K, precision::tf32, row_major> {
    static constexpr int rows = M, cols = K, num_elements = M * K;
    float x[M * K];
};
template <int M, int N, int K>
struct fragment<matrix_b, M, N, K, precision::tf32, row_major> {
    static constexpr int rows = K, cols = N, num_elements = K * N;
    float x[K * N];
};
template <int M, int N, int K>
struct fragment<accumulator, M, N, K, float, void> {
    static constexpr int rows = M, cols = N, num_elements = M * N;
    float x[M * N];
};

inline void check_alignment(const void *p, unsigned ldm, const char *what)
{
    if ((reinterpret_cast<uintptr_t>(p) % 32) != 0 || ldm % 4 != 0) {
        std::fprintf(stderr, "aotc cuda emulation: %s at %p with ldm %u: wmma needs a 32-byte aligned pointer "
                     "and ldm a multiple of 4\n", what, p, ldm);
        std::abort();
    }
}

template <class F>
inline void fill_fragment(F &f, float v)
{
    for (int i = 0; i < F::num_elements; ++i)
        f.x[i] = v;
}

template <class F>
inline void load_matrix_sync(F &f, const float *p, unsigned ldm)
{
    check_alignment(p, ldm, "load_matrix_sync");
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c)
            f.x[r * F::cols + c] = p[r * ldm + c];
}

template <class F>
inline void store_matrix_sync(float *p, const F &f, unsigned ldm, layout_t layout)
{
    check_alignment(p, ldm, "store_matrix_sync");
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c)
            p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[r * F::cols + c];
}

template <int M, int N, int K>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                     const fragment<matrix_a, M, N, K, precision::tf32, row_major> &a,
                     const fragment<matrix_b, M, N, K, precision::tf32, row_major> &b,
                     const fragment<accumulator, M, N, K, float> &c)
{
    float out[M * N];
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; ++k)
                s += a.x[i * K + k] * b.x[k * N + j];
            out[i * N + j] = s;
        }
    std::memcpy(d.x, out, sizeof out);
}

/* float to TF32 (10 explicit mantissa bits), rounding to nearest, ties away from zero */
inline float __float_to_tf32(float v)
{
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if ((bits & 0x7f800000u) != 0x7f800000u)
        bits = (bits + 0x1000u) & 0xffffe000u;
    std::memcpy(&v, &bits, 4);
    return v;
}

}  // namespace wmma
}  // namespace nvcuda

#endif
