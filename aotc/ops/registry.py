"""Op definitions: one entry per ONNX operator, registered from the modules of this package.

An OpDef says, for one op_type:
  infer(node, ins)  -> [(dtype, shape), ...]   our own type/shape inference; `ins` are the
                       input Values (None for omitted optional inputs), constants included
  pointwise(node, args) -> Expr                 for elementwise ops: the scalar function, so the
                       fusion pass can chain any of them inside one loop nest
  lower(node, ctx)                              for every other op: emit kernel IR into ctx.b
  view = True                                   the output is the input's memory re-shaped
                                                (Reshape & co.): no code, an alias in the plan
  fold(node, ins) -> [arrays] | None            a value known from input *shapes* alone (Shape)
  random(node, ins) -> bool                     the node draws random numbers (ops/random.py):
                       never folded, and merged with a twin only when both are seeded
  bounded(g, node, ins, bounds) -> [Bound|None] an op whose output's size depends on run-time
                       values (NonZero...): its capacity and count (aotc/passes/bounded.py)
and what the passes and `aotc check` need to know of it (the fields below: how it follows
inputs of run-time size, whether it folds, which inputs are indices). Constant folding on
constant inputs needs nothing per op: it runs the ONNX reference implementation.

Adding an operator means adding one `@register` block in the module of its family (and its
test): tests/test_registry.py adds one from a test module alone and compiles a model with it.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from ..ir.graph import Node

InferFn = Callable[[Node, list], list]


@dataclass
class OpDef:
    op_type: str
    infer: InferFn
    pointwise: Optional[Callable] = None
    lower: Optional[Callable] = None
    view: bool = False
    # can run the elementwise ops that follow it inside the same kernel
    accepts_epilogue: bool = True
    # computes the output from input shapes/constants when possible (else returns None)
    fold: Optional[Callable] = None
    # how the op compiles, for docs/ONNX_SUPPORT.md, where the fields above do not say it
    how: str = ""
    # whether a node draws random numbers (its output is no function of its inputs)
    random: Optional[Callable] = None
    # which outputs have a size known only at run time (passes/bounded.py), for the ops that make them
    bounded: Optional[Callable] = None
    # how its outputs follow inputs whose size along some axes is known only at run time: the
    # name of one of passes/bounded.py's rules (BOUNDED_RULES); elementwise ops and views have
    # theirs without saying; an op with none refuses such inputs, naming the node
    bounded_rule: str = ""
    # an elementwise op whose output is 0 where its input is 0 (so padding rows stay zero): a
    # bool, or a function of the node
    keeps_zero: Union[bool, Callable] = False
    # a reduction whose result is the same with zeros added to what it reduces (a sum): over
    # a zero-padded run-time axis it needs no count
    zero_blind: bool = False
    # its output may be far larger than its inputs: folded on constant inputs only while the
    # output is small (passes/infer.py FOLD_LIMIT_BYTES), else it stays a kernel
    large_output: bool = False
    # folded through the ONNX reference implementation when its inputs are constant; False where
    # the reference differs from ONNX Runtime, whose reading the kernel follows, or where the
    # node is not a function of its inputs (a host loop's state)
    reference_fold: bool = True
    # for `aotc check`'s random inputs: which integer inputs it reads as indices or counts,
    # index_inputs(node, ins) -> {position: the exclusive bound of the values it takes}, ins
    # the input Values where known (check/inputs.py draws from [0, bound))
    index_inputs: Optional[Callable] = None
    # takes inputs with run-time dimensions (ir/dims.py): its infer and lower functions compute
    # with Dim entries (elementwise ops do without saying); an op without it refuses them, by name
    run_time_dims: bool = False
    # the inputs it reads sizes from at compile time (a Reshape's target, an Expand's shape): a
    # value of sizes of run-time dims there reaches its infer as such (ops/common.py const_ints,
    # passes/symbolic.py) instead of being computed as data
    shape_inputs: frozenset = frozenset()

    @property
    def takes_run_time_dims(self) -> bool:
        return self.run_time_dims or self.pointwise is not None


_REGISTRY: dict[str, OpDef] = {}
# operators the opset normalization (passes/normalize.py) replaces by another, deprecated spellings:
# they compile as that one
REWRITTEN_OPS = {"Upsample": "Resize", "Scatter": "ScatterElements"}
_loaded = False


def register(op_type: str | list[str], **kw) -> Callable:
    """Decorator on the infer function: `@register("Relu", pointwise=...)`."""
    names = [op_type] if isinstance(op_type, str) else list(op_type)

    def deco(infer: InferFn) -> InferFn:
        for n in names:
            if n in _REGISTRY:
                raise RuntimeError(f"op {n} registered twice")
            _REGISTRY[n] = OpDef(n, infer, **kw)
        return infer

    return deco


def add(opdef: OpDef) -> None:
    if opdef.op_type in _REGISTRY:
        raise RuntimeError(f"op {opdef.op_type} registered twice")
    _REGISTRY[opdef.op_type] = opdef


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # every module of this package is an op family (or a helper that registers nothing)
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if mod.name not in ("registry", "common", "reference"):
            importlib.import_module(f"{__package__}.{mod.name}")


def get(op_type: str) -> Optional[OpDef]:
    _load_all()
    return _REGISTRY.get(op_type)


def supported_ops() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def is_supported(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") and get(node.op_type) is not None


def draws_random(node: Node, ins: list) -> bool:
    """Does the node draw random numbers (ins: its input Values, None where omitted)? Such a
    node is never folded at compile time, nor merged with a twin unless both are seeded."""
    op = get(node.op_type) if node.domain in ("", "ai.onnx") else None
    return op is not None and op.random is not None and bool(op.random(node, ins))
