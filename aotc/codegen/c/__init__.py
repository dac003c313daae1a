"""The C backend: C99 kernels and host code for CPU targets (c, c-avx2, c-avx512, native)."""
