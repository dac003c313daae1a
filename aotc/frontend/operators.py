"""Which operators aotc compiles, asked of an imported graph: the op registry's, and those the
opset normalization rewrites into them. The compiler refuses a graph holding any other
(`check_supported`), with a hint where there is more to say than the support table."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir.graph import Graph
from ..ops import registry
from ..ops.registry import REWRITTEN_OPS


def node_opset(g: Graph, n) -> int:
    """The opset version the model imports for the node's domain."""
    return g.domain_opsets.get(n.domain or "ai.onnx", g.opset)


def is_supported(n) -> bool:
    """Does aotc compile node n (a graph Node or an ONNX NodeProto): an op of the registry, or
    one the opset normalization rewrites into one (Upsample, Scatter)?"""
    return registry.is_supported(n) or (n.domain in ("", "ai.onnx") and n.op_type in REWRITTEN_OPS)


# what to do about an unsupported operator, where there is more to say than the support table
_OP_HINTS = {
    ("ai.onnx.ml", "ZipMap"): "ZipMap turns a classifier's probabilities into a list of maps, which aotc's "
                              "API has no type for: convert without it (skl2onnx: options={'zipmap': False}) "
                              "and the probabilities come out as a tensor",
}


# what to do about an unsupported operator of a whole domain
_DOMAIN_HINTS = {
    "com.microsoft": "com.microsoft operators are ONNX Runtime's own (contrib operators): aotc compiles those "
                     "listed in docs/ONNX_SUPPORT.md's contrib section; the model before ONNX Runtime's "
                     "optimizer or quantizer rewrote it may compile where this one does not",
}


def check_supported(g: Graph, nodes=None) -> None:
    """Refuse g (or these nodes of it) when any node's operator is not one aotc compiles."""
    bad, hints = [], []
    for n in g.nodes if nodes is None else nodes:
        if not is_supported(n):
            dom = n.domain or "ai.onnx"
            bad.append(f"{n.op_type} (domain {dom}, opset {node_opset(g, n)}) in node {n.name!r}")
            hint = _OP_HINTS.get((dom, n.op_type)) or _DOMAIN_HINTS.get(dom)
            if hint and hint not in hints:
                hints.append(hint)
    if bad:
        raise UnsupportedError(bad, "; ".join(hints + ["see docs/ONNX_SUPPORT.md for the operators aotc compiles"]),
                               what="operator(s)")
