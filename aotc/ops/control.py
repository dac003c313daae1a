"""If, Loop, Scan and the sequence ops: shape inference turns them into plain nodes when their
path is known at compile time: an If's branch taken is inlined, a Loop or Scan unrolled
(aotc/passes/control.py), a sequence resolved into the tensors it holds
(aotc/passes/sequences.py). These entries say that they compile; the If's is reached only
for a condition known at run time alone, which aotc's static plan cannot take."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..passes.sequences import OPTIONAL_OPS, SEQUENCE_OPS
from .registry import register


@register("If", how="inlined: the branch a compile-time condition takes")
def _if_infer(node, ins):
    raise UnsupportedError([f"If node {node.name!r} with a condition known only at run time"],
                           "aotc compiles an If whose condition is constant at compile time (from "
                           "initializers, shapes or inputs bound with --const)")


def _unrolled(node, ins):
    raise AssertionError(f"{node.op_type} node {node.name!r} reached the op registry: shape inference "
                         "unrolls every Loop and Scan (aotc/passes/control.py)")


register("Loop", how="unrolled: the trip count or conditions known at compile time")(_unrolled)
register("Scan", how="unrolled over the scan inputs' length")(_unrolled)
register("SequenceMap", how="unrolled over the sequence's length")(_unrolled)


def _resolved(node, ins):
    raise AssertionError(f"{node.op_type} node {node.name!r} reached the op registry: shape inference "
                         "resolves every sequence op (aotc/passes/sequences.py)")


register(list(SEQUENCE_OPS), how="compile time: the sequence is resolved into the tensors it holds")(_resolved)
register(list(OPTIONAL_OPS), how="compile time: resolved into the tensor it holds (or none)")(_resolved)
