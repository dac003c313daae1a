"""If, Loop, Scan and the sequence ops: shape inference turns them into plain nodes: an If's
branch taken is inlined (both branches and a choice of their outputs when the condition is
known only at run time), a Loop or Scan unrolled (aotc/passes/control.py), a sequence resolved
into the tensors it holds (aotc/passes/sequences.py). These entries say that they compile."""
from __future__ import annotations

from ..kernel.ir import SPATIAL, Load
from ..ir.internal import BRANCH_FAIL, CARRY
from .registry import register

# the ops passes/sequences.py resolves (their values are lists of tensors, or an optional one)
OPTIONAL_OPS = ("Optional", "OptionalHasElement", "OptionalGetElement")
SEQUENCE_OPS = ("SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
                "SequenceLength", "ConcatFromSequence", "SplitToSequence")


def _unrolled(node, ins):
    raise AssertionError(f"{node.op_type} node {node.name!r} reached the op registry: shape inference "
                         "inlines every If and unrolls every Loop and Scan (aotc/passes/control.py)")


register("If", how="inlined: the branch a compile-time condition takes; with a run-time condition both "
                   "branches, the host program running the one taken (outputs of one shape)")(_unrolled)
# a Loop's trip count as `aotc check` draws it, from [0, TRIP_COUNTS): a loop the host program runs
# goes round a few times
TRIP_COUNTS = 8
register("Loop", index_inputs=lambda node, ins: {0: TRIP_COUNTS},
         how="unrolled: the trip count or conditions known at compile time; else run by the host "
             "program (carried values of one shape, no scan outputs)")(_unrolled)
register("Scan", how="unrolled over the scan inputs' length")(_unrolled)
register("SequenceMap", how="unrolled over the sequence's length")(_unrolled)


def _resolved(node, ins):
    raise AssertionError(f"{node.op_type} node {node.name!r} reached the op registry: shape inference "
                         "resolves every sequence op (aotc/passes/sequences.py)")


register(list(SEQUENCE_OPS), how="compile time: the sequence is resolved into the tensors it holds")(_resolved)
register(list(OPTIONAL_OPS), how="compile time: resolved into the tensor it holds (or none)")(_resolved)


def _lower_carry(node, ctx):
    for x, y in zip(ctx.ins, ctx.outs):
        with ctx.b.loop(y.size, "i", role=SPATIAL) as i:
            ctx.b.store(y, i, Load(x, i))


# a host loop's state copied into its storage (passes/control.py host_loop, passes/loops.py):
# a kernel of its own (nothing fused after it: the end of the loop's body writes the state the
# body has read only when the body is done)
# (never folded: its input is constant going into the loop, but the state changes with every
# iteration)
@register(CARRY, lower=_lower_carry, accepts_epilogue=False, reference_fold=False)
def _carry(node, ins):
    return [(v.dtype, v.shape) for v in ins]


def _lower_branch_fail(node, ctx):
    ctx.b.fail("AOTC_ERR_BRANCH", node.attrs["reason"])


# a run-time If's branch that shape inference could not shape (passes/control.py): it runs only
# when the If takes that branch, and then stops the run with a status; its outputs are never
# written (the If's choice reads them only when the branch is taken, and then the run has failed)
@register(BRANCH_FAIL, lower=_lower_branch_fail, accepts_epilogue=False, reference_fold=False)
def _branch_fail(node, ins):
    return list(node.attrs["types"])
