"""The CUDA backend: CUDA C++ kernels (the GPU schedule's launches) and host code on the CUDA
runtime API, built with nvcc."""
