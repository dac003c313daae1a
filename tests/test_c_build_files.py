"""The build files an artifact ships for C users (aotc/build/package.py): they follow the artifact
where it is copied, a compile without --static leaves no stale static library, and --static is
refused where the target has no static build."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from models.zoo import ZOO

ROOT = Path(__file__).resolve().parent.parent


def aotc(*args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "aotc.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def mlp(tmp_path):
    onnx.save(ZOO["mlp"].build("small"), str(tmp_path / "mlp.onnx"))
    return tmp_path


def test_a_compile_without_static_removes_the_old_static_library(mlp):
    p = aotc("compile", "mlp.onnx", "-o", "out", "--target", "c", "--shape", "x=1x64", "--static", cwd=mlp)
    assert p.returncode == 0 and "libmlp.a" in p.stdout, p.stderr
    archived = subprocess.run(["ar", "t", str(mlp / "out" / "libmlp.a")], capture_output=True, text=True,
                              check=True).stdout.split()
    assert sorted(archived) == ["mlp.o", "mlp_weights.o"]
    p = aotc("compile", "mlp.onnx", "-o", "out", "--target", "c", "--shape", "x=1x64", cwd=mlp)
    assert p.returncode == 0, p.stderr
    names = {f.name for f in (mlp / "out").iterdir()}
    assert {"libmlp.so", "mlp.pc", "mlpConfig.cmake"} <= names
    assert not names & {"libmlp.a", "mlp-static.pc"}


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed (.ci/run installs it)")
def test_pkg_config_follows_the_artifact_where_it_is_copied(mlp):
    assert aotc("compile", "mlp.onnx", "-o", "out", "--target", "c", "--shape", "x=1x64", cwd=mlp).returncode == 0
    moved = mlp / "elsewhere" / "mlp-artifact"
    shutil.copytree(mlp / "out", moved)
    shutil.rmtree(mlp / "out")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "mlp"], env={**os.environ, "PKG_CONFIG_PATH": str(moved)},
                           capture_output=True, text=True, check=True).stdout.split()
    assert flags == [f"-I{moved}", f"-L{moved}", f"-Wl,-rpath,{moved}", "-lmlp"]


def test_static_is_refused_for_a_target_without_a_static_build(mlp):
    p = aotc("compile", "mlp.onnx", "-o", "out", "--target", "cuda", "--shape", "x=1x64", "--static", cwd=mlp)
    assert p.returncode == 2 and p.stderr.startswith("error: --static: target 'cuda' builds a shared library only")
    assert not (mlp / "out").exists()
