"""Nodes of other domains rewritten into ai.onnx nodes when the model is read, so that they
compile as those do: ai.onnx.ml's operators (ml.py, ml_trees.py), ai.onnx.preview.training's
optimizer steps and BatchNormalization in training mode (training.py), ONNX Runtime's contrib
operators (contrib.py, contrib_quant.py, contrib_nbits.py). Each rewriting module
gives a table of builders, (domain, op type) -> builder(Emit, attributes) (frontend/emit.py
writes the nodes); `all_builders` joins them, and adding a rewritten operator is one builder in
one of those tables.

`expand_rewrites` runs before anything else reads the graph (onnx_import.import_model), on a
copy of the model, in rounds: a node that needs the rank of another rewritten node's output
waits for it.
"""
from __future__ import annotations

import onnx
from onnx import helper

from ..errors import ModelError, UnsupportedError
from ..ir.internal import OPSET_ATTR
from .contrib import CONTRIB_BUILDERS, CONTRIB_ONLY_WHEN
from .contrib_nbits import NBITS_BUILDERS
from .contrib_quant import QUANT_BUILDERS
from .emit import EMIT_OPSET, Deferred, Emit, attrs_of
from .ml import BUILDERS, ML
from .ml_trees import TREE_BUILDERS
from .schema_functions import value_types
from .training import TRAINING, TRAINING_BUILDERS, batchnorm_training
from .validate import all_graphs


def all_builders() -> dict:
    """(domain, op type) -> its builder (Emit, attributes), for every rewritten operator."""
    return {**{(ML, k): v for k, v in {**BUILDERS, **TREE_BUILDERS}.items()},
            **{(TRAINING, k): v for k, v in TRAINING_BUILDERS.items()},
            ("", "BatchNormalization"): batchnorm_training, **CONTRIB_BUILDERS, **QUANT_BUILDERS,
            **NBITS_BUILDERS}


# (domain, op type) -> which of its nodes are rewritten (all, where not listed), from the node's
# attributes and the model's ai.onnx opset
_ONLY_WHEN = {("", "BatchNormalization"): lambda a, opset: int(a.get("training_mode", 0)) == 1,
              **CONTRIB_ONLY_WHEN}


def _key(n: onnx.NodeProto) -> tuple:
    return ("" if n.domain == "ai.onnx" else n.domain, n.op_type)


def _rewritten(n: onnx.NodeProto, builders: dict, opset: int) -> bool:
    k = _key(n)
    return k in builders and (k not in _ONLY_WHEN or _ONLY_WHEN[k](attrs_of(n), opset))


def _model_opset(model: onnx.ModelProto) -> int:
    return max((int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx")), default=EMIT_OPSET)


def _declare_outputs(g: onnx.GraphProto, e: Emit) -> None:
    """Declare the rewritten node's outputs' types in g (value_info), as ONNX's shape inference
    gives them on the emitted nodes alone: inferring the whole model again, ONNX reads those
    nodes in the model's opset, which may be older than EMIT_OPSET, and would lose the types
    (and the ranks a later rewrite needs) from there on."""
    from onnx import shape_inference
    declared = {vi.name for vi in list(g.value_info) + list(g.output)}
    wanted = [o for o in e.node.output if o and o not in declared]
    known = [i for i in dict.fromkeys(e.node.input) if i and i in e.types]
    if not wanted:
        return
    newest = max([EMIT_OPSET] + [a.i for n in e.nodes for a in n.attribute if a.name == OPSET_ATTR])
    # (the builder's own declarations: outputs of aotc's node kinds, which ONNX does not know)
    own = {k: helper.make_value_info(k, t) for k, t in e.declared.items()}
    sub = helper.make_graph(e.nodes, "emitted", [helper.make_value_info(i, e.types[i]) for i in known],
                            [helper.make_empty_tensor_value_info(o) for o in wanted if o not in own],
                            value_info=[vi for k, vi in own.items() if k not in wanted])
    try:
        inferred = shape_inference.infer_shapes(helper.make_model(sub, opset_imports=[
            helper.make_opsetid("", newest)]), strict_mode=False).graph
    except Exception:       # (then the later rounds do without these types)
        inferred = sub
    found = {vi.name: vi for vi in list(inferred.value_info) + list(inferred.output)
             if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
    found.update(own)
    g.value_info.extend(found[o] for o in wanted if o in found)


def _bind_input_shapes(g: onnx.GraphProto, shapes) -> None:
    """The user's --shape dims on the graph inputs' declarations (of the rewriting copy), so that
    builders needing a dimension (the contrib attentions' batch and sequence) see them. The
    intermediate values the model declares with symbolic dims (onnxruntime-genai's builder
    declares every one so) lose those declarations, and so do Constant nodes' outputs (that
    builder declares its [1] constants as scalars): shape inference gives them from the bound
    inputs and the constants' values instead, and the rewrites' rounds past the contrib nodes."""
    constants = {o for n in g.node if n.op_type == "Constant" for o in n.output}
    kept = [vi for vi in g.value_info if vi.name not in constants and (not vi.type.HasField("tensor_type")
            or all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim))]
    if len(kept) < len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(kept)
    for vi in g.input:
        dims = shapes.get(vi.name)
        if dims is None or not vi.type.HasField("tensor_type"):
            continue
        shape = vi.type.tensor_type.shape
        if not shape.dim and not vi.type.tensor_type.HasField("shape"):
            for d in dims:
                shape.dim.add().dim_value = int(d)
        elif len(shape.dim) == len(dims):
            # only the symbolic dims: a fixed one the user contradicts is import_model's error
            for dim, d in zip(shape.dim, dims):
                if not dim.HasField("dim_value"):
                    dim.dim_value = int(d)


def expand_rewrites(model: onnx.ModelProto, shapes=None) -> onnx.ModelProto:
    """The model with its nodes that all_builders() knows (ai.onnx.ml, the optimizer steps of
    ai.onnx.preview.training, BatchNormalization in training mode, ONNX Runtime's contrib
    operators) replaced by ai.onnx nodes; the model itself when it has none. `shapes` (input
    name -> dims) are the user's bindings of symbolic input dimensions."""
    builders = all_builders()
    opset = _model_opset(model)
    if not any(_rewritten(n, builders, opset) for g in all_graphs(model.graph) for n in g.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if shapes:
        _bind_input_shapes(out.graph, shapes)
    if not any(i.domain in ("", "ai.onnx") for i in model.opset_import):
        # an ML-only model: its default-domain nodes are all ours
        out.opset_import.append(helper.make_opsetid("", EMIT_OPSET))
    # rounds: a node that needs the rank of another ML node's output waits until that one is
    # rewritten and shape inference can follow it
    while True:
        types, progress, waiting = value_types(out), False, []
        for g in all_graphs(out.graph):
            nodes = []
            for n in g.node:
                if _rewritten(n, builders, opset):
                    e = Emit(n, types)
                    try:
                        builders[_key(n)](e, attrs_of(n))
                    except Deferred as d:
                        waiting.append((e.label, str(d)))
                        nodes.append(n)
                        continue
                    except (KeyError, ValueError, IndexError, TypeError, AttributeError) as ex:
                        # attribute tables a builder's own checks did not foresee
                        raise ModelError(f"{e.label}: its attributes do not describe a valid {n.op_type} "
                                         f"({type(ex).__name__}: {ex})") from None
                    nodes.extend(e.nodes)
                    progress = True
                    _declare_outputs(g, e)
                else:
                    nodes.append(n)
            del g.node[:]
            g.node.extend(nodes)
        if not waiting:
            return out
        if not progress:
            raise UnsupportedError([f"{label}: input {value!r} of unknown rank or shape" for label, value in waiting],
                                   "give the model's inputs and value_info shapes (onnx.shape_inference), and bind "
                                   "their symbolic dims (aotc compile --shape NAME=DIMS)")
