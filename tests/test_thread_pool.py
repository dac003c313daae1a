"""The thread pool's placement (runtime/aotc_threads.h): a worker that slept and wakes on the
CPU of the thread that woke it moves to another one. Linux often places a woken thread beside
its waker; a worker polling beside the caller made a 2-thread run as slow as a 1-thread one for
the first milliseconds after every pause (the LSTM of the zoo: 0.46 ms a run against 0.29)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from aotc.paths import RUNTIME_DIR

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread placement is Linux's")

PROGRAM = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "aotc_threads.h"

static int cpus[2];

static void where(void *args, int64_t begin, int64_t end, int thread)
{
    (void)args; (void)begin; (void)end;
    cpus[thread] = aotc_pool_cpu();
}

static void pause_ms(int ms)
{
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
    int status, i, apart = 0, wakes = 20, before, after, moved;
    aotc_pool *pool;
    /* 1. moving off a CPU: the thread is elsewhere after, its affinity whole again */
    unsigned long mask0[16] = {0}, mask1[16] = {0};
    long b0 = syscall(SYS_sched_getaffinity, (long)0, sizeof mask0, mask0);
    before = aotc_pool_cpu();
    moved = aotc_pool_move_off(before);
    after = aotc_pool_cpu();
    long b1 = syscall(SYS_sched_getaffinity, (long)0, sizeof mask1, mask1);
    printf("move %d %d %d %d\n", before, after, moved, b0 == b1 && memcmp(mask0, mask1, sizeof mask0) == 0);
    /* 2. a pool's worker woken after a pause runs on another CPU than the caller */
    pool = aotc_pool_create(2, &status);
    if (!pool)
        return 1;
    for (i = 0; i < wakes; ++i) {
        pause_ms(20);                    /* the worker polls for 1 ms, then sleeps */
        cpus[0] = cpus[1] = -2;
        aotc_parallel_for(pool, 2, where, NULL);
        apart += cpus[0] >= 0 && cpus[1] >= 0 && cpus[0] != cpus[1];
    }
    printf("apart %d of %d\n", apart, wakes);
    aotc_pool_destroy(pool);
    (void)argc; (void)argv;
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("pool")
    (d / "p.c").write_text(PROGRAM)
    subprocess.run(["gcc", "-O2", "-std=c11", "-Wall", "-Werror", "-I", str(RUNTIME_DIR), str(d / "p.c"),
                    "-o", str(d / "p"), "-lpthread"], check=True)
    return d / "p"


def _cpus_allowed() -> int:
    return len(os.sched_getaffinity(0))


def _run(program, cpus=None) -> dict[str, list[int]]:
    cmd = [str(program)] if cpus is None else ["taskset", "-c", ",".join(map(str, cpus)), str(program)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {line.split()[0]: [int(x) for x in line.split()[1:] if x.isdigit()] for line in out.splitlines()}


@pytest.mark.skipif(_cpus_allowed() < 2, reason="needs two CPUs to move between")
def test_a_thread_moves_off_a_cpu_and_keeps_its_affinity(program):
    before, after, moved, same_mask = _run(program)["move"]
    assert moved == 1 and same_mask == 1
    assert before >= 0 and after >= 0 and after != before


def test_on_one_cpu_there_is_nowhere_to_move(program):
    cpu = sorted(os.sched_getaffinity(0))[0]
    before, after, moved, same_mask = _run(program, [cpu])["move"]
    assert (before, after, moved, same_mask) == (cpu, cpu, 0, 1)


@pytest.mark.skipif(_cpus_allowed() < 2, reason="needs two CPUs")
def test_a_woken_worker_does_not_share_the_callers_cpu(program):
    # the process on two CPUs: the kernel's choice is then between exactly the caller's CPU and
    # the other one. Without the move, a woken worker shared the caller's CPU in 20 of 20 wakes
    # on a 2-core VM; a loaded machine may still bring them together now and then.
    apart, wakes = _run(program, sorted(os.sched_getaffinity(0))[:2])["apart"]
    assert apart >= wakes - 3, f"the worker shared the caller's CPU in {wakes - apart} of {wakes} wakes"
