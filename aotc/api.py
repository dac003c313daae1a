"""Python API: compile a model, load an artifact, run it."""
from __future__ import annotations

import json
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .build.loader import Binding, Library, check_inputs
from .errors import InputError


class CompiledModel:
    """A compiled artifact loaded through cffi. Needs only the artifact directory. It holds one
    model instance (workspace and thread pool, or device context): `threads` (CPU targets)
    caps the pool, 0 meaning as many as this machine has cores, up to what it was compiled for."""

    def __init__(self, directory: Union[str, os.PathLike], threads: int = 0, profile: bool = False):
        self._lib = Library(directory)
        self.directory = Path(directory)
        self.manifest = self._lib.manifest
        self._instance = self._lib.create(threads=threads, profile=profile)

    @property
    def threads(self) -> int:
        """Threads this instance runs on."""
        return self._lib.threads(self._instance)

    def profile(self) -> list[tuple[str, float]]:
        """Per kernel: (name and ONNX nodes, milliseconds summed over the runs so far), when
        loaded with profile=True (CPU targets; cuda: per device launch, timed by CUDA events)."""
        return self._lib.profile(self._instance)

    @property
    def input_names(self) -> list[str]:
        return [x[0] for x in self._lib.inputs]

    @property
    def output_names(self) -> list[str]:
        return [x[0] for x in self._lib.outputs]

    def run(self, inputs: Union[Mapping[str, np.ndarray], Sequence[np.ndarray]],
            into: Optional[Mapping[str, np.ndarray]] = None) -> list[np.ndarray]:
        """Run on a dict {name: array} or a list in graph-input order; returns the outputs
        as a list in graph-output order. `into` {output name: array} has outputs written into
        arrays of the caller's (returned as they are): a cache the artifact updates in place
        (its manifest's outputs say "in_place_of") may be given its input's own array. Not
        thread-safe on one instance (one workspace); load one instance per thread."""
        arrays = check_inputs(self._lib, inputs)
        names = self.output_names
        unknown = sorted(set(into or {}) - set(names))
        if unknown:
            raise InputError(f"no output named {', '.join(map(repr, unknown))}", f"the outputs are {names}")
        return self._lib.run(self._instance, arrays, {names.index(k): v for k, v in (into or {}).items()})

    def bind(self) -> Binding:
        """A Binding of this instance's ports (build/loader.py): arrays bound once by position,
        runs that set only what changes (aotc.generate's steps)."""
        return Binding(self._lib, self._instance)

    def keep_caches(self, keep: bool = True) -> None:
        """On a GPU target, with keep: a cache the artifact updates in place, passed as one
        array for its input and output (see run), stays on the device between runs: the first
        run that passes the array copies it in, the runs after it that pass it again copy it
        neither way (its contents are then the device's), and keep_caches(False) writes each
        kept cache back into its array. An array is known by its address: clear keep before
        freeing one or giving it other contents. On CPU targets the array is the cache, and
        this does nothing. aotc.generate keeps the caches for the length of a generation."""
        self._lib.keep_caches(self._instance, keep)

    def __repr__(self) -> str:
        return f"CompiledModel({str(self.directory)!r}, inputs={self.input_names}, outputs={self.output_names})"


@dataclass
class Built:
    """An artifact directory written by build_artifact, and whether it came from the compile cache."""
    directory: Path
    cached: bool


def build_artifact(model: Union[str, os.PathLike], target: str = "native", output_dir: Union[str, os.PathLike] = "out",
                   name: Optional[str] = None, shapes: Optional[Mapping[str, Sequence[int]]] = None,
                   consts: Optional[Mapping[str, np.ndarray]] = None, weights: str = "auto", fuse: bool = True,
                   threads: int = 0, static: bool = False, cache: bool = False, progress=None,
                   dims: Optional[Mapping[str, Sequence[int]]] = None) -> Built:
    """What `aotc compile` and `compile` write: the artifact compile_model makes (header, sources,
    lib<name>.so, manifest.json) and the build files for C users beside it (<name>.pc,
    <name>Config.cmake; with `static`, lib<name>.a and <name>-static.pc too:
    aotc/build/package.py). With `cache`, an artifact compiled before from the same model,
    options, target, compilers and aotc is copied from the compile cache (aotc/cache.py)
    instead, and a new one is stored there."""
    from .build.package import STATIC_LANGUAGES, write_build_files
    from .compiler import compile_model
    from .errors import AotcError
    from .targets import load_target
    tgt = load_target(target)
    if static and tgt.language not in STATIC_LANGUAGES:
        raise AotcError(f"--static: target {target!r} builds a shared library only",
                        "static libraries are built for the c and opencl targets")
    step = progress or (lambda s: nullcontext())
    key = None
    if cache:
        from . import cache as compile_cache
        from .codegen import get_backend
        from .compiler import resolve_threads
        with step("looking in the compile cache"):
            key = compile_cache.compute_key(model, tgt, resolve_threads(threads, get_backend(tgt.language)),
                                            name, shapes, consts, weights, fuse, static, dims)
            if key and compile_cache.restore(key, Path(output_dir)) is not None:
                return Built(Path(output_dir), cached=True)
    out = compile_model(model, target=target, output_dir=output_dir, name=name, shapes=shapes, consts=consts,
                        weights=weights, fuse=fuse, progress=progress, threads=threads, dims=dims)
    manifest = json.loads((out / "manifest.json").read_text())
    with step(f"writing build files{' and lib' + manifest['name'] + '.a' if static else ''}"):
        files = write_build_files(out, manifest, tgt, static)
    if key:
        with step("storing in the compile cache"):
            compile_cache.store(key, out, compile_cache.artifact_files(out, manifest, files), manifest["name"])
    return Built(out, cached=False)


def compile(model: Union[str, os.PathLike], target: str = "native", output_dir: Union[str, os.PathLike] = "out",
            name: Optional[str] = None, shapes: Optional[Mapping[str, Sequence[int]]] = None,
            consts: Optional[Mapping[str, np.ndarray]] = None, weights: str = "auto",
            threads: int = 0, static: bool = False, cache: bool = False,
            dims: Optional[Mapping[str, Sequence[int]]] = None) -> CompiledModel:
    """Compile an ONNX file into `output_dir` (header, sources, lib<name>.so, manifest.json, the
    pkg-config and CMake files) and load it. `target`: native (the best CPU target of this
    machine), c, c-avx2, c-avx512...; `shapes` fixes symbolic input dims, each an int or a range
    (lo, hi) or (lo, hi, multiple) of sizes the artifact takes at run time; `dims` gives the
    model's named symbolic dims (dim_param) such ranges, {"seq": (1, 512)}; `consts` binds inputs
    to constants; `threads`: the most threads the artifact runs on (0: all cores of this
    machine); `static`: also lib<name>.a, for C programs that link it in; `cache`: use the
    compile cache, as `aotc compile` does (off here, since a process may patch aotc in ways
    the cache's key cannot see)."""
    built = build_artifact(model, target=target, output_dir=output_dir, name=name, shapes=shapes, consts=consts,
                           weights=weights, threads=threads, static=static, cache=cache, dims=dims)
    return CompiledModel(built.directory, threads=threads)


def load(directory: Union[str, os.PathLike], threads: int = 0, profile: bool = False) -> CompiledModel:
    """Load an artifact directory written by compile (the ONNX file is not needed); `threads`
    caps its thread pool (0: all cores, up to what it was compiled for); `profile` times every
    kernel (CompiledModel.profile)."""
    return CompiledModel(directory, threads=threads, profile=profile)
