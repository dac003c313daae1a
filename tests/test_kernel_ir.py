"""The kernel IR on its own: one hand-built kernel printed by the C99 and the OpenCL C printers,
compiled and run, against numpy. Storage dtype apart from compute dtype (float16 and
bfloat16 stored, float32 computed, round-to-nearest-even on the store), what each language
refuses to print, and the accumulation-precision pass."""
from __future__ import annotations

import ctypes
import subprocess

import ml_dtypes
import numpy as np
import pytest

from aotc.codegen.c.printer import CPrinter
from aotc.codegen.cstyle import PrintError
from aotc.codegen.opencl.printer import OpenCLPrinter
from aotc.kernel.ir import (F32, F64, SPATIAL, Barrier, Buffer, Builder, GpuIndex, Kernel, Load, call, const,
                            walk_stmts)
from aotc.kernel.retype import widen_accumulators
from aotc.paths import RUNTIME_DIR
from aotc.program.ir import Slot

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
N = 257


def _half_kernel(storage) -> Kernel:
    """y[i] = x[i] * 1.5 + tanh(x[i]) stored as `storage`; z[i] the same in float32."""
    b = Builder()
    x = Buffer("x", storage, (N,), "in", compute=F32)
    y = Buffer("y", storage, (N,), "out", compute=F32)
    z = Buffer("z", F32, (N,), "out")
    with b.loop(N, "i", role=SPATIAL) as i:
        v = b.local("v", Load(x, i) * const(1.5) + call("tanh", Load(x, i)))
        b.store(y, i, v)
        b.store(z, i, v)
    return Kernel("k000_half", f"{storage.name} storage, float32 compute", [x, y, z], b.body)


def _inputs(storage):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(N) * 300).astype(np.float32)
    x[:4] = [np.inf, -np.inf, 1e-6, 65504.0]
    xs = x.astype(storage)
    want = xs.astype(np.float32) * np.float32(1.5) + np.tanh(xs.astype(np.float32))
    return xs, want


@pytest.mark.parametrize("storage", [F16, BF16], ids=["float16", "bfloat16"])
def test_half_storage_in_c(storage, tmp_path):
    k = _half_kernel(storage)
    src = "\n".join(["#define _POSIX_C_SOURCE 200809L", "#include <math.h>", "#include <stdint.h>",
                     '#include "aotc_support.h"', '#include "aotc_math.h"', "",
                     CPrinter().kernel(k), "",
                     "void run(const uint16_t *x, uint16_t *y, float *z) { k000_half(x, y, z); }"])
    assert f"aotc_{'half' if storage == F16 else 'bf16'}_to_float(x[i])" in src
    (tmp_path / "k.c").write_text(src)
    lib = tmp_path / "libk.so"
    subprocess.run(["cc", "-std=c99", "-O2", "-Wall", "-Werror", "-fPIC", "-shared", f"-I{RUNTIME_DIR}",
                    str(tmp_path / "k.c"), "-o", str(lib), "-lm"], check=True)
    fn = ctypes.CDLL(str(lib)).run
    xs, want = _inputs(storage)
    y = np.zeros(N, storage)
    z = np.zeros(N, np.float32)
    fn(xs.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), z.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_allclose(z, want, rtol=1e-6)
    # the store rounds to nearest even exactly as numpy's conversion does
    assert np.array_equal(y.view(np.uint16), want.astype(storage).view(np.uint16))


OPENCL_HARNESS = r"""
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    enum { N = %(n)d };
    cl_platform_id p; cl_device_id d; cl_int e; size_t g = N, len;
    static unsigned short x[N], y[N]; static float z[N];
    FILE *f = fopen(argv[1], "rb"); char *src = malloc(1 << 20); len = fread(src, 1, (1 << 20) - 1, f); src[len] = 0;
    fclose(f);
    f = fopen(argv[2], "rb"); if (fread(x, 2, N, f) != N) return 9; fclose(f);
    if (clGetPlatformIDs(1, &p, NULL) || clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL)) return 2;
    cl_context c = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
    cl_command_queue q = clCreateCommandQueue(c, d, 0, &e);
    cl_program pr = clCreateProgramWithSource(c, 1, (const char **)&src, NULL, &e);
    if (clBuildProgram(pr, 1, &d, NULL, NULL, NULL)) return 3;
    cl_kernel k = clCreateKernel(pr, "k000_half", &e);
    cl_mem bx = clCreateBuffer(c, CL_MEM_COPY_HOST_PTR, sizeof x, x, &e);
    cl_mem by = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof y, NULL, &e);
    cl_mem bz = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof z, NULL, &e);
    clSetKernelArg(k, 0, sizeof bx, &bx); clSetKernelArg(k, 1, sizeof by, &by); clSetKernelArg(k, 2, sizeof bz, &bz);
    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL)) return 4;
    clEnqueueReadBuffer(q, by, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL);
    clEnqueueReadBuffer(q, bz, CL_TRUE, 0, sizeof z, z, 0, NULL, NULL);
    f = fopen(argv[3], "wb"); fwrite(y, 2, N, f); fwrite(z, 4, N, f); fclose(f);
    return 0;
}
"""


def test_half_storage_in_opencl(tmp_path):
    from tests.test_opencl import _opencl_missing
    if _opencl_missing():
        pytest.skip(_opencl_missing())
    k = _half_kernel(F16)
    # the GPU form of the loop: one work-item per element
    loop = k.body[0]
    loop.kind, loop.axis = "bound", "global.0"
    printer = OpenCLPrinter()
    printer.slots = {"x": Slot("input", "x"), "y": Slot("output", "y"), "z": Slot("output", "z")}
    cl = printer.kernel(k)
    assert "vload_half(i, x)" in cl and "vstore_half(v, i, y);" in cl and "__global const half *restrict x" in cl
    (tmp_path / "k.cl").write_text(cl)
    (tmp_path / "h.c").write_text(OPENCL_HARNESS % {"n": N})
    subprocess.run(["cc", "-std=c99", str(tmp_path / "h.c"), "-o", str(tmp_path / "h"), "-lOpenCL"], check=True)
    xs, want = _inputs(F16)
    xs.tofile(tmp_path / "x.bin")
    subprocess.run([str(tmp_path / "h"), str(tmp_path / "k.cl"), str(tmp_path / "x.bin"), str(tmp_path / "o.bin")],
                   check=True)
    raw = (tmp_path / "o.bin").read_bytes()
    y = np.frombuffer(raw[:2 * N], np.float16)
    z = np.frombuffer(raw[2 * N:], np.float32)
    np.testing.assert_allclose(z, want, rtol=2e-6)
    assert np.array_equal(y.view(np.uint16), want.astype(F16).view(np.uint16))


def test_each_language_refuses_what_it_cannot_express():
    b = Builder()
    buf = Buffer("y", F32, (4,), "out")
    b.emit(Barrier("local"))
    b.store(buf, GpuIndex("local.0"), const(1.0))
    k = Kernel("k", "gpu only", [buf], b.body)
    with pytest.raises(PrintError, match="barrier"):
        CPrinter().kernel(k)
    printer = OpenCLPrinter()
    printer.slots = {"y": Slot("output", "y")}
    text = printer.kernel(k)
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in text and "y[(long)get_local_id(0)] = 1.0f;" in text


def test_accumulators_widen_and_what_derives_from_them_follows():
    """A float32 sum widened to float64: the mean computed from it is float64 too, a local the
    op pinned stays float32, and the store converts back."""
    b = Builder()
    x = Buffer("x", F32, (8,), "in")
    y = Buffer("y", F32, (8,), "out")
    s = b.accumulator("sum", const(0.0))
    with b.loop(8, "j", role="reduction") as j:
        b.assign(s, s + Load(x, j))
    mean = b.local("mean", s / const(8.0))
    inv = b.local("inv", const(1.0) / s, dtype=F32)
    with b.loop(8, "j", role=SPATIAL) as j:
        b.store(y, j, (Load(x, j) - mean) * inv)
    wide = widen_accumulators(b.body, F32, F64)
    decls = {d.var.name: d.var.dtype for d in walk_stmts(wide) if hasattr(d, "init")}
    assert decls == {"sum": F64, "mean": F64, "inv": F32}
    text = CPrinter().kernel(Kernel("k", "", [x, y], wide))
    assert "double sum = 0.0;" in text and "double mean = sum / 8.0f;" in text and "float inv = (float)(1.0f / sum);" in text
    assert widen_accumulators(b.body, F32, F32) is b.body


def test_per_thread_copies_start_on_their_own_blocks():
    """A per-thread scratch's copies are whole blocks apart (the target's [threads]
    scratch_block: a page, so that no two threads write one cache line or one page), and the
    workspace holds them so."""
    import numpy as np
    from aotc.kernel.ir import F32, I64, Buffer
    from aotc.kernel.ir import scratch_bytes
    from aotc.targets import load_target
    block = load_target("c").threads.scratch_block
    assert block == 4096
    row = Buffer("row", F32, (28,), "scratch", per_thread=True, block=block)
    assert row.thread_stride == 1024 and scratch_bytes(row, 2) == 2 * 4096
    taps = Buffer("tap", I64, (3,), "scratch", per_thread=True, block=block)
    assert taps.thread_stride == 512 and scratch_bytes(taps, 3) == 3 * 4096
    whole = Buffer("w", F32, (1024,), "scratch", per_thread=True, block=block)
    assert whole.thread_stride == 1024
    more = Buffer("m", F32, (1025,), "scratch", per_thread=True, block=block)
    assert more.thread_stride == 2048
    shared = Buffer("s", F32, (28,), "scratch")
    assert scratch_bytes(shared, 2) == 28 * 4
    assert np.dtype(row.dtype).itemsize * row.thread_stride % block == 0
    assert Buffer("wide", F32, (28,), "scratch", per_thread=True, block=64).thread_stride == 32


# ----------------------------------------------------------------------------- the rewriter
def test_rewriter_walks_every_kind_by_its_fields():
    """One traversal for every statement and expression kind (kernel/ir.py Rewriter): a
    statement kind defined here, with an expression and a statement list of its own, is
    walked, mapped and has its buffers swapped with no traversal code written for it; so are
    the kinds hand-written walks used to skip or refuse (Mma, CallStmt)."""
    from dataclasses import dataclass, field

    from aotc.kernel.ir import (I64, MMA_C, BufPtr, CallStmt, Mma, Stmt, Store, Var, evaluate, map_stmts,
                                replace_buffers, walk_buffers)
    from aotc.schedule.gpu import _rebase

    @dataclass(eq=False)
    class Repeat(Stmt):                       # a kind the IR does not know
        times: object
        body: list = field(default_factory=list)

    x = Buffer("x", F32, (8,), "in")
    y = Buffer("y", F32, (8,), "out")
    frag = Buffer("frag", F32, (2,), "local", space=MMA_C)
    i, n = Var("i"), Var("n")
    store = Store(y, i, Load(x, i))
    body = [Repeat(n + 1, [store]),
            Mma("zero", frag, at=i),
            CallStmt("aotc_copy", [BufPtr(x, i), y])]
    assert [type(s).__name__ for s in walk_stmts(body)] == ["Repeat", "Store", "Mma", "CallStmt"]

    mapped = map_stmts(body, lambda e: const(3) if isinstance(e, Var) and e.name == "i" else e)
    assert mapped[0].body[0].index.value == 3                    # inside the new kind's own list
    assert mapped[1].at.value == 3                               # Mma (map_stmts once passed it through)
    assert mapped[2].args[0].offset.value == 3
    assert mapped[0].times is body[0].times                      # untouched subtrees are shared
    assert body[0].body[0].index is i                            # and nothing changed in place

    z = Buffer("z", F32, (8,), "in")
    swapped = replace_buffers(body, {x: z})
    assert {b.name for b in walk_buffers(swapped)} == {"z", "y", "frag"}
    assert replace_buffers(body, {}) is body                     # nothing to change: the same list

    # the GPU schedule's rebase of a buffer into a bigger one (it refused a CallStmt before)
    big = Buffer("big", F32, (64,), "scratch")
    rebased = _rebase(body, x, big, const(16, I64))
    load, ptr = rebased[0].body[0].value, rebased[2].args[0]
    assert load.buf is big and evaluate(load.index, {"i": 2}) == 18
    assert ptr.buf is big and evaluate(ptr.offset, {"i": 2}) == 18
    assert rebased[0].body[0].buf is y and rebased[2].args[1] is y
