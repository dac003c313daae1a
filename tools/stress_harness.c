/* Thread-safety stress harness for one aotc artifact (tools/stress.py builds and runs it).
 *
 * It is generic: everything model-specific comes from "stress_glue.h", which tools/stress.py
 * generates from the artifact's manifest (SG_* macros and tables, sg_run / sg_create /
 * sg_invoke / sg_destroy / sg_threads wrapping <name>_run, <name>_create_with_options, ...).
 *
 * DATADIR holds SETS input sets and ONNX Runtime's outputs for them:
 *   in_<set>_<k>.bin   input k of set `set`, raw bytes in the input's dtype
 *   ref_<set>_<k>.bin  output k, raw bytes in the output's dtype
 *
 * What it does:
 *   1. golden: on the main thread, one <name>_run per set, and one invoke per set on an
 *      instance of POOL threads; each result is compared with ONNX Runtime (|got - want| <=
 *      atol + rtol * |want|, as numpy.allclose; NaN never matches) and kept as that set's
 *      golden result for the later calls.
 *   2. stress, all threads started at once on a barrier:
 *      - RUN_THREADS threads, each with its own workspace and outputs, calling <name>_run
 *        RUN_CALLS times on sets in a per-thread pseudo-random order;
 *      - INSTANCES threads, each creating its own model instance (POOL threads each, so
 *        its own thread pool), invoking it INVOKE_CALLS times over ROUNDS create/destroy
 *        cycles.
 *      Every result is compared with ONNX Runtime (within rtol/atol) and with the golden
 *      result of its set and entry point, bit for bit: the artifact is deterministic, so
 *      any difference is a race even when it hides inside the tolerance.
 *   3. prints one summary line "stress: ..." and exits 0 only when there were no status
 *      errors, no mismatches and no bitwise differences (1 otherwise, 2 bad usage, 3 I/O).
 *
 *   stress_harness [-s SETS] [-t RUN_THREADS] [-n RUN_CALLS] [-i INSTANCES] [-p POOL]
 *                  [-m INVOKE_CALLS] [-r ROUNDS] [-R RTOL] [-A ATOL] DATADIR
 */
#define _POSIX_C_SOURCE 200112L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stress_glue.h"

enum { SG_F32 = 1, SG_F64, SG_F16, SG_I64, SG_I32, SG_I16, SG_I8, SG_U8, SG_BOOL, SG_OTHER };

#define MAX_SETS 64
#define MAX_REPORTED 8

typedef struct {
    int sets, run_threads, run_calls, instances, pool, invoke_calls, rounds;
    double rtol, atol;
} options;

static options opt = {8, 8, 250, 4, 2, 250, 2, 1e-4, 1e-5};
static void *inputs[MAX_SETS][SG_NUM_INPUTS > 0 ? SG_NUM_INPUTS : 1];
static void *refs[MAX_SETS][SG_NUM_OUTPUTS];
static void *golden_run[MAX_SETS][SG_NUM_OUTPUTS];
static void *golden_invoke[MAX_SETS][SG_NUM_OUTPUTS];
static pthread_barrier_t start_line;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static int reported;

typedef struct {
    int id;                /* thread number within its kind */
    int invoke;            /* 0: <name>_run with its own workspace; 1: its own model instance */
    long calls, errors, mismatches, differences;
} worker;

/* ------------------------------------------------------------------------------ data files */
static void *load(const char *dir, const char *kind, int set, int k, size_t n)
{
    char path[4096];
    FILE *f;
    void *p = malloc(n ? n : 1);
    size_t got;
    snprintf(path, sizeof path, "%s/%s_%d_%d.bin", dir, kind, set, k);
    f = fopen(path, "rb");
    if (!f || !p) {
        fprintf(stderr, "stress: cannot open %s: %s\n", path, strerror(errno));
        exit(3);
    }
    got = fread(p, 1, n, f);
    if (got != n || fgetc(f) != EOF) {
        fprintf(stderr, "stress: %s does not hold %lu bytes\n", path, (unsigned long)n);
        exit(3);
    }
    fclose(f);
    return p;
}

/* ------------------------------------------------------------------------------ comparison */
static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double element(const void *p, int kind, size_t i)
{
    switch (kind) {
    case SG_F32: return ((const float *)p)[i];
    case SG_F64: return ((const double *)p)[i];
    case SG_F16: return half_to_double(((const uint16_t *)p)[i]);
    case SG_I64: return (double)((const int64_t *)p)[i];
    case SG_I32: return ((const int32_t *)p)[i];
    case SG_I16: return ((const int16_t *)p)[i];
    case SG_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static void report(const char *what, const worker *w, long call, int set, int k, size_t i, double got, double want)
{
    pthread_mutex_lock(&report_lock);
    if (reported++ < MAX_REPORTED)
        fprintf(stderr, "stress: %s: %s thread %d call %ld set %d output %s[%lu]: got %.9g, want %.9g\n", what,
                w ? (w->invoke ? "invoke" : "run") : "golden", w ? w->id : 0, call, set, sg_out_name[k],
                (unsigned long)i, got, want);
    pthread_mutex_unlock(&report_lock);
}

/* Outputs against ONNX Runtime: the number of outputs that differ (the first element reported). */
static int compare_reference(void *const *y, int set, const worker *w, long call)
{
    int k, bad = 0;
    for (k = 0; k < SG_NUM_OUTPUTS; ++k) {
        size_t i, n = sg_out_count[k];
        int kind = sg_out_kind[k];
        if (kind == SG_OTHER || kind == SG_BOOL || kind == SG_I64 || kind == SG_I32 || kind == SG_I16 ||
            kind == SG_I8 || kind == SG_U8) {
            if (memcmp(y[k], refs[set][k], n * sg_out_size[k]) != 0) {
                for (i = 0; i < n && !memcmp((const char *)y[k] + i * sg_out_size[k],
                                             (const char *)refs[set][k] + i * sg_out_size[k], sg_out_size[k]);
                     ++i)
                    ;
                report("differs from ONNX Runtime", w, call, set, k, i, element(y[k], kind, i),
                       element(refs[set][k], kind, i));
                ++bad;
            }
            continue;
        }
        for (i = 0; i < n; ++i) {
            double got = element(y[k], kind, i), want = element(refs[set][k], kind, i);
            if (!(fabs(got - want) <= opt.atol + opt.rtol * fabs(want))) {
                report("differs from ONNX Runtime", w, call, set, k, i, got, want);
                ++bad;
                break;
            }
        }
    }
    return bad;
}

/* Outputs against the golden result of their set, bit for bit. */
static int compare_golden(void *const *y, void *const *golden, int set, const worker *w, long call)
{
    int k, bad = 0;
    for (k = 0; k < SG_NUM_OUTPUTS; ++k) {
        size_t i, n = sg_out_count[k], s = sg_out_size[k];
        if (memcmp(y[k], golden[k], n * s) == 0)
            continue;
        for (i = 0; i < n && !memcmp((const char *)y[k] + i * s, (const char *)golden[k] + i * s, s); ++i)
            ;
        report("differs from the same call made alone", w, call, set, k, i, element(y[k], sg_out_kind[k], i),
               element(golden[k], sg_out_kind[k], i));
        ++bad;
    }
    return bad;
}

/* ------------------------------------------------------------------------------ calls */
static void **new_outputs(void)
{
    void **y = (void **)calloc(SG_NUM_OUTPUTS, sizeof *y);
    int k;
    if (!y)
        exit(3);
    for (k = 0; k < SG_NUM_OUTPUTS; ++k)
        if (!(y[k] = malloc(sg_out_count[k] * sg_out_size[k] + 1)))
            exit(3);
    return y;
}

static void free_outputs(void **y)
{
    int k;
    for (k = 0; k < SG_NUM_OUTPUTS; ++k)
        free(y[k]);
    free(y);
}

static void poison_outputs(void **y)
{
    int k;
    for (k = 0; k < SG_NUM_OUTPUTS; ++k)
        memset(y[k], 0xFF, sg_out_count[k] * sg_out_size[k]);   /* NaN / -1: an output not written shows */
}

static void *new_workspace(void)
{
    void *ws = NULL;
    if (posix_memalign(&ws, SG_WORKSPACE_ALIGN, SG_WORKSPACE_BYTES ? SG_WORKSPACE_BYTES : 1) != 0)
        exit(3);
    memset(ws, 0xFF, SG_WORKSPACE_BYTES ? SG_WORKSPACE_BYTES : 1);
    return ws;
}

static int next_set(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((*state >> 33) % (uint64_t)opt.sets);
}

static void check_call(worker *w, long call, int status, void **y, int set)
{
    ++w->calls;
    if (status != 0) {
        pthread_mutex_lock(&report_lock);
        if (reported++ < MAX_REPORTED)
            fprintf(stderr, "stress: %s thread %d call %ld: status %d (%s)\n", w->invoke ? "invoke" : "run", w->id,
                    call, status, sg_strerror(status));
        pthread_mutex_unlock(&report_lock);
        ++w->errors;
        return;
    }
    w->mismatches += compare_reference(y, set, w, call) > 0;
    w->differences += compare_golden(y, w->invoke ? golden_invoke[set] : golden_run[set], set, w, call) > 0;
}

static void *run_worker(void *p)
{
    worker *w = (worker *)p;
    void *ws = new_workspace();
    void **y = new_outputs();
    uint64_t state = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    long c;
    pthread_barrier_wait(&start_line);
    for (c = 0; c < opt.run_calls; ++c) {
        int set = next_set(&state);
        poison_outputs(y);
        check_call(w, c, sg_run(inputs[set], y, ws), y, set);
    }
    free_outputs(y);
    free(ws);
    return NULL;
}

static void *invoke_worker(void *p)
{
    worker *w = (worker *)p;
    void **y = new_outputs();
    uint64_t state = 0xD1B54A32D192ED03ull * (uint64_t)(w->id + 1);
    long c = 0;
    int r;
    pthread_barrier_wait(&start_line);
    for (r = 0; r < opt.rounds; ++r) {
        long end = opt.invoke_calls * (long)(r + 1) / opt.rounds;
        void *model = NULL;
        int status = sg_create(opt.pool, &model);
        if (status != 0 || sg_threads(model) != opt.pool) {
            pthread_mutex_lock(&report_lock);
            fprintf(stderr, "stress: invoke thread %d: create: status %d (%s), %d threads\n", w->id, status,
                    sg_strerror(status), status ? 0 : sg_threads(model));
            pthread_mutex_unlock(&report_lock);
            ++w->errors;
            sg_destroy(model);
            break;
        }
        for (; c < end; ++c) {
            int set = next_set(&state);
            poison_outputs(y);
            check_call(w, c, sg_invoke(model, inputs[set], y), y, set);
        }
        sg_destroy(model);
    }
    free_outputs(y);
    return NULL;
}

/* ------------------------------------------------------------------------------ main */
static int parse_int(const char *s, int lo, int hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "stress: %s is not a number from %d to %d\n", s, lo, hi);
        exit(2);
    }
    return (int)v;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int a, set, k, golden_bad = 0, total_threads;
    const char *dir = NULL;
    void *ws, *model = NULL;
    pthread_t *handles;
    worker *workers;
    long calls = 0, errors = 0, mismatches = 0, differences = 0;
    double t0;

    for (a = 1; a < argc; ++a) {
        const char *f = argv[a];
        if (f[0] == '-' && f[1] && !f[2] && a + 1 < argc) {
            const char *v = argv[++a];
            switch (f[1]) {
            case 's': opt.sets = parse_int(v, 1, MAX_SETS); break;
            case 't': opt.run_threads = parse_int(v, 0, 1024); break;
            case 'n': opt.run_calls = parse_int(v, 0, 100000000); break;
            case 'i': opt.instances = parse_int(v, 0, 1024); break;
            case 'p': opt.pool = parse_int(v, 1, 256); break;
            case 'm': opt.invoke_calls = parse_int(v, 0, 100000000); break;
            case 'r': opt.rounds = parse_int(v, 1, 1000); break;
            case 'R': opt.rtol = atof(v); break;
            case 'A': opt.atol = atof(v); break;
            default: fprintf(stderr, "stress: unknown option %s\n", f); return 2;
            }
        } else if (!dir && f[0] != '-') {
            dir = f;
        } else {
            fprintf(stderr, "usage: %s [-s SETS] [-t RUN_THREADS] [-n RUN_CALLS] [-i INSTANCES] [-p POOL] "
                            "[-m INVOKE_CALLS] [-r ROUNDS] [-R RTOL] [-A ATOL] DATADIR\n", argv[0]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "stress: no DATADIR\n");
        return 2;
    }
    for (set = 0; set < opt.sets; ++set) {
        for (k = 0; k < SG_NUM_INPUTS; ++k)
            inputs[set][k] = load(dir, "in", set, k, sg_in_bytes[k]);
        for (k = 0; k < SG_NUM_OUTPUTS; ++k)
            refs[set][k] = load(dir, "ref", set, k, sg_out_count[k] * sg_out_size[k]);
    }

    /* 1. golden results, one call at a time */
    t0 = now_s();
    ws = new_workspace();
    if (opt.instances > 0) {
        int status = sg_create(opt.pool, &model);
        if (status != 0) {
            fprintf(stderr, "stress: create with %d threads: status %d (%s)\n", opt.pool, status, sg_strerror(status));
            return 1;
        }
    }
    for (set = 0; set < opt.sets; ++set) {
        void **y = new_outputs();
        int status;
        poison_outputs(y);
        status = sg_run(inputs[set], y, ws);
        if (status != 0 || compare_reference(y, set, NULL, 0)) {
            if (status != 0)
                fprintf(stderr, "stress: golden run of set %d: status %d (%s)\n", set, status, sg_strerror(status));
            ++golden_bad;
        }
        for (k = 0; k < SG_NUM_OUTPUTS; ++k)
            golden_run[set][k] = y[k];
        free(y);
        if (!model)
            continue;
        y = new_outputs();
        poison_outputs(y);
        status = sg_invoke(model, inputs[set], y);
        if (status != 0 || compare_reference(y, set, NULL, 0)) {
            if (status != 0)
                fprintf(stderr, "stress: golden invoke of set %d: status %d (%s)\n", set, status, sg_strerror(status));
            ++golden_bad;
        }
        for (k = 0; k < SG_NUM_OUTPUTS; ++k)
            golden_invoke[set][k] = y[k];
        free(y);
    }
    sg_destroy(model);
    free(ws);
    printf("stress: golden: %d sets, %s, %.3f s\n", opt.sets, golden_bad ? "MISMATCHES" : "match ONNX Runtime",
           now_s() - t0);
    fflush(stdout);

    /* 2. every thread at once */
    total_threads = opt.run_threads + opt.instances;
    handles = (pthread_t *)calloc((size_t)total_threads + 1, sizeof *handles);
    workers = (worker *)calloc((size_t)total_threads + 1, sizeof *workers);
    if (!handles || !workers || pthread_barrier_init(&start_line, NULL, (unsigned)total_threads + 1) != 0)
        return 3;
    for (a = 0; a < total_threads; ++a) {
        workers[a].invoke = a >= opt.run_threads;
        workers[a].id = workers[a].invoke ? a - opt.run_threads : a;
        if (pthread_create(&handles[a], NULL, workers[a].invoke ? invoke_worker : run_worker, &workers[a]) != 0) {
            fprintf(stderr, "stress: cannot start thread %d\n", a);
            return 3;
        }
    }
    t0 = now_s();
    pthread_barrier_wait(&start_line);
    for (a = 0; a < total_threads; ++a)
        pthread_join(handles[a], NULL);
    for (a = 0; a < total_threads; ++a) {
        calls += workers[a].calls;
        errors += workers[a].errors;
        mismatches += workers[a].mismatches;
        differences += workers[a].differences;
    }
    printf("stress: run_threads=%d run_calls=%ld instances=%d pool=%d invoke_calls=%ld calls=%ld errors=%ld "
           "mismatches=%ld differences=%ld golden_mismatches=%d seconds=%.3f\n",
           opt.run_threads, (long)opt.run_threads * opt.run_calls, opt.instances, opt.pool,
           (long)opt.instances * opt.invoke_calls, calls, errors, mismatches, differences, golden_bad, now_s() - t0);
    pthread_barrier_destroy(&start_line);
    free(handles);
    free(workers);
    for (set = 0; set < opt.sets; ++set) {
        for (k = 0; k < SG_NUM_INPUTS; ++k)
            free(inputs[set][k]);
        for (k = 0; k < SG_NUM_OUTPUTS; ++k) {
            free(refs[set][k]);
            free(golden_run[set][k]);
            free(golden_invoke[set][k]);
        }
    }
    return (errors || mismatches || differences || golden_bad) ? 1 : 0;
}
