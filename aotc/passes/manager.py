"""The graph passes, in order, each verified: the pass manager.

A pass is a function of the graph and the context, `run(g, ctx) -> g`; `ctx` (PassContext)
holds the target and what a pass finds for the stages after the graph passes (which nodes run
under which condition, which are in which host loop). `pipeline()` lists every pass the
compiler runs, target-dependent ones included; ir/verify.py checks the graph after each one
(before shape inference, its structure only: the values have no types yet).

Adding a pass: a function in a module of this package, and an entry at its place in
`pipeline()`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..ir.graph import Graph
from ..targets import Target
from ..ir.verify import verify
from . import bounded, simplify
from .attention import caches_into_attention, fuse_attention
from .branches import node_conditions
from .caches import caches_in_place, runtime_kernels
from .infer import infer_shapes
from .layout import channels_last
from .loops import order_loop_bodies
from .normalize import normalize_opset
from .qdq import integer_qdq
from .recurrent import prepack_recurrent_weights
from .subnormals import flush_subnormals
from .winograd import winograd_convs


@dataclass
class PassContext:
    """What a pass may know besides the graph. `target`: the target description (None where
    passes run on their own, as in unit tests: then every target-dependent pass does nothing).
    The analyses the later stages read: `conds`, id(node) -> the condition the node runs under
    (passes/branches.py), and `loops`, id(node) -> the host loop it is in (passes/loops.py);
    and what a pass reports: `subnormals`, constant -> how many of its values were subnormal
    and are zero (passes/subnormals.py)."""
    target: Optional[Target] = None
    conds: dict = field(default_factory=dict)
    loops: dict = field(default_factory=dict)
    subnormals: dict = field(default_factory=dict)   # constant -> its subnormal values made zero

    @property
    def flushes_subnormals(self) -> bool:
        """The target computes subnormal floats as zero (a CPU target without ieee_subnormals)."""
        return self.target is not None and self.target.flushes_subnormals

    @property
    def int8_gemm(self) -> bool:
        """The target's 8-bit GEMM outruns its float32 one ([gemm] int8_tile): every quantized
        convolution it can take becomes an integer Gemm (passes/decompose.py)."""
        return self.target is not None and self.target.gemm.int8_tile


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph, PassContext], Graph]
    typed: bool = True          # every value has its type after it (shape inference has run)


def _plain(name: str, fn: Callable[[Graph], Graph]) -> Pass:
    """A pass that needs nothing but the graph."""
    return Pass(name, lambda g, ctx: fn(g))


def _qdq(g: Graph, ctx: PassContext) -> Graph:
    return integer_qdq(g, ctx.target) if ctx.target is not None else g


def _winograd(g: Graph, ctx: PassContext) -> Graph:
    return winograd_convs(g, ctx.target) if ctx.target is not None else g


def _channels_last(g: Graph, ctx: PassContext) -> Graph:
    return channels_last(g, ctx.target)


def _caches(g: Graph, ctx: PassContext) -> Graph:
    return caches_in_place(g, ctx.target.is_gpu) if ctx.target is not None else g


def _runtime_kernels(g: Graph, ctx: PassContext) -> Graph:
    if ctx.target is None or ctx.target.is_gpu:
        return g
    return runtime_kernels(g, ctx.target.gemm.nbits_kernel, avx512="avx512f" in ctx.target.requires)


def _subnormals(g: Graph, ctx: PassContext) -> Graph:
    if not ctx.flushes_subnormals:
        return g
    return flush_subnormals(g, ctx.subnormals)


def _folded_subnormals(g: Graph, ctx: PassContext) -> Graph:
    return flush_subnormals(g, {}) if ctx.flushes_subnormals else g


def _conditions(g: Graph, ctx: PassContext) -> Graph:
    ctx.conds = node_conditions(g)
    return g


def _loops(g: Graph, ctx: PassContext) -> Graph:
    ctx.loops = order_loop_bodies(g, ctx.conds)
    return g


def pipeline() -> list[Pass]:
    """Every graph pass the compiler runs, in order."""
    return [
        # where the target has a fast 8-bit GEMM: a QDQ model's islands as integer operators,
        # before folding (which would turn the weights' DequantizeLinear into floats)
        Pass("integer_qdq", _qdq, typed=False),
        Pass("normalize_opset", lambda g, ctx: normalize_opset(g), typed=False),
        # subnormal weights as zero where the run computes them so (the model's own, counted)
        Pass("flush_subnormals", _subnormals, typed=False),
        # every later pass sees static shapes
        Pass("infer_shapes", lambda g, ctx: infer_shapes(g, int8_gemm=ctx.int8_gemm)),
        _plain("remove_identities", simplify.remove_identities),
        _plain("eliminate_dead_code", simplify.eliminate_dead_code),
        _plain("canonicalize_views", simplify.canonicalize_views),
        # before cancel_transposes, which folds the Transpose of K it may add into the one making Kᵀ
        _plain("fuse_attention", fuse_attention),
        _plain("cancel_transposes", simplify.cancel_transposes),
        # (after it: the K an Attention node reads is then the cache's own value)
        _plain("caches_into_attention", caches_into_attention),
        # constant Gemm weights stored transposed are transposed first, so that a following
        # per-channel Mul/Add (a decomposed BatchNormalization) folds into them too
        _plain("canonicalize_gemm", simplify.canonicalize_gemm),
        _plain("decompose_batchnorm", simplify.decompose_batchnorm),
        _plain("fold_scale_shift", simplify.fold_scale_shift),
        _plain("prepack_recurrent_weights", prepack_recurrent_weights),
        _plain("fold_constants", simplify.fold_constants),
        # (its pads are constants now)
        _plain("fold_pads_into_convs", simplify.fold_pads_into_convs),
        Pass("flush_folded_subnormals", _folded_subnormals),
        _plain("eliminate_common_subexpressions", simplify.eliminate_common_subexpressions),
        _plain("canonicalize_views_again", simplify.canonicalize_views),
        _plain("eliminate_dead_code_again", simplify.eliminate_dead_code),
        _plain("materialize_outputs", simplify.materialize_outputs),
        # a KV cache the caller may pass as its own update's output (GPU targets: ONE_ARRAY,
        # the device's array always the output's, the host copying around it)
        Pass("caches_in_place", _caches),
        # CPU targets: MatMulNBits with int8 activations by runtime/aotc_nbits.h
        Pass("runtime_kernels", _runtime_kernels),
        # which values of the final graph have a size known only at run time
        _plain("bounded_dimensions", bounded.analyze),
        # 3 x 3 convolutions by Winograd where the target allows and the cost model says it pays
        Pass("winograd_convs", _winograd),
        # CPU targets: channels-last tensors around depthwise convolutions (a mobile network's blocks)
        Pass("channels_last", _channels_last),
        # the nodes of Ifs' branches, which run only when taken; then the bodies of the loops
        # the host runs, each in one piece
        Pass("branch_conditions", _conditions),
        Pass("host_loop_bodies", _loops),
    ]


class PassManager:
    def __init__(self, passes: list[Pass] | None = None, verify_each: bool = True):
        self.passes = pipeline() if passes is None else list(passes)
        self.verify_each = verify_each
        self.timings: list[tuple[str, float, int]] = []

    def run(self, g: Graph, ctx: PassContext | None = None) -> Graph:
        ctx = PassContext() if ctx is None else ctx
        for p in self.passes:
            t0 = time.perf_counter()
            g = p.run(g, ctx)
            if self.verify_each:
                verify(g, p.name, typed=p.typed)
            self.timings.append((p.name, time.perf_counter() - t0, len(g.nodes)))
        return g


def optimize(g: Graph, passes: list[Pass] | None = None, ctx: PassContext | None = None) -> Graph:
    return PassManager(passes).run(g, ctx)
