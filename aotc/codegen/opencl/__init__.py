"""The OpenCL backend: OpenCL C kernels (the GPU schedule's launches) and C host code."""
