"""A representative slice of `make sanitize` (tools/sanitize.py): small zoo models, and models
with Ifs and Loops decided at run time, built with AddressSanitizer + UndefinedBehaviorSanitizer
and run against ONNX Runtime, and the MLP's embedding path (create with external weights /
invoke / destroy) under valgrind memcheck. Plus a check that the harness does report what it
is there to catch."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tools import sanitize

STATUS = sanitize.tool_status()


def needs(check):
    return pytest.mark.skipif(STATUS[check] is not None, reason=str(STATUS[check]))


@needs("asan")
@pytest.mark.parametrize("model", ["mlp", "lenet5", "gpt2"])
def test_asan_ubsan_clean_and_matches_onnx_runtime(model, tmp_path):
    r = sanitize.check_model(model, "asan", tmp_path)
    assert r.passed, r.detail
    assert r.max_abs_err and all(np.isfinite(v) for v in r.max_abs_err.values())


@needs("asan")
@pytest.mark.parametrize("model", ["sign_if", "nested_loops", "loop_and_if"])
def test_asan_ubsan_clean_on_run_time_control_flow(model, tmp_path):
    """The host program's branches and while loops (tests/test_runtime_if.py, test_runtime_loop.py)
    under the sanitizers, on inputs that take branches and go round loops (trip counts from
    [0, 8): aotc/check/inputs.py)."""
    from types import SimpleNamespace

    from tests import test_runtime_if, test_runtime_loop
    build = getattr(test_runtime_if, model, None) or getattr(test_runtime_loop, model)
    entry = SimpleNamespace(build=lambda size: build(), shapes_for=lambda size: {}, rtol=1e-4, atol=1e-5)
    r = sanitize.check_model(model, "asan", tmp_path, entry=entry)
    assert r.passed, r.detail
    assert r.max_abs_err


@needs("valgrind")
def test_valgrind_memcheck_clean_on_the_embedding_path(tmp_path):
    r = sanitize.check_model("mlp", "valgrind", tmp_path)
    assert r.passed, r.detail
    assert r.max_abs_err


# ------------------------------------------------------------------------------------------ the harness itself
BUGGY_C = r"""
#include <stdlib.h>
#include "bug.h"
int bug_run(const bug_inputs *in, bug_outputs *out, void *workspace)
{
    int i;
    volatile float *leak = (volatile float *)malloc(16);    /* volatile: the compiler keeps it */
    leak[0] = 1.0f;
    (void)workspace;
    for (i = 0; i <= %(n)d; ++i)        /* one past the end when OVERRUN is 1 */
        if (i < %(n)d || %(overrun)d) out->y[i] = in->x[i < %(n)d ? i : 0] * 2.0f;
    if (!%(leak)d) free((void *)leak);
    return 0;
}
const char *bug_strerror(int s) { (void)s; return "?"; }
"""

BUGGY_H = r"""
#define BUG_WORKSPACE_BYTES 64
#define BUG_WORKSPACE_ALIGN 64
typedef struct { const float *x; } bug_inputs;
typedef struct { float *y; } bug_outputs;
int bug_run(const bug_inputs *in, bug_outputs *out, void *workspace);
const char *bug_strerror(int s);
"""


def _fake_artifact(d, overrun: int, leak: int):
    d.mkdir(parents=True)
    (d / "bug.h").write_text(BUGGY_H)
    (d / "bug.c").write_text(BUGGY_C % {"n": 8, "overrun": overrun, "leak": leak})
    manifest = {"header": "bug.h", "sources": ["bug.c", "bug.h"],
                "inputs": [{"name": "x", "c_name": "x", "dtype": "float32", "shape": [8]}],
                "outputs": [{"name": "y", "c_name": "y", "dtype": "float32", "shape": [8]}]}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _run_fake(tmp_path, check, overrun, leak):
    art = tmp_path / "art"
    manifest = _fake_artifact(art, overrun, leak)
    exe = tmp_path / "drv"
    ok, log = sanitize.build_driver(art, "bug", manifest, exe, sanitize=(check == "asan"))
    assert ok, log
    np.arange(8, dtype=np.float32).tofile(tmp_path / "x.bin")
    cmd = [str(exe), "-", str(tmp_path / "x.bin"), str(tmp_path / "y.bin")]
    if check == "asan":
        rc, text = sanitize.run_driver(cmd, sanitize.ASAN_ENV, 60)
    else:
        rc, text = sanitize.run_driver([*sanitize.VALGRIND, *cmd], {}, 120)
    return rc, text


@needs("asan")
def test_asan_reports_a_write_past_an_output(tmp_path):
    rc, text = _run_fake(tmp_path, "asan", overrun=1, leak=0)
    assert rc != 0 and "heap-buffer-overflow" in text, text


@needs("asan")
def test_asan_driver_is_quiet_on_a_correct_artifact(tmp_path):
    rc, text = _run_fake(tmp_path, "asan", overrun=0, leak=0)
    assert rc == 0 and not any(m in text for m in sanitize.REPORT_MARKERS), text
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32), np.arange(8, dtype=np.float32) * 2)


@needs("valgrind")
def test_valgrind_reports_a_leak(tmp_path):
    rc, text = _run_fake(tmp_path, "valgrind", overrun=0, leak=1)
    assert rc == 99 and "definitely lost" in text, text
