"""Python API: compile a model, load an artifact, run it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .build.loader import Library, check_inputs


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

    def run(self, inputs: Union[Mapping[str, np.ndarray], Sequence[np.ndarray]]) -> list[np.ndarray]:
        """Run on a dict {name: array} or a list in graph-input order; returns the outputs
        as a list in graph-output order. Not thread-safe on one instance (one workspace);
        load one instance per thread."""
        arrays = check_inputs(self._lib, inputs)
        return self._lib.run(self._instance, arrays)

    def __repr__(self) -> str:
        return f"CompiledModel({str(self.directory)!r}, inputs={self.input_names}, outputs={self.output_names})"


def compile(model: Union[str, os.PathLike], target: str = "native", output_dir: Union[str, os.PathLike] = "out",
            name: Optional[str] = None, shapes: Optional[Mapping[str, Sequence[int]]] = None,
            consts: Optional[Mapping[str, np.ndarray]] = None, weights: str = "auto",
            threads: int = 0) -> CompiledModel:
    """Compile an ONNX file into `output_dir` (header, sources, lib<name>.so, manifest.json)
    and load it. `target`: native (the best CPU target of this machine), c, c-avx2, c-avx512...;
    `shapes` fixes symbolic input dims; `consts` binds inputs to constants; `threads`: the most
    threads the artifact runs on (0: all cores of this machine)."""
    from .compiler import compile_model
    out = compile_model(model, target=target, output_dir=output_dir, name=name, shapes=shapes,
                        consts=consts, weights=weights, threads=threads)
    return CompiledModel(out, threads=threads)


def load(directory: Union[str, os.PathLike], threads: int = 0, profile: bool = False) -> CompiledModel:
    """Load an artifact directory written by compile (the ONNX file is not needed); `threads`
    caps its thread pool (0: all cores, up to what it was compiled for); `profile` times every
    kernel (CompiledModel.profile)."""
    return CompiledModel(directory, threads=threads, profile=profile)
