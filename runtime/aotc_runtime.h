/* aotc runtime: the status codes and options every artifact's public header uses. Copied into
 * each artifact; macros and a typedef only, so several models link into one program and any C99
 * or C++ program can include it (the generated sources' helpers are in aotc_support.h). */
#ifndef AOTC_RUNTIME_H
#define AOTC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

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
#define AOTC_ERR_DEVICE_MISMATCH 13   /* create(): the device, its driver or the compiled architecture do not fit */
#define AOTC_ERR_DIVIDE_BY_ZERO 14    /* run: an integer Div or Mod met a zero divisor in the data */
#define AOTC_ERR_WEIGHTS_CHECKSUM 15  /* create(): the weights file has the right size, but not the compiled CRC-32 */
#define AOTC_ERR_BRANCH 16            /* run: an If took a branch that cannot run at the sizes the artifact was compiled for */
#define AOTC_ERR_SHAPE 17             /* run: an input's shape is outside the ranges the artifact was compiled for */
#define AOTC_ERR_NO_SUCH_PORT 18      /* set_input / set_output: a port index the model does not have */

#define AOTC_STRERROR_CASES                                                        \
    case AOTC_OK: return "ok";                                                     \
    case AOTC_ERR_NULL_ARGUMENT: return "a required pointer argument is NULL";     \
    case AOTC_ERR_MISALIGNED: return "workspace or weights pointer is misaligned"; \
    case AOTC_ERR_NO_WEIGHTS: return "model has external weights: load them and call run_with_weights"; \
    case AOTC_ERR_OUT_OF_MEMORY: return "out of memory";                           \
    case AOTC_ERR_WEIGHTS_FILE: return "weights file missing, unreadable or of the wrong size"; \
    case AOTC_ERR_WEIGHTS_CHECKSUM: return "weights file corrupted: its checksum differs from the one compiled into the artifact"; \
    case AOTC_ERR_BAD_OPTION: return "an option is out of range (threads above the compiled maximum, or no such device)"; \
    case AOTC_ERR_THREADS: return "could not start a thread";                      \
    case AOTC_ERR_INDEX_OUT_OF_RANGE: return "an index read from the input data is out of range"; \
    case AOTC_ERR_NOT_SUPPORTED: return "not supported for this target (GPU targets: use create and invoke)"; \
    case AOTC_ERR_NO_DEVICE: return "no device the artifact can run on";          \
    case AOTC_ERR_DEVICE: return "a device operation failed";                      \
    case AOTC_ERR_DEVICE_BUILD: return "the device compiler rejected the generated kernels"; \
    case AOTC_ERR_DEVICE_MISMATCH: return "the device, its driver or the architecture the artifact was compiled for do not fit"; \
    case AOTC_ERR_DIVIDE_BY_ZERO: return "an integer division (Div or Mod) by zero"; \
    case AOTC_ERR_BRANCH: return "an If took a branch that cannot run at the input sizes compiled for (the failing kernel's name says why)"; \
    case AOTC_ERR_SHAPE: return "an input's shape is outside the ranges the artifact was compiled for (<name>_failure says which rule)"; \
    case AOTC_ERR_NO_SUCH_PORT: return "the model has no input or output of that index";

/* Options of <name>_create_with_options; zero-initialize, then set what you need. */
typedef struct {
    int threads;       /* CPU targets: threads of the instance (1 .. <NAME>_THREADS); 0: as many as
                          the machine has cores, up to <NAME>_THREADS */
    int platform;      /* OpenCL: platform index (0: the first with a suitable device) */
    int device;        /* OpenCL: device index on that platform; CUDA: device index (0: the first) */
    int profile;       /* 1: time every kernel, summed over invokes (<name>_profile) */
} aotc_options;

#endif
