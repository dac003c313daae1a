/* aotc runtime: CUDA host helpers for artifacts of the cuda target: every CUDA runtime error as
 * an aotc status code, and the check of the device an instance is made on. */
#ifndef AOTC_CUDA_H
#define AOTC_CUDA_H

#include <cuda_runtime.h>
#include <cstring>

#include "aotc_runtime.h"

static inline int aotc_cuda_status(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return AOTC_OK;
    case cudaErrorMemoryAllocation: return AOTC_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice: return AOTC_ERR_NO_DEVICE;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: return AOTC_ERR_DEVICE_MISMATCH;
    default: return AOTC_ERR_DEVICE;
    }
}

/* The bits of f read as a T of the same width (BitCast), in device code. */
template <typename T, typename F>
static __device__ __forceinline__ T aotc_bitcast(F f)
{
    static_assert(sizeof(T) == sizeof(F), "aotc_bitcast: types of different widths");
    T t;
    memcpy(&t, &f, sizeof t);
    return t;
}

/* Returns the call's failure as an aotc status from the enclosing function. */
#define AOTC_CUDA_CHECK(call)                            \
    do {                                                 \
        cudaError_t aotc_cuda_err_ = (call);             \
        if (aotc_cuda_err_ != cudaSuccess)               \
            return aotc_cuda_status(aotc_cuda_err_);     \
    } while (0)

/* Device `index` exists and has compute capability min_cc (major * 10 + minor) or more. */
static inline int aotc_cuda_check_device(int index, int min_cc)
{
    int count = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess)
        return aotc_cuda_status(err);
    if (count == 0)
        return AOTC_ERR_NO_DEVICE;
    if (index < 0 || index >= count)
        return AOTC_ERR_BAD_OPTION;
    AOTC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
    AOTC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
    return major * 10 + minor >= min_cc ? AOTC_OK : AOTC_ERR_DEVICE_MISMATCH;
}

/* Kernel timing: waits for the event recorded after a launch and adds the time since ev[0]. */
static inline int aotc_cuda_time(cudaEvent_t ev[2], cudaStream_t stream, double *ms)
{
    float t = 0.0f;
    AOTC_CUDA_CHECK(cudaEventRecord(ev[1], stream));
    AOTC_CUDA_CHECK(cudaEventSynchronize(ev[1]));
    AOTC_CUDA_CHECK(cudaEventElapsedTime(&t, ev[0], ev[1]));
    *ms += t;
    return AOTC_OK;
}

/* Rows of a cache updated in place (codegen/host.py CacheCopies) between the host array `host`,
 * its rows host_pitch bytes apart, and the device array `dev`, its rows `pitch` apart: `rows`
 * rows of `width` bytes, each from byte `at` of its row on both sides; queued on the stream. */
static inline cudaError_t aotc_cuda_rows(cudaStream_t stream, void *dev, int to_device, const void *host,
                                         size_t host_pitch, size_t pitch, size_t at, size_t width, size_t rows)
{
    unsigned char *d = (unsigned char *)dev + at, *h = (unsigned char *)host + at;
    if (width == 0 || rows == 0)
        return cudaSuccess;
    if (to_device)
        return cudaMemcpy2DAsync(d, pitch, h, host_pitch, width, rows, cudaMemcpyHostToDevice, stream);
    return cudaMemcpy2DAsync(h, host_pitch, d, pitch, width, rows, cudaMemcpyDeviceToHost, stream);
}

/* A condition (one bool in device memory: an If's, a host loop's flag), read back for the host
 * program after the stream's work so far. A failed copy reads as false and leaves its status in *status. */
static inline int aotc_cuda_flag(cudaStream_t stream, const void *p, int *status)
{
    unsigned char b = 0;
    cudaError_t err = cudaMemcpyAsync(&b, p, 1, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess && *status == AOTC_OK)
        *status = aotc_cuda_status(err);
    return err == cudaSuccess && b != 0;
}

#endif
