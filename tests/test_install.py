"""aotc as a user installs it: a wheel built from this checkout, installed into a fresh virtual
environment outside it, compiles, runs and checks a model with nothing of the checkout in reach.

The fresh environment gets aotc's declared dependencies (and theirs) from this one's
site-packages, linked into a directory of their own, instead of downloading them: only those,
so that an import aotc makes of a package it does not declare fails there as it would for a user.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _declared() -> list[Requirement]:
    return [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]


def test_every_third_party_import_is_declared():
    """Every package aotc/ imports (at the top of a module or inside a function) is the standard
    library, aotc itself, or a declared dependency (ml_dtypes once came only through onnx)."""
    declared = {canonicalize_name(r.name) for r in _declared()}
    dists = md.packages_distributions()
    undeclared = set()
    for p in sorted((ROOT / "aotc").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "aotc" or top in sys.stdlib_module_names:
                    continue
                owners = {canonicalize_name(d) for d in dists.get(top, [top])}
                if not owners & declared:
                    undeclared.add(f"{p.relative_to(ROOT)}: import {name} (distribution {', '.join(sorted(owners))})")
    assert not undeclared, "imports not declared in pyproject.toml's dependencies:\n" + "\n".join(sorted(undeclared))


def _closure(reqs: list[Requirement]) -> list[md.Distribution]:
    """The installed distributions that `reqs` need, transitively (markers evaluated, no extras)."""
    seen: dict[str, md.Distribution] = {}
    todo = list(reqs)
    while todo:
        r = todo.pop()
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(r.name)
        if key in seen:
            continue
        try:
            dist = md.distribution(r.name)
        except md.PackageNotFoundError:
            pytest.fail(f"aotc's dependency {r} is not installed in this environment")
        assert dist.version in r.specifier or not r.specifier, f"installed {r.name} {dist.version} fails {r}"
        seen[key] = dist
        todo.extend(Requirement(s) for s in dist.requires or [])
    return list(seen.values())


def _site_of_dependencies(where: Path) -> Path:
    """A directory of links to the declared dependencies' files in this environment (their
    packages, modules, .libs directories and .dist-info), and nothing else."""
    where.mkdir()
    for dist in _closure(_declared()):
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        tops.add(Path(dist._path).name)             # the .dist-info, for pip's resolver and importlib.metadata
        for t in tops:
            if (base / t).exists() and not (where / t).exists() and not t.endswith(".pth"):
                (where / t).symlink_to(base / t)
    return where


def _mlp(path: Path, rng) -> dict:
    """A two-layer MLP, x[2, 16] -> y[2, 4], with random weights."""
    w1, b1 = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    w2, b2 = rng.standard_normal((32, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])]
    inits = [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def _not_sources(directory: str, names: list[str]) -> set[str]:
    """What a copy of the checkout to build from leaves out: what git ignores at its top level
    (aotc/build/ is a package, /build/ is not) and bytecode everywhere."""
    top = {".venv", ".git", "build", "out", ".pytest_cache"} if Path(directory) == ROOT else set()
    return {n for n in names if n in top or n == "__pycache__" or n.endswith(".egg-info")}


def test_wheel_installs_and_compiles_outside_the_checkout(tmp_path):
    # the wheel, built from a copy of the checkout (the build writes build/ and .egg-info where it runs)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=_not_sources)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), "-q"], check=True, capture_output=True, text=True)
    wheel, = (tmp_path / "dist").glob("aotc-*.whl")

    # a fresh environment whose only other packages are aotc's declared dependencies
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = _site_of_dependencies(tmp_path / "deps")
    (Path(purelib) / "aotc_test_dependencies.pth").write_text(f"{deps}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(NO_COLOR="1", COLUMNS="200")
    # --no-index: the dependencies must be found installed (they are declared), nothing is downloaded
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "-q",
                        str(wheel)], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stdout + p.stderr

    work = tmp_path / "work"           # outside the checkout, and the checkout nowhere on sys.path
    work.mkdir()

    def run(*args):
        p = subprocess.run([str(a) for a in args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p.stdout

    where = run(python, "-c", "import aotc, aotc.paths as p; print(aotc.__file__, p.RUNTIME_DIR, p.TARGETS_DIR)")
    for path in where.split():
        assert Path(path).is_relative_to(env_dir), where
        assert not Path(path).resolve().is_relative_to(ROOT), where
    assert sorted(p.name for p in Path(where.split()[2]).glob("*.toml")) == \
        sorted(p.name for p in (ROOT / "targets").glob("*.toml"))

    rng = np.random.default_rng(2030)
    weights = _mlp(work / "mlp.onnx", rng)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    np.save(work / "x.npy", x)
    aotc = env_dir / "bin" / "aotc"
    assert "libmlp.so" in run(aotc, "compile", "mlp.onnx", "-o", "out", "--shape", "x=2x16")
    run(aotc, "run", "out", "--input", "x=x.npy", "--output-dir", "results")
    y = np.load(work / "results" / "y.npy")
    want = np.maximum(x @ weights["w1"] + weights["b1"], 0) @ weights["w2"] + weights["b2"]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    checked = run(aotc, "check", "mlp.onnx", "--shape", "x=2x16", "--seed", "7")
    assert "PASS" in checked and "from ONNX Runtime" in checked, checked
    listed = {t["name"] for t in json.loads(run(aotc, "targets", "--json"))}
    assert listed == {p.stem for p in (ROOT / "targets").glob("*.toml")} | {"native"}
