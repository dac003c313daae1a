/* A CPU emulation of the CUDA runtime and device language, as much of them as aotc's cuda
 * artifacts use, so that tests run a cuda artifact's own kernels and host code on a machine
 * without a GPU (tests/test_cuda_emulated.py). Built with g++ -std=c++20 in place of nvcc, after
 * the test rewrites each `kernel<<<grid, block, shmem, stream>>>(args)` as
 * `aotc_emu::launch(kernel, grid, block, shmem, stream)(args)`.
 *
 * Device code: a block's threads are fibers on the calling thread, run one at a time until
 * each reaches a barrier (__syncthreads, or __syncwarp / a shuffle, which wait for their warp
 * alone), so `__shared__` arrays are static locals, shared by the block running; blocks run one
 * after another. A barrier some threads never reach is a deadlock the emulator reports. A fiber
 * starts once per launch (ucontext, on a stack it keeps) and runs thread after thread of block
 * after block; switches are _setjmp / _longjmp, which unlike swapcontext make no system call
 * (the signal mask): a block's barriers cost two switches per thread each. (Not across
 * launches: the launch may be another library's, whose copy of this code the fiber is not in.)
 * Host code: memory is host memory, a stream runs its work at once unless a graph capture
 * records it, a graph launch replays the recording, events time nothing. The device is
 * compute capability 9.0 (AOTC_EMU_CC=80 makes it 8.0; AOTC_EMU_DEVICES=0 removes it).
 */
#ifndef AOTC_CUDA_EMU_RUNTIME_H
#define AOTC_CUDA_EMU_RUNTIME_H

#include <setjmp.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101, cudaErrorNoKernelImageForDevice = 209,
    cudaErrorUnsupportedPtxVersion = 222, cudaErrorSystemDriverMismatch = 803,
    cudaErrorCompatNotSupportedOnDevice = 804, cudaErrorLaunchFailure = 719, cudaErrorGraphExecUpdateFailure = 910
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1 };
#define cudaStreamNonBlocking 0x01

namespace aotc_emu {

using Work = std::function<void()>;
struct Stream { std::vector<Work> *capture = nullptr; };
struct Graph { std::vector<Work> work; };
struct Event { int unused; };

inline cudaError_t last_error = cudaSuccess;

/* ------------------------------------------------------------------ device threads */
enum { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
struct Fiber {
    jmp_buf at;                 /* where it waits (a barrier, or done with its thread) */
    int state;
    dim3 tid;
    char *stack;                /* null until it first runs */
    bool started;               /* in this launch: else it starts afresh */
};
constexpr size_t STACK_BYTES = 256 * 1024;
inline std::vector<Fiber> fibers;
inline jmp_buf scheduler;
inline int current = -1;
inline const Work *body = nullptr;
inline uint64_t exchange[1024];          /* a shuffle's values, by thread */

/* From the running fiber back to run_block, to be resumed where it left. */
inline void yield_to_scheduler()
{
    if (!_setjmp(fibers[current].at))
        _longjmp(scheduler, 1);
}

/* A fiber's whole life: one thread of a block, then (resumed by the next block) another. */
inline void fiber_main()
{
    for (;;) {
        (*body)();
        fibers[current].state = DONE;
        yield_to_scheduler();
    }
}

/* Into fiber i until it waits or is done: the first time in a launch from the start of
 * fiber_main, on its stack. */
inline void resume(int i)
{
    Fiber &f = fibers[i];
    if (_setjmp(scheduler))
        return;
    if (f.started)
        _longjmp(f.at, 1);
    f.started = true;
    if (!f.stack)
        f.stack = static_cast<char *>(std::malloc(STACK_BYTES));
    static ucontext_t start;
    getcontext(&start);
    start.uc_stack.ss_sp = f.stack;
    start.uc_stack.ss_size = STACK_BYTES;
    start.uc_link = nullptr;
    makecontext(&start, fiber_main, 0);
    setcontext(&start);
}

inline void wait(int state)
{
    if (current < 0) {
        std::fprintf(stderr, "aotc cuda emulation: a barrier outside a kernel\n");
        std::abort();
    }
    fibers[current].state = state;
    yield_to_scheduler();
}

}  // namespace aotc_emu

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace aotc_emu {

/* Runs one block: every thread until it is done, releasing a warp when all its live threads
 * wait at a warp barrier and the block when all its live threads wait at the block barrier. */
inline void run_block(int n)
{
    if ((int)fibers.size() < n)
        fibers.resize(n, Fiber{});       /* (a jmp_buf copied still points into its own stack) */
    for (int i = 0; i < n; ++i) {
        Fiber &f = fibers[i];
        f.state = RUNNING;
        f.tid = dim3(i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y));
    }
    for (;;) {
        for (int i = 0; i < n; ++i) {
            if (fibers[i].state != RUNNING)
                continue;
            current = i;
            threadIdx = fibers[i].tid;
            resume(i);
        }
        current = -1;
        bool released = false, live = false, all_at_block = true;
        for (int w = 0; w < n; w += 32) {
            bool warp_waits = false, warp_ready = true;
            for (int i = w; i < n && i < w + 32; ++i) {
                warp_waits |= fibers[i].state == AT_WARP_BARRIER;
                warp_ready &= fibers[i].state == AT_WARP_BARRIER || fibers[i].state == DONE;
            }
            if (warp_waits && warp_ready) {
                for (int i = w; i < n && i < w + 32; ++i)
                    if (fibers[i].state == AT_WARP_BARRIER)
                        fibers[i].state = RUNNING;
                released = true;
            }
        }
        for (int i = 0; i < n; ++i) {
            live |= fibers[i].state != DONE;
            all_at_block &= fibers[i].state == AT_BLOCK_BARRIER || fibers[i].state == DONE;
        }
        if (!live)
            return;
        if (released)
            continue;
        if (all_at_block) {
            for (int i = 0; i < n; ++i)
                if (fibers[i].state == AT_BLOCK_BARRIER)
                    fibers[i].state = RUNNING;
            continue;
        }
        std::fprintf(stderr, "aotc cuda emulation: deadlock in block (%u, %u, %u): threads wait at different "
                     "barriers\n", blockIdx.x, blockIdx.y, blockIdx.z);
        std::abort();
    }
}

inline void run_grid(dim3 grid, dim3 block, const Work &kernel)
{
    int n = (int)(block.x * block.y * block.z);
    if (n < 1 || n > 1024 || grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidValue;
        return;
    }
    gridDim = grid;
    blockDim = block;
    body = &kernel;
    for (Fiber &f : fibers)
        f.started = false;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = dim3(x, y, z);
                run_block(n);
            }
    body = nullptr;
}

inline void submit(Stream *s, Work w)
{
    if (s && s->capture)
        s->capture->push_back(std::move(w));
    else
        w();
}

template <class... Params>
struct Launch {
    void (*kernel)(Params...);
    dim3 grid, block;
    Stream *stream;
    template <class... Args>
    void operator()(Args... args) const
    {
        auto k = kernel;
        dim3 g = grid, b = block;
        std::function<void()> call = [=] { k(args...); };
        submit(stream, [=] { run_grid(g, b, call); });
    }
};

template <class... Params>
Launch<Params...> launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shmem, Stream *stream)
{
    (void)shmem;
    return Launch<Params...>{kernel, grid, block, stream};
}

inline int devices()
{
    const char *e = std::getenv("AOTC_EMU_DEVICES");
    return e ? std::atoi(e) : 1;
}

inline int compute_capability()
{
    const char *e = std::getenv("AOTC_EMU_CC");
    return e ? std::atoi(e) : 90;
}

}  // namespace aotc_emu

typedef aotc_emu::Stream *cudaStream_t;
typedef aotc_emu::Graph *cudaGraph_t;
typedef aotc_emu::Graph *cudaGraphExec_t;
typedef aotc_emu::Event *cudaEvent_t;

/* ------------------------------------------------------------------ device functions */
inline void __syncthreads() { aotc_emu::wait(aotc_emu::AT_BLOCK_BARRIER); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; aotc_emu::wait(aotc_emu::AT_WARP_BARRIER); }

template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    (void)mask;
    int me = aotc_emu::current;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    aotc_emu::exchange[me] = bits;
    __syncwarp();
    int lane = me % 32, base = lane / width * width;          /* shuffles stay within `width` lanes */
    int other = me - lane + base + ((lane - base) ^ lane_mask) % width;
    bits = aotc_emu::exchange[other];
    __syncwarp();
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

inline int atomicCAS(int *address, int compare, int val)
{
    int old = *address;
    if (old == compare)
        *address = val;
    return old;
}

/* ------------------------------------------------------------------ runtime API */
inline const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
inline cudaError_t cudaGetLastError()
{
    cudaError_t e = aotc_emu::last_error;
    aotc_emu::last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = aotc_emu::devices();
    return *n ? cudaSuccess : cudaErrorNoDevice;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int device)
{
    if (device < 0 || device >= aotc_emu::devices())
        return cudaErrorInvalidDevice;
    *v = attr == cudaDevAttrComputeCapabilityMajor ? aotc_emu::compute_capability() / 10
                                                   : aotc_emu::compute_capability() % 10;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device)
{
    return device >= 0 && device < aotc_emu::devices() ? cudaSuccess : cudaErrorInvalidDevice;
}
inline cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    if (*p)
        std::memset(*p, 0xA5, n);            /* not zero: kernels must not rely on zeroed memory */
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T>
inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc(reinterpret_cast<void **>(p), n); }
inline cudaError_t cudaFree(void *p)
{
    std::free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind)
{
    std::memcpy(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t s)
{
    aotc_emu::submit(s, [=] { std::memcpy(dst, src, n); });
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t s)
{
    if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
    aotc_emu::submit(s, [=] {
        for (size_t r = 0; r < height; ++r)
            std::memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    });
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s)
{
    aotc_emu::submit(s, [=] { std::memset(dst, v, n); });
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    *s = new aotc_emu::Stream();
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode)
{
    s->capture = new std::vector<aotc_emu::Work>();
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    *g = new aotc_emu::Graph{std::move(*s->capture)};
    delete s->capture;
    s->capture = nullptr;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long)
{
    *exec = new aotc_emu::Graph(*g);
    return cudaSuccess;
}
struct cudaGraphExecUpdateResultInfo { int result; };
/* as CUDA's: the instantiated graph takes the new one's launches (their grids and arguments)
   when both have the same launches in the same order; else cudaErrorGraphExecUpdateFailure */
inline cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info)
{
    if (exec->work.size() != g->work.size()) {
        if (info) info->result = 1;
        return cudaErrorGraphExecUpdateFailure;
    }
    exec->work = g->work;
    if (info) info->result = 0;
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    for (auto &w : exec->work)
        aotc_emu::submit(s, w);
    return aotc_emu::last_error;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g)
{
    delete g;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new aotc_emu::Event();
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t)
{
    *ms = 0.0f;
    return cudaSuccess;
}

#endif
