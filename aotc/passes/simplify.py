"""Graph simplification passes. Each takes a Graph and returns it (edited in place)."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value
from ..ir.internal import COPY
from ..ops import registry
from .infer import infer_shapes
from .symbolic import shape_value


def fold_constants(g: Graph) -> Graph:
    """Re-run inference + folding (after rewrites made new constant-only nodes)."""
    return infer_shapes(g, fold=True)


def eliminate_dead_code(g: Graph) -> Graph:
    needed = set(g.outputs)
    kept: list[Node] = []
    for n in reversed(g.nodes):
        if any(o in needed for o in n.outputs if o):
            kept.append(n)
            needed.update(i for i in n.inputs if i)
    g.nodes = kept[::-1]
    g.prune_values()
    return g


def remove_identities(g: Graph) -> Graph:
    """Identity, Dropout in inference (with its mask unused), Cast to the type it already has,
    Expand or Tile to the shape it already has, and a Concat of one input (TorchScript exports
    of a cache write one for the first layer's past)."""
    consumers = g.consumers()
    kept = []
    for n in g.nodes:
        removable = False
        if n.op_type == "Identity":
            removable = True
        elif n.op_type == "Dropout":
            mask_used = len(n.outputs) > 1 and n.outputs[1] and (n.outputs[1] in consumers or n.outputs[1] in g.outputs)
            training = registry.draws_random(n, [g.values[i] if i else None for i in n.inputs])
            removable = not mask_used and not training
        elif n.op_type == "Cast":
            removable = g.values[n.inputs[0]].dtype == g.values[n.outputs[0]].dtype
        elif n.op_type == "Concat":
            removable = len(n.inputs) == 1
        elif n.op_type in ("Expand", "Tile"):
            src, out = g.values[n.inputs[0]], g.values[n.outputs[0]]
            removable = src.dtype == out.dtype and tuple(src.shape) == tuple(out.shape)
        if removable and g.forward(n.outputs[0], n.inputs[0]):
            continue
        kept.append(n)
    g.nodes = kept
    g.prune_values()
    return g


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, list):
        return tuple(_attr_key(x) for x in v)
    if hasattr(v, "SerializeToString"):
        return v.SerializeToString()
    return v


def _const_key(v: Value):
    return ("const", v.dtype.str, v.shape, v.const.tobytes()) if v.const is not None and v.size <= 64 else None


def eliminate_common_subexpressions(g: Graph) -> Graph:
    """Nodes with the same op, attributes and inputs compute the same thing: keep one.
    Small constants with equal contents are merged first so their users compare equal.
    Random nodes too when seeded (the same seed draws the same values); unseeded ones each
    draw a stream of their own, so they stay."""
    canon: dict = {}
    rename: dict[str, str] = {}
    for name, v in list(g.values.items()):
        k = _const_key(v)
        if k is not None:
            rename[name] = canon.setdefault(k, name)
    seen: dict = {}
    kept = []
    for n in g.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
        if n.attr("seed") is None and registry.draws_random(n, [g.values[i] if i else None for i in n.inputs]):
            kept.append(n)         # an unseeded random node draws its own stream (ops/random.py)
            continue
        key = (n.op_type, n.domain, tuple(n.inputs), tuple(sorted((k, _attr_key(v)) for k, v in n.attrs.items())))
        prev = seen.get(key)
        if prev is not None and len(prev.outputs) == len(n.outputs):
            ok = all(g.forward(o, p) if o else True for o, p in zip(n.outputs, prev.outputs))
            if ok:
                continue
        seen[key] = n
        kept.append(n)
    g.nodes = kept
    g.outputs = [o for o in g.outputs]
    g.prune_values()
    return g


def _forward_while_rewriting(g: Graph, kept: list[Node], rest: list[Node], old: str, new: str):
    """g.forward(old, new) from inside a pass that rebuilds g.nodes as `kept` (+ `rest`, the
    nodes not visited yet). When `old` is a graph output, forward renames `new` to `old` in
    every node, so it must see the nodes as rewritten so far, and the caller's producer map
    goes stale. Returns a fresh producer map, or None when nothing was forwarded."""
    g.nodes = kept + rest
    if not g.forward(old, new):
        return None
    return g.producers()


def canonicalize_views(g: Graph) -> Graph:
    """Flatten/Squeeze/Unsqueeze become Reshape to their (static) output shape; chains of
    Reshapes collapse to one; a Reshape to the shape it already has disappears."""
    producers = g.producers()
    kept: list[Node] = []
    nodes = list(g.nodes)
    for k, n in enumerate(nodes):
        op = registry.get(n.op_type)
        if op is not None and op.view:
            out = g.values[n.outputs[0]]
            src = n.inputs[0]
            p = producers.get(src)
            while p is not None and p.op_type == "Reshape":
                src = p.inputs[0]
                p = producers.get(src)
            if tuple(g.values[src].shape) == tuple(out.shape):
                fresh = _forward_while_rewriting(g, kept, nodes[k + 1:], n.outputs[0], src)
                if fresh is not None:
                    producers = fresh
                    continue
            shape_name = shape_value(g, out.shape, f"{n.name}_shape")
            # (a 0 in the shape is a size of 0, not "copy the input's size", when allowzero is set)
            n2 = Node("Reshape", [src, shape_name], n.outputs, {"allowzero": 1} if 0 in out.shape else {}, n.name)
            producers[n.outputs[0]] = n2
            kept.append(n2)
            continue
        kept.append(n)
    g.nodes = kept
    return eliminate_dead_code(g)


def cancel_transposes(g: Graph) -> Graph:
    """Transpose(Transpose(x)) -> one Transpose with the composed permutation; an identity
    permutation disappears."""
    producers = g.producers()
    kept: list[Node] = []
    nodes = list(g.nodes)
    for k, n in enumerate(nodes):
        if n.op_type == "Transpose":
            rank = len(g.values[n.inputs[0]].shape)
            perm = list(n.attr("perm", list(range(rank))[::-1]))
            p = producers.get(n.inputs[0])
            if p is not None and p.op_type == "Transpose":
                inner = list(p.attr("perm", list(range(rank))[::-1]))
                perm = [inner[k] for k in perm]
                n = Node("Transpose", [p.inputs[0]], n.outputs, {"perm": perm}, n.name)
                producers[n.outputs[0]] = n
            if perm == list(range(rank)):
                fresh = _forward_while_rewriting(g, kept, nodes[k + 1:], n.outputs[0], n.inputs[0])
                if fresh is not None:
                    producers = fresh
                    continue
        kept.append(n)
    g.nodes = kept
    return eliminate_dead_code(g)


def decompose_batchnorm(g: Graph) -> Graph:
    """Inference BatchNormalization = x * scale + shift with per-channel constants; as two
    elementwise ops it fuses into the preceding Conv/Gemm (fold_scale_shift) or any chain."""
    kept = []
    for n in g.nodes:
        if n.op_type == "BatchNormalization" and all(g.const(i) is not None for i in n.inputs[1:5]) \
                and all(not o for o in n.outputs[1:]):
            x = g.values[n.inputs[0]]
            gamma, beta, mean, var = (g.const(i).astype(np.float64) for i in n.inputs[1:5])
            eps = float(n.attr("epsilon", 1e-5))
            scale = gamma / np.sqrt(var + eps)
            shift = beta - mean * scale
            bshape = (len(scale),) + (1,) * (len(x.shape) - 2)
            s = g.add_const(scale.astype(x.dtype).reshape(bshape), f"{n.name}_scale")
            b = g.add_const(shift.astype(x.dtype).reshape(bshape), f"{n.name}_shift")
            mid = g.fresh_name(f"{n.name}_scaled")
            g.values[mid] = Value(mid, x.dtype, x.shape)
            kept.append(Node("Mul", [n.inputs[0], s], [mid], {}, f"{n.name}_mul"))
            kept.append(Node("Add", [mid, b], [n.outputs[0]], {}, f"{n.name}_add"))
            continue
        kept.append(n)
    g.nodes = kept
    g.prune_values()
    return g


def _channel_vector(g: Graph, const_name: str, out_shape, channel_axis: int):
    """If a constant broadcasts against out_shape varying only along channel_axis, return it
    as a 1-D vector over that axis."""
    c = g.const(const_name)
    if c is None or c.ndim > len(out_shape):
        return None
    full = (1,) * (len(out_shape) - c.ndim) + tuple(c.shape)
    if any(d != 1 for k, d in enumerate(full) if k != channel_axis):
        return None
    vec = c.reshape(-1)
    n = out_shape[channel_axis]
    return np.broadcast_to(vec, (n,)).astype(np.float64) if vec.size in (1, n) else None


def fold_scale_shift(g: Graph) -> Graph:
    """Conv (or Gemm/MatMul with constant weights) followed by a per-output-channel constant
    Mul or Add: fold the Mul into the weights and the Add into the bias."""
    changed = True
    while changed:
        changed = False
        consumers = g.consumers()
        producers = g.producers()
        for n in list(g.nodes):
            if n.op_type not in ("Mul", "Add") or len(n.inputs) != 2:
                continue
            for xi, ci in ((0, 1), (1, 0)):
                src = producers.get(n.inputs[xi])
                if src is None or len(consumers.get(n.inputs[xi], [])) != 1 or n.inputs[xi] in g.outputs:
                    continue
                if _fold_into(g, src, n, n.inputs[ci]):
                    g.forward(n.outputs[0], n.inputs[xi]) or _rename_output(g, src, n)
                    g.nodes.remove(n)
                    changed = True
                    break
            if changed:
                break
    g.prune_values()
    return g


def _rename_output(g: Graph, src: Node, n: Node) -> bool:
    old = src.outputs[0]
    src.outputs[0] = n.outputs[0]
    for m in g.nodes:
        m.inputs = [n.outputs[0] if i == old else i for i in m.inputs]
    return True


def _fold_into(g: Graph, src: Node, n: Node, cname: str) -> bool:
    out = g.values[src.outputs[0]]
    if out.dtype.kind != "f" or len([o for o in src.outputs if o]) != 1:
        return False
    if src.op_type == "Conv" and g.const(src.inputs[1]) is not None and len(out.shape) >= 3:
        vec = _channel_vector(g, cname, out.shape, 1)
        if vec is None:
            return False
        w = g.const(src.inputs[1]).astype(np.float64)
        bias = g.const(src.inputs[2]).astype(np.float64) if len(src.inputs) > 2 and src.inputs[2] else \
            (np.zeros(out.shape[1]) if len(src.inputs) <= 2 or not src.inputs[2] else None)
        if bias is None:
            return False
        if n.op_type == "Mul":
            w = w * vec.reshape((-1,) + (1,) * (w.ndim - 1))
            bias = bias * vec
        else:
            bias = bias + vec
        src.inputs[1] = g.add_const(w.astype(out.dtype), f"{src.name}_w")
        bname = g.add_const(bias.astype(out.dtype), f"{src.name}_b")
        if len(src.inputs) > 2:
            src.inputs[2] = bname
        else:
            src.inputs.append(bname)
        return True
    if src.op_type == "MatMul" and n.op_type == "Mul" and g.const(src.inputs[1]) is not None \
            and g.values[src.inputs[1]].const.ndim == 2:
        vec = _channel_vector(g, cname, out.shape, len(out.shape) - 1)
        if vec is None:
            return False
        w = g.const(src.inputs[1]).astype(np.float64) * vec.reshape(1, -1)
        src.inputs[1] = g.add_const(w.astype(out.dtype), f"{src.name}_w")
        return True
    if src.op_type == "Gemm" and not int(src.attr("transB", 0)) and g.const(src.inputs[1]) is not None \
            and len(out.shape) == 2:
        vec = _channel_vector(g, cname, out.shape, 1)
        if vec is None:
            return False
        beta = float(src.attr("beta", 1.0))
        has_c = len(src.inputs) > 2 and src.inputs[2]
        c = g.const(src.inputs[2]) if has_c else np.zeros(out.shape[1])
        if c is None:
            return False
        c = np.broadcast_to(c.astype(np.float64) * beta, out.shape)
        if n.op_type == "Mul":
            w = g.const(src.inputs[1]).astype(np.float64) * vec.reshape(1, -1)
            src.inputs[1] = g.add_const(w.astype(out.dtype), f"{src.name}_w")
            c = c * vec.reshape(1, -1)
        else:
            c = c + vec.reshape(1, -1)
        c = c[:1] if np.all(c == c[:1]) else c
        cname2 = g.add_const(c.astype(out.dtype), f"{src.name}_c")
        src.inputs = src.inputs[:2] + [cname2]
        src.attrs["beta"] = 1.0
        return True
    return False


def canonicalize_gemm(g: Graph) -> Graph:
    """Constant Gemm operands stored transposed are transposed once, at compile time."""
    for n in g.nodes:
        if n.op_type != "Gemm":
            continue
        for pos, key in ((0, "transA"), (1, "transB")):
            c = g.const(n.inputs[pos])
            if int(n.attr(key, 0)) and c is not None:
                n.inputs[pos] = g.add_const(np.ascontiguousarray(c.T), f"{n.name}_{'ab'[pos]}T")
                n.attrs[key] = 0
    g.prune_values()
    return g


def materialize_outputs(g: Graph) -> Graph:
    """Every graph output must be written into the caller's buffer: an output that is a
    graph input, a constant, a view of one, or shares storage with another output gets
    an explicit copy kernel."""
    def root(v: str) -> str:
        producers = g.producers()
        p = producers.get(v)
        while p is not None and registry.get(p.op_type).view:
            v = p.inputs[0]
            p = producers.get(v)
        return v

    claimed: set[str] = set()
    done: list[str] = []
    labels: dict[str, str] = dict(g.output_labels)
    for o in g.outputs:
        r = root(o)
        if not (r in g.inputs or g.values[r].const is not None or r in claimed or o in done):
            claimed.add(r)
            done.append(o)
            continue
        v = g.values[o]
        if o in g.inputs or o in done:
            # the name is taken (a graph input, or this output listed twice): copy to a new name
            out_name = g.fresh_name(f"{o}_copy")
            g.values[out_name] = Value(out_name, v.dtype, v.shape)
            g.nodes.append(Node(COPY, [o], [out_name], {}, f"copy_{o}"))
            done.append(out_name)
            labels[out_name] = labels.get(o, o)
            continue
        # move the value to a new name, then copy it into the output's name
        src = g.fresh_name(f"{o}_src")
        g.values[src] = Value(src, v.dtype, v.shape, v.const)
        g.values[o] = Value(o, v.dtype, v.shape)
        for n in g.nodes:
            n.outputs = [src if x == o else x for x in n.outputs]
            n.inputs = [src if x == o else x for x in n.inputs]
        if o in claimed:            # an earlier output's storage root was this value: it moved
            claimed.discard(o)
            claimed.add(src)
        g.nodes.append(Node(COPY, [src], [o], {}, f"copy_{o}"))
        claimed.add(o)
        done.append(o)
    g.outputs = done
    # the ONNX name of each renamed output: the artifact's interface keeps the model's names
    g.output_labels = labels
    return g


def fold_pads_into_convs(g: Graph) -> Graph:
    """A Pad of zeros over the spatial axes only, read by a Conv, becomes that Conv's own
    padding (TensorFlow's converters write "SAME" padding of a strided convolution as a Pad
    before it): the Conv reads the Pad's input, its pads grown by the Pad's, and the Pad goes
    where nothing else reads it. The padded tensor is then never written; the convolution's
    kernels skip the taps outside the input as they do for their own pads."""
    from ..ops.pad import _pad_spec
    producers = g.producers()
    changed = False
    for n in g.nodes:
        if n.op_type != "Conv" or not n.inputs or n.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            continue
        pad = producers.get(n.inputs[0])
        if pad is None or pad.op_type != "Pad":
            continue
        ins = [g.values[i] if i else None for i in pad.inputs]
        if any(v is not None and v.const is None for v in ins[1:]):
            continue                                   # (pads, value or axes computed at run time)
        pb, pe, _, mode = _pad_spec(pad, ins)
        value = ins[2].const if len(ins) > 2 and ins[2] is not None else np.zeros(())
        if mode != "constant" or np.any(value != 0) or pb[:2] != [0, 0] or pe[:2] != [0, 0] \
                or min(pb + pe) < 0:
            continue
        r = len(pb) - 2
        own = [0] * (2 * r) if n.attr("auto_pad", "NOTSET") == "VALID" else \
            [int(p) for p in n.attr("pads", [0] * (2 * r))]
        n.attrs.pop("auto_pad", None)
        n.attrs["pads"] = [own[i] + pb[2 + i] for i in range(r)] + [own[r + i] + pe[2 + i] for i in range(r)]
        n.inputs[0] = pad.inputs[0]
        changed = True
    return eliminate_dead_code(g) if changed else g
