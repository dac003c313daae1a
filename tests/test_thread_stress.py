"""A slice of `make stress` (tools/stress.py): one artifact driven by 8 threads calling
<name>_run (a workspace each) and by 4 model instances (a 2-thread pool each) at once, every
result compared with ONNX Runtime and with the same call made alone, built with
ThreadSanitizer. Plus checks that the harness does catch a planted race and a wrong result,
so that a clean run means something."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tools import stress

TSAN_WHY, _ = stress.tsan_status()
needs_tsan = pytest.mark.skipif(TSAN_WHY is not None, reason=f"ThreadSanitizer cannot run here: {TSAN_WHY}")


@needs_tsan
@pytest.mark.parametrize("model", ["mlp", "lenet5"])
def test_threads_and_instances_under_tsan_match_onnx_runtime(model, tmp_path):
    (r,) = stress.stress_model(model, ["tsan"], tmp_path, calls=1000)
    assert r.passed, r.detail
    s = r.stats
    assert r.calls >= 990 and s["run_threads"] == 8 and s["instances"] == 4 and s["pool"] == 2
    assert s["mismatches"] == s["differences"] == s["errors"] == s["golden_mismatches"] == 0
    # the all-parallel schedule sends the model's GEMMs / loops through the pool
    src = (tmp_path / model / "out" / f"stress_{model}.c").read_text()
    assert "aotc_sgemm(pool" in src or "aotc_parallel_for(pool" in src


# ------------------------------------------------------------------------------------------ the harness itself
# A fake artifact with the aotc contract: y = 2 * x over N floats, through _run (a workspace)
# and through create / invoke on a real aotc thread pool (runtime/aotc_threads.h). PLANT picks
# the bug: 0 none, 1 _run stages x in a static buffer shared by every caller (a race between
# callers), 2 the pool's tasks bump a counter in the instance without atomics (a race inside
# one invoke), 3 a wrong result for inputs whose first element is positive (no race).
FAKE_H = r"""
#include "aotc_runtime.h"
#define BUG_WORKSPACE_BYTES ((size_t)(%(n)d * 4))
#define BUG_WORKSPACE_ALIGN 64
typedef struct { const float *x; } bug_inputs;
typedef struct { float *y; } bug_outputs;
typedef struct bug_model bug_model;
int bug_run(const bug_inputs *in, bug_outputs *out, void *workspace);
const char *bug_strerror(int status);
int bug_create_with_options(const char *weights_path, const aotc_options *options, bug_model **model);
int bug_invoke(bug_model *model, const bug_inputs *in, bug_outputs *out);
int bug_threads(const bug_model *model);
void bug_destroy(bug_model *model);
"""

FAKE_C = r"""
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdlib.h>
#include "aotc_threads.h"
#include "bug.h"
#define N %(n)d
#define PLANT %(plant)d
static float shared_stage[N];
struct bug_model { aotc_pool *pool; long tasks; };
typedef struct { const float *x; float *y; bug_model *m; } job;

int bug_run(const bug_inputs *in, bug_outputs *out, void *workspace)
{
    float *stage = PLANT == 1 ? shared_stage : (float *)workspace;
    int i;
    for (i = 0; i < N; ++i)
        stage[i] = in->x[i];
    if (PLANT == 1)
        sched_yield();                       /* let another caller overwrite the stage */
    for (i = 0; i < N; ++i)
        out->y[i] = 2.0f * stage[i] + (PLANT == 3 && in->x[0] > 0.0f ? 1e-2f : 0.0f);
    return 0;
}

static void task(void *args, int64_t begin, int64_t end, int thread)
{
    job *j = (job *)args;
    int64_t i;
    (void)thread;
    for (i = begin; i < end; ++i)
        j->y[i] = 2.0f * j->x[i];
    if (PLANT == 2)
        j->m->tasks++;
}

int bug_create_with_options(const char *weights_path, const aotc_options *options, bug_model **model)
{
    int status;
    bug_model *m = (bug_model *)calloc(1, sizeof *m);
    (void)weights_path;
    if (!m) return AOTC_ERR_OUT_OF_MEMORY;
    m->pool = aotc_pool_create(options ? options->threads : 2, &status);
    if (status) { free(m); return AOTC_ERR_THREADS; }
    *model = m;
    return 0;
}

int bug_invoke(bug_model *model, const bug_inputs *in, bug_outputs *out)
{
    job j;
    j.x = in->x;
    j.y = out->y;
    j.m = model;
    aotc_parallel_for(model->pool, N, task, &j);
    return 0;
}

int bug_threads(const bug_model *model) { return aotc_pool_threads(model->pool); }
void bug_destroy(bug_model *model) { if (model) { aotc_pool_destroy(model->pool); free(model); } }
const char *bug_strerror(int status) { (void)status; return "?"; }
"""

N = 4096


def _fake(tmp_path, plant: int, tsan: bool, plan: stress.Plan):
    art = tmp_path / "art"
    art.mkdir()
    (art / "bug.h").write_text(FAKE_H % {"n": N})
    (art / "bug.c").write_text(FAKE_C % {"n": N, "plant": plant})
    for h in ("aotc_runtime.h", "aotc_support.h", "aotc_threads.h"):
        (art / h).write_text((stress.ROOT / "runtime" / h).read_text())
    manifest = {"header": "bug.h", "sources": ["bug.c", "bug.h"],
                "inputs": [{"name": "x", "c_name": "x", "dtype": "float32", "shape": [N]}],
                "outputs": [{"name": "y", "c_name": "y", "dtype": "float32", "shape": [N]}]}
    (art / "manifest.json").write_text(json.dumps(manifest))
    rng = np.random.default_rng(7)
    sets = []
    for s in range(plan.sets):
        x = rng.standard_normal(N).astype(np.float32)
        x[0] = 1.0 if s % 2 else -1.0                 # half the sets trip PLANT 3
        sets.append(({"x": x}, [2 * x]))
    stress.write_sets(tmp_path / "data", manifest, sets)
    exe = tmp_path / ("h_tsan" if tsan else "h_plain")
    ok, log = stress.build_harness(art, "bug", manifest, exe, tsan=tsan)
    assert ok, log
    return stress.run_harness(exe, tmp_path / "data", plan, 1e-6, 1e-6, tsan, timeout=300)


SMALL = stress.Plan(run_threads=8, run_calls=40, instances=2, pool=2, invoke_calls=40, rounds=2, sets=4)


@needs_tsan
def test_harness_is_quiet_on_a_correct_artifact(tmp_path):
    rc, text, stats, reports = _fake(tmp_path, 0, True, SMALL)
    assert rc == 0 and not reports, text
    assert stats["calls"] == 8 * 40 + 2 * 40 and stats["mismatches"] == stats["differences"] == 0, text


@needs_tsan
def test_tsan_reports_callers_sharing_a_static_buffer(tmp_path):
    rc, text, _, _ = _fake(tmp_path, 1, True, SMALL)
    assert rc != 0 and "WARNING: ThreadSanitizer: data race" in text and "bug_run" in text, text


@needs_tsan
def test_tsan_reports_a_race_between_the_threads_of_one_pool(tmp_path):
    plan = stress.Plan(run_threads=0, run_calls=0, instances=1, pool=2, invoke_calls=50, rounds=1, sets=2)
    rc, text, _, _ = _fake(tmp_path, 2, True, plan)
    assert rc != 0 and "WARNING: ThreadSanitizer: data race" in text and "task" in text, text


def test_shared_buffer_race_gives_wrong_results_without_tsan(tmp_path):
    plan = stress.Plan(run_threads=8, run_calls=300, instances=0, sets=8)
    rc, text, stats, _ = _fake(tmp_path, 1, False, plan)
    assert rc == 1 and stats["mismatches"] > 0 and stats["differences"] > 0, text
    assert "differs from ONNX Runtime" in text


def test_a_wrong_result_fails_the_run(tmp_path):
    rc, text, stats, reports = _fake(tmp_path, 3, False, SMALL)
    assert rc == 1 and stats["golden_mismatches"] > 0 and stats["mismatches"] > 0 and not reports, text


def test_tsan_that_cannot_run_is_a_skip_with_a_reason(monkeypatch):
    monkeypatch.setattr(stress, "CC", "/nonexistent/cc")
    why, prefix = stress._probe_tsan()
    assert why and "no C compiler" in why and prefix == []


@needs_tsan
def test_tsan_reports_a_pool_whose_join_does_not_synchronize(tmp_path):
    """The real mlp artifact with one weakened line in its copy of aotc_threads.h: workers
    finish with a relaxed decrement, so the caller reads their results without a
    happens-before edge. The stress run must say so."""
    plan = stress.Plan(run_threads=0, run_calls=0, instances=2, pool=2, invoke_calls=40, rounds=1, sets=2)
    art, name, manifest, entry, data = stress.prepare("mlp", tmp_path, plan.sets)
    stress.write_sets(tmp_path / "data", manifest, data)
    header = art / "aotc_threads.h"
    text = header.read_text()
    join = "__atomic_fetch_sub(&pool->pending, 1, __ATOMIC_RELEASE)"
    assert join in text, "aotc_threads.h changed: update this test's planted bug"
    header.write_text(text.replace(join, "__atomic_fetch_sub(&pool->pending, 1, __ATOMIC_RELAXED)"))
    ok, log = stress.build_harness(art, name, manifest, tmp_path / "h", tsan=True)
    assert ok, log
    rc, text, _, _ = stress.run_harness(tmp_path / "h", tmp_path / "data", plan, entry.rtol, entry.atol, True)
    assert rc != 0 and "WARNING: ThreadSanitizer: data race" in text and "aotc_sgemm" in text, text
