/* aotc runtime: status codes and small helpers shared by every generated model.
 * Copied into each artifact; everything here is static or a macro, so several models
 * can be linked into one program without symbol clashes. */
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

#define AOTC_STRERROR_CASES                                                        \
    case AOTC_OK: return "ok";                                                     \
    case AOTC_ERR_NULL_ARGUMENT: return "a required pointer argument is NULL";     \
    case AOTC_ERR_MISALIGNED: return "workspace or weights pointer is misaligned"; \
    case AOTC_ERR_NO_WEIGHTS: return "model has external weights: load them and call run_with_weights"; \
    case AOTC_ERR_OUT_OF_MEMORY: return "out of memory";                           \
    case AOTC_ERR_WEIGHTS_FILE: return "weights file missing, unreadable or of the wrong size";

#endif
