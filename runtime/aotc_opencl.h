/* aotc runtime: OpenCL host helpers for artifacts of the opencl target.
 *   - aotc_cl_pick_device: the platform / device an instance runs on (options, or the first
 *     GPU of any platform, else the first device of any kind);
 *   - aotc_cl_status: an OpenCL error as an aotc status code;
 *   - aotc_cl_build: the program from source; when the environment variable
 *     AOTC_OPENCL_BUILD_LOG names a file, a failed build writes the compiler's log there.
 * Everything is static inline: several models link into one program. */
#ifndef AOTC_OPENCL_H
#define AOTC_OPENCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

#include "aotc_runtime.h"
#include "aotc_support.h"

/* Returns the call's failure as an aotc status from the enclosing function. */
#define AOTC_CL_CHECK(call)                          \
    do {                                             \
        cl_int aotc_cl_err_ = (call);                \
        if (aotc_cl_err_ != CL_SUCCESS)              \
            return aotc_cl_status(aotc_cl_err_);     \
    } while (0)

#define AOTC_CL_MAX_PLATFORMS 16
#define AOTC_CL_MAX_DEVICES 64

static inline int aotc_cl_status(cl_int err)
{
    switch (err) {
    case CL_SUCCESS: return AOTC_OK;
    case CL_OUT_OF_HOST_MEMORY: return AOTC_ERR_OUT_OF_MEMORY;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES: return AOTC_ERR_OUT_OF_MEMORY;
    case CL_DEVICE_NOT_FOUND:
    case CL_DEVICE_NOT_AVAILABLE:
    case -1001: return AOTC_ERR_NO_DEVICE;        /* CL_PLATFORM_NOT_FOUND_KHR: no ICD installed */
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILER_NOT_AVAILABLE: return AOTC_ERR_DEVICE_BUILD;
    default: return AOTC_ERR_DEVICE;
    }
}

/* options->platform / options->device index the lists the OpenCL ICD reports; without
 * options, the first GPU of any platform, else the first device of any kind. */
static inline int aotc_cl_pick_device(const aotc_options *options, cl_platform_id *platform, cl_device_id *device)
{
    cl_platform_id platforms[AOTC_CL_MAX_PLATFORMS];
    cl_uint n_platforms = 0, p;
    if (clGetPlatformIDs(AOTC_CL_MAX_PLATFORMS, platforms, &n_platforms) != CL_SUCCESS || n_platforms == 0)
        return AOTC_ERR_NO_DEVICE;
    if (n_platforms > AOTC_CL_MAX_PLATFORMS)
        n_platforms = AOTC_CL_MAX_PLATFORMS;
    if (options && (options->platform || options->device)) {
        cl_device_id devices[AOTC_CL_MAX_DEVICES];
        cl_uint n = 0;
        if (options->platform < 0 || (cl_uint)options->platform >= n_platforms || options->device < 0)
            return AOTC_ERR_BAD_OPTION;
        if (clGetDeviceIDs(platforms[options->platform], CL_DEVICE_TYPE_ALL, AOTC_CL_MAX_DEVICES, devices, &n)
                != CL_SUCCESS || (cl_uint)options->device >= n)
            return AOTC_ERR_BAD_OPTION;
        *platform = platforms[options->platform];
        *device = devices[options->device];
        return AOTC_OK;
    }
    for (p = 0; p < n_platforms; ++p)
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_GPU, 1, device, NULL) == CL_SUCCESS) {
            *platform = platforms[p];
            return AOTC_OK;
        }
    for (p = 0; p < n_platforms; ++p)
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 1, device, NULL) == CL_SUCCESS) {
            *platform = platforms[p];
            return AOTC_OK;
        }
    return AOTC_ERR_NO_DEVICE;
}

static inline int aotc_cl_build(cl_context context, cl_device_id device, const char *const *lines, cl_uint n_lines,
                                cl_program *program)
{
    cl_int err;
    *program = clCreateProgramWithSource(context, n_lines, (const char **)lines, NULL, &err);
    if (err != CL_SUCCESS)
        return aotc_cl_status(err);
    err = clBuildProgram(*program, 1, &device, "-cl-std=CL1.2", NULL, NULL);
    if (err != CL_SUCCESS) {
        const char *path = getenv("AOTC_OPENCL_BUILD_LOG");
        if (path) {
            size_t size = 0;
            char *log;
            clGetProgramBuildInfo(*program, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
            log = (char *)malloc(size + 1);
            if (log) {
                FILE *f = fopen(path, "w");
                clGetProgramBuildInfo(*program, device, CL_PROGRAM_BUILD_LOG, size, log, NULL);
                log[size] = 0;
                if (f) {
                    fputs(log, f);
                    fclose(f);
                }
                free(log);
            }
        }
        return AOTC_ERR_DEVICE_BUILD;
    }
    return AOTC_OK;
}

/* Rows of a cache updated in place (codegen/host.py CacheCopies) between the host array `host`,
 * its rows host_pitch bytes apart, and the device array `mem`, its rows `pitch` apart: `rows`
 * rows of `width` bytes, each from byte `at` of its row on both sides; queued, not waited for.
 * None where width or rows is 0 (OpenCL refuses an empty region). */
static inline cl_int aotc_cl_rows(cl_command_queue queue, cl_mem mem, int to_device, const void *host, size_t host_pitch,
                                  size_t pitch, size_t at, size_t width, size_t rows)
{
    size_t origin[3], region[3];
    if (width == 0 || rows == 0)
        return CL_SUCCESS;
    origin[0] = at, origin[1] = 0, origin[2] = 0;
    region[0] = width, region[1] = rows, region[2] = 1;
    if (to_device)
        return clEnqueueWriteBufferRect(queue, mem, CL_FALSE, origin, origin, region, pitch, 0, host_pitch, 0, host, 0,
                                        NULL, NULL);
    return clEnqueueReadBufferRect(queue, mem, CL_FALSE, origin, origin, region, pitch, 0, host_pitch, 0, (void *)host, 0,
                                   NULL, NULL);
}

/* A condition (one bool at `offset` in `mem`: an If's, a host loop's flag), read back for the
 * host program after the queue's work so far. A failed read reads as false and leaves its status in *status. */
static inline int aotc_cl_flag(cl_command_queue queue, cl_mem mem, size_t offset, int *status)
{
    unsigned char b = 0;
    cl_int err = clEnqueueReadBuffer(queue, mem, CL_TRUE, offset, 1, &b, 0, NULL, NULL);
    if (err != CL_SUCCESS && *status == AOTC_OK)
        *status = aotc_cl_status(err);
    return err == CL_SUCCESS && b != 0;
}

#endif
