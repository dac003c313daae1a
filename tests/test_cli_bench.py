"""`aotc bench` (aotc against ONNX Runtime, the method of `make bench`) and the progress display of
long commands: on a terminal the stages with the kernel count, nothing when output is not one."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import statistics
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from models.zoo import ZOO

ROOT = Path(__file__).resolve().parent.parent


def aotc(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "aotc.cli", *map(str, args)], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def on_terminal(*args) -> tuple[int, str]:
    """Run `aotc ARGS` with stdin, stdout and stderr on a pseudo-terminal; what it wrote there."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm", "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    p = subprocess.Popen([sys.executable, "-m", "aotc.cli", *map(str, args)], stdin=slave, stdout=slave,
                         stderr=slave, env=env, cwd=ROOT, close_fds=True)
    os.close(slave)
    data = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:                     # the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=300), data.decode(errors="replace")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "mlp.onnx"
    onnx.save(ZOO["mlp"].build("small"), str(path))
    return path


def test_bench_times_both_engines_at_each_thread_count(mlp, tmp_path):
    rep = tmp_path / "bench.json"
    p = aotc("bench", mlp, "--target", "c", "--shape", "x=4x64", "--threads", "1,2", "--runs", "6", "--warmup", "2",
             "--rounds", "3", "--min-block-ms", "0", "--json", rep)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(rep.read_text())
    engines = ["aotc, 1", "aotc, 2", "ORT, 1", "ORT, 2"]
    assert sorted(r["median_ms"]) == sorted(engines) and r["target"] == "c"
    for e in engines:
        s = r["samples_ms"][e]
        assert len(s) == 6 and all(0 < v < 1000 for v in s), (e, s)      # 3 rounds of 2 timed runs
        assert r["median_ms"][e] == pytest.approx(statistics.median(s))
    for t in ("1", "2"):
        assert r["ort_over_aotc"][t] == pytest.approx(r["median_ms"][f"ORT, {t}"] / r["median_ms"][f"aotc, {t}"])
        assert r["max_abs_diff"][t] < 1e-4                 # what was timed computes the model
    rows = {ln.split()[0]: ln.split() for ln in p.stdout.splitlines() if re.match(r"\s+[12]\s", ln)}
    assert set(rows) == {"1", "2"}
    assert float(rows["2"][1]) == pytest.approx(r["median_ms"]["aotc, 2"], abs=1e-3)
    assert float(rows["2"][3]) == pytest.approx(r["ort_over_aotc"]["2"], abs=0.01)
    assert "medians of 6 runs per engine" in p.stdout


def test_bench_blocks_of_fast_runs_last_the_minimum_time(mlp, tmp_path):
    """By default every engine's block of a round lasts 20 ms or more: an MLP of microseconds runs
    hundreds of times a round, as many in every round."""
    rep = tmp_path / "bench.json"
    p = aotc("bench", mlp, "--target", "c", "--shape", "x=1x64", "--runs", "6", "--warmup", "3", "--rounds", "2",
             "--json", rep)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(rep.read_text())
    assert r["min_block_ms"] == 20
    for e in ("aotc, 1", "ORT, 1"):
        s = r["samples_ms"][e]
        assert len(s) % 2 == 0 and len(s) > 50, (e, len(s))
        assert sum(s[:len(s) // 2]) > 10                   # a round's block: about 20 ms of runs
    n = min(len(v) for v in r["samples_ms"].values())
    assert f"medians of {n} runs per engine or more (blocks of 20 ms or more)" in p.stdout


@pytest.mark.parametrize("args, fragment", [
    (["--threads", "0"], "thread counts must be 1 or more"),
    (["--threads", "1,two"], "is not a list of thread counts"),
    (["--target", "opencl"], "aotc bench times CPU targets"),
])
def test_bench_refuses_bad_choices(mlp, args, fragment):
    p = aotc("bench", mlp, "--shape", "x=1x64", *args)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and fragment in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_compile_shows_its_stages_on_a_terminal_only(mlp, tmp_path):
    rc, text = on_terminal("compile", mlp, "--target", "c", "-o", tmp_path / "tty", "--shape", "x=1x64", "--no-cache")
    assert rc == 0, text
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    manifest = json.loads((tmp_path / "tty" / "manifest.json").read_text())
    kernels = len(manifest["kernels"])
    for stage in ["reading model", "optimizing graph", f"scheduling {kernels} kernels for c",
                  f"compiling {kernels} kernels with cc"]:
        assert stage in plain, stage
    assert re.search(r"done\s+reading model\s+\d+\.\d s", plain)
    assert "wrote " in plain

    p = aotc("compile", mlp, "--target", "c", "-o", tmp_path / "pipe", "--shape", "x=1x64")
    assert p.returncode == 0 and p.stderr == "" and p.stdout.startswith("wrote "), p.stdout + p.stderr
    assert "reading model" not in p.stdout
