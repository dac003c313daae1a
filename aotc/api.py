"""Python API: compile a model, load an artifact, run it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from .build.loader import Library, check_inputs


class CompiledModel:
    """A compiled artifact loaded through cffi. Needs only the artifact directory."""

    def __init__(self, directory: Union[str, os.PathLike]):
        self._lib = Library(directory)
        self.directory = Path(directory)
        self.manifest = self._lib.manifest
        self._workspace = self._lib.new_workspace()

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
        return self._lib.run(arrays, self._workspace)

    def __repr__(self) -> str:
        return f"CompiledModel({str(self.directory)!r}, inputs={self.input_names}, outputs={self.output_names})"


def compile(model: Union[str, os.PathLike], target: str = "c", output_dir: Union[str, os.PathLike] = "out",
            name: Optional[str] = None, shapes: Optional[Mapping[str, Sequence[int]]] = None,
            consts: Optional[Mapping[str, np.ndarray]] = None, weights: str = "auto") -> CompiledModel:
    """Compile an ONNX file into `output_dir` (header, sources, lib<name>.so, manifest.json)
    and load it. `shapes` fixes symbolic input dims; `consts` binds inputs to constants."""
    from .compiler import compile_model
    out = compile_model(model, target=target, output_dir=output_dir, name=name, shapes=shapes,
                        consts=consts, weights=weights)
    return CompiledModel(out)


def load(directory: Union[str, os.PathLike]) -> CompiledModel:
    """Load an artifact directory written by compile (the ONNX file is not needed)."""
    return CompiledModel(directory)
