"""Pass manager: runs graph passes in order, verifying the graph after each one."""
from __future__ import annotations

import time
from typing import Callable

from ..ir.graph import Graph
from ..ir.verify import verify
from . import bounded, simplify
from .recurrent import prepack_recurrent_weights
from .attention import fuse_attention
from .infer import infer_shapes
from .normalize import normalize_opset

Pass = Callable[[Graph], Graph]

# The standard pipeline. normalize + infer come first: every later pass sees static shapes.
DEFAULT_PASSES: list[tuple[str, Pass]] = [
    ("normalize_opset", normalize_opset),
    ("infer_shapes", infer_shapes),
    ("remove_identities", simplify.remove_identities),
    ("eliminate_dead_code", simplify.eliminate_dead_code),
    ("canonicalize_views", simplify.canonicalize_views),
    # before cancel_transposes, which folds the Transpose of K it may add into the one making Kᵀ
    ("fuse_attention", fuse_attention),
    ("cancel_transposes", simplify.cancel_transposes),
    # constant Gemm weights stored transposed are transposed first, so that a following
    # per-channel Mul/Add (a decomposed BatchNormalization) folds into them too
    ("canonicalize_gemm", simplify.canonicalize_gemm),
    ("decompose_batchnorm", simplify.decompose_batchnorm),
    ("fold_scale_shift", simplify.fold_scale_shift),
    ("prepack_recurrent_weights", prepack_recurrent_weights),
    ("fold_constants", simplify.fold_constants),
    ("eliminate_common_subexpressions", simplify.eliminate_common_subexpressions),
    ("canonicalize_views_again", simplify.canonicalize_views),
    ("eliminate_dead_code_again", simplify.eliminate_dead_code),
    ("materialize_outputs", simplify.materialize_outputs),
    # last: which values of the final graph have a size known only at run time
    ("bounded_dimensions", bounded.analyze),
]


class PassManager:
    def __init__(self, passes: list[tuple[str, Pass]] | None = None, verify_each: bool = True):
        self.passes = list(DEFAULT_PASSES if passes is None else passes)
        self.verify_each = verify_each
        self.timings: list[tuple[str, float, int]] = []

    def run(self, g: Graph) -> Graph:
        for name, p in self.passes:
            t0 = time.perf_counter()
            g = p(g)
            if self.verify_each and name not in ("normalize_opset",):
                verify(g, name)
            self.timings.append((name, time.perf_counter() - t0, len(g.nodes)))
        return g


def optimize(g: Graph, passes: list[tuple[str, Pass]] | None = None) -> Graph:
    return PassManager(passes).run(g)
