/* aotc runtime: a thread pool for CPU targets (POSIX threads).
 *
 * A model instance creates one pool at <name>_create and keeps it until <name>_destroy; a
 * run hands it work with aotc_parallel_for, many times per run (one per parallel loop or
 * GEMM), so a hand-off must cost microseconds, not a thread creation:
 *   - the pool has threads - 1 workers; the calling thread takes part as thread 0;
 *   - aotc_parallel_for(pool, n, fn, args) splits [0, n) into `threads` contiguous ranges
 *     (thread t gets [n*t/T, n*(t+1)/T)) and returns when every range is done;
 *   - between hand-offs a worker polls for AOTC_POOL_SPIN_NS (a millisecond, on the
 *     monotonic clock), then sleeps on a condition variable until the next one; it yields its
 *     core every AOTC_POOL_YIELD_EVERY polls, and the caller waiting for the workers yields
 *     after a short spin too, so that a machine with more busy threads than cores (several
 *     model instances, other programs) is not stalled by threads that only wait;
 *   - a worker that slept and wakes on the CPU of the thread that woke it moves to another
 *     CPU it may run on (Linux): the scheduler often places a woken thread beside its waker,
 *     and a worker that then polls beside the caller halves the pool until the kernel's load
 *     balancing separates them, milliseconds later (a 2-thread LSTM of 0.3 ms took 0.46 ms a
 *     run, as on one thread, for the first runs after every pause; aotc_pool_move_off);
 *   - a pool is used by one run at a time (one pool per model instance); a call made while
 *     the pool is busy (from inside a task) runs serially on the calling thread.
 * pool == NULL, or a pool of 1 thread, runs everything on the calling thread.
 *
 * Everything here is static, so several models can be linked into one program. The
 * synchronization uses the __atomic builtins of GCC and Clang. */
#ifndef AOTC_THREADS_H
#define AOTC_THREADS_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "aotc_support.h"        /* aotc_fpenv: workers compute as the caller does */

#ifndef AOTC_POOL_SPIN_NS
#define AOTC_POOL_SPIN_NS 1000000
#endif
#define AOTC_POOL_YIELD_EVERY 64
#define AOTC_POOL_MAX_THREADS 256

#if defined(__x86_64__) || defined(__i386__)
#define AOTC_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define AOTC_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define AOTC_CPU_RELAX() ((void)0)
#endif

#if defined(__linux__) && !defined(__cplusplus)
/* Linux's raw system calls, declared here: the generated C sources ask for POSIX alone
 * (_POSIX_C_SOURCE), which hides syscall() and the affinity calls with their cpu_set_t. */
#include <sys/syscall.h>
extern long syscall(long number, ...);
#define AOTC_POOL_PLACEMENT 1
#else
#define AOTC_POOL_PLACEMENT 0
#endif

/* One task: iterations [begin, end) of a parallel loop, run by thread `thread`. */
typedef void (*aotc_task_fn)(void *args, int64_t begin, int64_t end, int thread);

typedef struct aotc_pool aotc_pool;

typedef struct {
    aotc_pool *pool;
    int thread;
} aotc_worker;

struct aotc_pool {
    int threads;                   /* including the calling thread */
    pthread_t *handles;
    aotc_worker *workers;
    /* the job in hand */
    aotc_task_fn fn;
    void *args;
    int64_t n;
    uint64_t generation;           /* bumped for every job (and once to stop) */
    int pending;                   /* workers still running the current job */
    int sleepers;                  /* workers waiting on `wake` */
    int busy;                      /* a job is running: nested calls run serially */
    aotc_fpenv fpenv;              /* the caller's floating-point modes, which workers take for the job */
    int stop;
    int caller_cpu;                /* the CPU of the thread that last woke sleeping workers, or -1 */
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

static inline void aotc_pool_range(int64_t n, int threads, int t, int64_t *begin, int64_t *end)
{
    *begin = n * t / threads;
    *end = n * (t + 1) / threads;
}

/* Nanoseconds on the monotonic clock (needs _POSIX_C_SOURCE >= 199309L, as pthreads do). */
static inline int64_t aotc_pool_clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The CPU the calling thread runs on, or -1 where that cannot be known. */
static inline int aotc_pool_cpu(void)
{
#if AOTC_POOL_PLACEMENT && defined(SYS_getcpu)
    unsigned cpu = 0;
    if (syscall(SYS_getcpu, &cpu, (void *)0, (void *)0) == 0)
        return (int)cpu;
#endif
    return -1;
}

/* Moves the calling thread off CPU `cpu` to another CPU of its affinity mask, and gives the
 * mask back whole (the kernel moves a running thread at once when its CPU leaves the mask,
 * and does not move it back when the CPU returns). Returns 1 when it moved; 0 when it could
 * not (no other CPU allowed, more than 1024 CPUs, not Linux). */
static inline int aotc_pool_move_off(int cpu)
{
#if AOTC_POOL_PLACEMENT && defined(SYS_sched_getaffinity) && defined(SYS_sched_setaffinity)
    enum { WORDS = 1024 / (8 * sizeof(unsigned long)), BITS = 8 * sizeof(unsigned long) };
    unsigned long allowed[WORDS] = {0}, others[WORDS];
    long bytes = syscall(SYS_sched_getaffinity, (long)0, sizeof allowed, allowed), w;
    int any = 0;
    if (cpu < 0 || bytes <= 0 || (long)cpu >= bytes * 8)
        return 0;
    for (w = 0; w < WORDS; ++w) {
        others[w] = allowed[w];
        if (w == cpu / BITS)
            others[w] &= ~(1ul << (cpu % BITS));
        any |= others[w] != 0;
    }
    if (!any || syscall(SYS_sched_setaffinity, (long)0, (unsigned long)bytes, others) != 0)
        return 0;
    syscall(SYS_sched_setaffinity, (long)0, (unsigned long)bytes, allowed);
    return 1;
#else
    (void)cpu;
    return 0;
#endif
}

static inline void *aotc_pool_worker(void *p)
{
    aotc_worker *w = (aotc_worker *)p;
    aotc_pool *pool = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen;
        long spins = 0;
        int64_t idle_since = 0;
        int slept = 0;
        while ((gen = __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE)) == seen) {
            /* poll; every AOTC_POOL_YIELD_EVERY polls, yield the core and look at the clock
             * (a count of polls would last 10x longer on one CPU than on another) */
            if (++spins % AOTC_POOL_YIELD_EVERY != 0) {
                AOTC_CPU_RELAX();
                continue;
            }
            if (!idle_since)
                idle_since = aotc_pool_clock_ns();
            if (aotc_pool_clock_ns() - idle_since < AOTC_POOL_SPIN_NS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&pool->lock);
            __atomic_fetch_add(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&pool->generation, __ATOMIC_SEQ_CST) == seen)
                pthread_cond_wait(&pool->wake, &pool->lock);
            __atomic_fetch_sub(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool->lock);
            spins = 0;
            idle_since = 0;
            slept = 1;
        }
        seen = gen;
        if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE))
            return NULL;
        if (slept) {
            int cpu = aotc_pool_cpu();
            if (cpu >= 0 && cpu == __atomic_load_n(&pool->caller_cpu, __ATOMIC_RELAXED))
                aotc_pool_move_off(cpu);
        }
        {
            int64_t begin, end;
            aotc_pool_range(pool->n, pool->threads, w->thread, &begin, &end);
            if (aotc_fpenv_get() != pool->fpenv)
                aotc_fpenv_restore(pool->fpenv);
            if (begin < end)
                pool->fn(pool->args, begin, end, w->thread);
        }
        __atomic_fetch_sub(&pool->pending, 1, __ATOMIC_RELEASE);
    }
}

static inline void aotc_pool_destroy(aotc_pool *pool);

/* A pool of `threads` threads (the caller counts as one): NULL when threads <= 1, or when
 * the system refuses memory or a thread (*status says which). */
static inline aotc_pool *aotc_pool_create(int threads, int *status)
{
    aotc_pool *pool;
    int t;
    *status = 0;
    if (threads > AOTC_POOL_MAX_THREADS)
        threads = AOTC_POOL_MAX_THREADS;
    if (threads <= 1)
        return NULL;
    pool = (aotc_pool *)calloc(1, sizeof *pool);
    if (!pool) {
        *status = 1;
        return NULL;
    }
    pool->threads = 1;
    pool->caller_cpu = -1;
    pool->handles = (pthread_t *)calloc((size_t)threads, sizeof *pool->handles);
    pool->workers = (aotc_worker *)calloc((size_t)threads, sizeof *pool->workers);
    if (!pool->handles || !pool->workers || pthread_mutex_init(&pool->lock, NULL) != 0) {
        free(pool->handles);
        free(pool->workers);
        free(pool);
        *status = 1;
        return NULL;
    }
    pthread_cond_init(&pool->wake, NULL);
    for (t = 1; t < threads; ++t) {
        pool->workers[t].pool = pool;
        pool->workers[t].thread = t;
        if (pthread_create(&pool->handles[t], NULL, aotc_pool_worker, &pool->workers[t]) != 0) {
            aotc_pool_destroy(pool);
            *status = 2;
            return NULL;
        }
        pool->threads = t + 1;
    }
    return pool;
}

static inline void aotc_pool_destroy(aotc_pool *pool)
{
    int t;
    if (!pool)
        return;
    __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&pool->lock);
    __atomic_fetch_add(&pool->generation, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (t = 1; t < pool->threads; ++t)
        pthread_join(pool->handles[t], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->handles);
    free(pool->workers);
    free(pool);
}

static inline int aotc_pool_threads(const aotc_pool *pool)
{
    return pool ? pool->threads : 1;
}

/* fn(args, begin, end, thread) over [0, n), split among the pool's threads; returns when all
 * of it is done. */
static inline void aotc_parallel_for(aotc_pool *pool, int64_t n, aotc_task_fn fn, void *args)
{
    int64_t begin, end;
    if (n <= 0)
        return;
    if (!pool || pool->threads <= 1 || n == 1 || __atomic_load_n(&pool->busy, __ATOMIC_RELAXED)) {
        fn(args, 0, n, 0);
        return;
    }
    __atomic_store_n(&pool->busy, 1, __ATOMIC_RELAXED);
    pool->fn = fn;
    pool->args = args;
    pool->n = n;
    pool->fpenv = aotc_fpenv_get();
    __atomic_store_n(&pool->pending, pool->threads - 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pool->generation, 1, __ATOMIC_SEQ_CST);      /* publishes the job */
    if (__atomic_load_n(&pool->sleepers, __ATOMIC_SEQ_CST) > 0) {
        __atomic_store_n(&pool->caller_cpu, aotc_pool_cpu(), __ATOMIC_RELAXED);
        pthread_mutex_lock(&pool->lock);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }
    aotc_pool_range(n, pool->threads, 0, &begin, &end);
    if (begin < end)
        fn(args, begin, end, 0);
    {
        long spins = 0;
        while (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) > 0) {
            if (++spins < AOTC_POOL_YIELD_EVERY)
                AOTC_CPU_RELAX();
            else
                sched_yield();
        }
    }
    __atomic_store_n(&pool->busy, 0, __ATOMIC_RELAXED);
}

/* A task's failure: the first nonzero status wins. */
static inline void aotc_set_status(int *status, int value)
{
    int expected = 0;
    __atomic_compare_exchange_n(status, &expected, value, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The number of online processors (for "all cores"), at least 1. */
static inline int aotc_cpu_count(void)
{
#ifdef _SC_NPROCESSORS_ONLN
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
#else
    return 1;
#endif
}

#endif
