"""`aotc report`: one self-contained HTML page, loaded in a real headless browser (Debian's
chromium; the test skips, saying so, where it is not installed: .ci/run installs it). The page
loads without script errors, its drawings hold one box per kernel and one rectangle per buffer
with the lower bound marked, its numbers are the model's (FLOPs from the shapes, times that add
up), and a screenshot is kept with the test's output."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.zoo import ZOO

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = next((shutil.which(c) for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it: "
                                                             "apt-get install chromium)")


def aotc(*args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "aotc.cli", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def browser(*args, page: Path) -> str:
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", f"--user-data-dir={page.parent / 'chromium-profile'}", *args,
                        page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def _branches(path: Path) -> None:
    """x[4, 32] -> two MatMul + bias branches (Relu, Sigmoid) -> their sum: kernels side by side."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (32, 24)), ("b1", (24,)), ("w2", (32, 24)), ("b2", (24,)))]
    N = helper.make_node
    g = helper.make_graph([N("MatMul", ["x", "w1"], ["m1"]), N("Add", ["m1", "b1"], ["a1"]), N("Relu", ["a1"], ["r"]),
                           N("MatMul", ["x", "w2"], ["m2"]), N("Add", ["m2", "b2"], ["a2"]),
                           N("Sigmoid", ["a2"], ["s"]), N("Mul", ["r", "s"], ["y"])], "branches",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 24])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_report_numbers_are_the_models(tmp_path):
    """FLOPs from the shapes, bytes at least the kernel's input and output, the kernels' data
    edges, and a profile whose times are there for every kernel and add up to its total."""
    _branches(tmp_path / "b.onnx")
    aotc("report", "b.onnx", "-o", "b.html", "--target", "c", "--threads", "1", "--profile", "--runs", "5",
         "--json", "b.json", cwd=tmp_path)
    d = json.loads((tmp_path / "b.json").read_text())
    ks = d["kernels"]
    mm = [k for k in ks if k["nodes"][0][0] == "MatMul"]
    assert len(mm) == 2
    for k in mm:                           # MatMul 4x32 @ 32x24: 2*4*24*32, then one per element of the chain
        assert k["flops"] == 2 * 4 * 24 * 32 + 4 * 24 * (len(k["nodes"]) - 1), k
        assert k["bytes"] >= (4 * 32 + 4 * 24) * 4 and k["inputs"] == ["x"]
    last = ks[-1]
    assert last["outputs"] == ["y"] and set(last["from"]) <= {k["index"] for k in ks[:-1]} and last["from"]
    assert all(k["ms"] is not None and k["ms"] >= 0 for k in ks)
    assert sum(k["ms"] for k in ks) == pytest.approx(d["profile"]["total_ms"], rel=1e-6)
    mem = d["memory"]
    assert 0 < mem["lower_bound"] <= mem["arena"] <= mem["intermediates"]
    for b in mem["buffers"]:
        assert 0 <= b["first"] <= b["last"] < len(ks) and b["offset"] + b["size"] <= mem["arena"]


@needs_chromium
def test_report_loads_in_a_browser_with_its_drawings(tmp_path, record_property):
    onnx.save(ZOO["lenet5"].build("small"), str(tmp_path / "lenet5.onnx"))
    aotc("report", "lenet5.onnx", "-o", "report.html", "--target", "c", "--shape", "x=1x1x32x32", "--profile",
         "--runs", "5", "--json", "report.json", cwd=tmp_path)
    page = tmp_path / "report.html"
    text = page.read_text()
    d = json.loads((tmp_path / "report.json").read_text())
    # self-contained: nothing fetched (the SVG namespace is a name, not a request)
    assert not re.search(r"<link\b|\bsrc=|@import|url\((?!#)", text)        # url(#arrow): in the page
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}

    dom = browser("--dump-dom", "--virtual-time-budget=2000", page=page)
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page's script did not run to its end"
    errors = re.search(r'<div id="js-errors">(.*?)</div>', dom, re.S).group(1)
    assert errors.strip() == "", errors
    n_kernels, n_buffers = len(d["kernels"]), len(d["memory"]["buffers"])
    assert n_kernels == 8 and n_buffers >= n_kernels
    assert len(re.findall(r'<g class="kbox" data-kernel="\d+"', dom)) == n_kernels
    assert len(re.findall(r'<rect class="buf (?:value|scratch)"', dom)) == n_buffers
    assert 'class="buf scratch"' in dom                       # the convolutions' im2col and GEMM scratch
    assert len(re.findall(r'<line id="lower-bound"', dom)) == 1
    rows = re.findall(r'<tr data-kernel="(\d+)">', dom)
    assert [int(r) for r in rows] == list(range(n_kernels))
    times = re.findall(r'<td data-v="([^"]*)" class="n ms">', dom)
    assert len(times) == n_kernels and all(float(t) >= 0 for t in times)
    # the lower bound's line sits where its bytes are on the offset axis (plot: y 16..376, top = the arena)
    y = float(re.search(r'<line id="lower-bound"[^>]* y1="([\d.]+)"', dom).group(1))
    top = max(d["memory"]["arena"], d["memory"]["lower_bound"])
    assert y == pytest.approx(16 + 360 - d["memory"]["lower_bound"] / top * 360, abs=0.01)

    shot = tmp_path / "report.png"
    browser(f"--screenshot={shot}", "--window-size=1300,2400", page=page)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 30_000, len(png)    # a page drawn, not a blank one
    record_property("screenshot", str(shot))
    print(f"screenshot of the report: {shot}")


def test_report_of_an_artifact_directory(tmp_path):
    """Given the directory `aotc compile` wrote, the page is that artifact's: with its model
    beside it, drawn in full and timed with the artifact's own library; without, what its
    manifest holds, saying what is missing."""
    onnx.save(ZOO["mlp"].build("small"), str(tmp_path / "mlp.onnx"))
    aotc("compile", "mlp.onnx", "-o", "art", "--target", "c", "--shape", "x=2x64", "--threads", "1", cwd=tmp_path)
    aotc("report", "art", "-o", "full.html", "--profile", "--runs", "3", "--json", "full.json", cwd=tmp_path)
    full = json.loads((tmp_path / "full.json").read_text())
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert [k["name"] for k in full["kernels"]] == [k["name"] for k in manifest["kernels"]]
    assert full["target"] == "c" and full["threads"] == 1 and full["memory"]["buffers"] and not full["notes"]
    assert all(k["ms"] is not None for k in full["kernels"])
    assert '<svg id="graph"' in (tmp_path / "full.html").read_text()

    alone = tmp_path / "elsewhere"
    alone.mkdir()
    shutil.copytree(tmp_path / "art", alone / "art")
    aotc("report", "art", "-o", "alone.html", "--json", "alone.json", cwd=alone)
    part = json.loads((alone / "alone.json").read_text())
    assert [k["name"] for k in part["kernels"]] == [k["name"] for k in manifest["kernels"]]
    assert part["memory"]["arena"] == manifest["workspace_bytes"] and not part["memory"]["buffers"]
    assert "give it with --model" in part["notes"][0]
    aotc("report", "art", "-o", "given.html", "--model", tmp_path / "mlp.onnx", "--json", "given.json", cwd=alone)
    assert json.loads((alone / "given.json").read_text())["memory"]["buffers"]


def test_compile_writes_the_report_too(tmp_path):
    onnx.save(ZOO["mlp"].build("small"), str(tmp_path / "mlp.onnx"))
    p = aotc("compile", "mlp.onnx", "-o", "out", "--target", "c", "--shape", "x=1x64", "--report", "r.html",
             cwd=tmp_path)
    assert "wrote r.html" in p.stdout
    text = (tmp_path / "r.html").read_text()
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert all(f">{k['name']}<" in text for k in manifest["kernels"])
    assert '<line id="lower-bound"' in text and "not measured" in text
