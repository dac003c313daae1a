"""Scaled dot-product attention as exporters write it, rewritten into one Attention node.

    MatMul(Q, Kᵀ) -> [Mul / Div by a scalar constant]* -> [Add(float mask) | Where(bool, ., c)]
      -> Softmax(last axis) -> MatMul(., V)

becomes Attention(Q, K, V, mask) (ops/attention.py), one kernel computing each head's scores
in a scratch of its own, instead of a score tensor for every head written by one kernel and
read by the next two. When Q, K and V are the usual head split of a (batch, seq, hidden)
tensor (Reshape to (batch, seq, heads, head size), then Transpose) and the output is merged
back the same way, the node takes the 3-D tensors as they are (the ONNX op's 3-D form), so the
four Transposes around the heads are gone too.

The rewrite keeps the chain's exact meaning: the node carries PLAIN_SOFTMAX (softmax as the
Softmax op computes it, without Attention's fully-masked-row rule) and, for a Where mask,
MASK_FILL (masked scores become that constant, as Where makes them). Only the scale changes
rounding: scores are multiplied by the product of the scalars (1/c for a Div) once.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import ShapeError
from ..ir import dtypes
from ..ir.dims import RunTimeDim
from ..ir.graph import Graph, Node, Value
from ..ir.internal import MASK_FILL, PLAIN_SOFTMAX
from ..ops.common import broadcast
from .simplify import eliminate_dead_code

SPLIT = [0, 2, 1, 3]          # (batch, seq, heads, size) <-> (batch, heads, seq, size)
SPLIT_T = [0, 2, 3, 1]        # (batch, seq, heads, size) -> (batch, heads, size, seq): a split K, transposed


class _Match:
    def __init__(self):
        self.scale = 1.0
        self.mask: Optional[str] = None
        self.fill: Optional[float] = None
        self.nodes: list[Node] = []       # what the Attention node replaces


def fuse_attention(g: Graph) -> Graph:
    producers = g.producers()
    consumers = g.consumers()
    outputs = set(g.outputs)

    def only_use(value: str) -> Optional[Node]:
        """The one node reading `value`, when that is all that reads it."""
        users = consumers.get(value, [])
        if value in outputs or len(users) != 1:
            return None
        return users[0]

    def scalar(name: str) -> Optional[float]:
        c = g.const(name)
        if c is None or c.size != 1 or c.dtype.kind != "f":
            return None
        return float(np.asarray(c).reshape(-1)[0])

    order = {id(n): k for k, n in enumerate(g.nodes)}
    at: dict[int, list[Node]] = {}        # id(node) -> the new nodes that take its place
    gone: set[int] = set()
    for sm in list(g.nodes):
        if sm.op_type != "Softmax" or id(sm) in gone:
            continue
        m = _match(g, sm, producers, only_use, scalar)
        if m is None:
            continue
        new, old = m
        # the new nodes go where the last node they replace was: everything they read is made
        # before it, everything reading their output after it
        last = max(old, key=lambda n: order[id(n)])
        at[id(last)] = new
        gone |= {id(n) for n in old}
    if not at:
        return g
    nodes = []
    for n in g.nodes:
        nodes += at.get(id(n), [])
        if id(n) not in gone:
            nodes.append(n)
    g.nodes = nodes
    return eliminate_dead_code(g)


def _match(g: Graph, sm: Node, producers, only_use, scalar) -> Optional[tuple[list[Node], list[Node]]]:
    """(new nodes, the nodes they replace) for the attention ending at Softmax `sm`, or None."""
    x = g.values[sm.inputs[0]]
    if len(x.shape) != 4 or x.dtype != dtypes.FLOAT32:
        return None
    if int(sm.attr("axis", -1)) not in (-1, 3):
        return None
    mm2 = only_use(sm.outputs[0])
    if mm2 is None or mm2.op_type != "MatMul" or mm2.inputs[0] != sm.outputs[0] or mm2.inputs[1] == sm.outputs[0]:
        return None
    B, H, Sq, Sk = x.shape
    m = _Match()
    # back from the Softmax: at most one mask, then scalar scales, then the first MatMul
    cur = sm.inputs[0]
    masked = False
    while True:
        p = producers.get(cur)
        if p is None or only_use(cur) is None:
            return None
        if p.op_type == "MatMul":
            break
        if p.op_type in ("Mul", "Div"):
            for s_pos in ((0, 1) if p.op_type == "Mul" else (0,)):
                c = scalar(p.inputs[1 - s_pos])
                if c is not None and tuple(g.values[p.inputs[s_pos]].shape) == x.shape:
                    m.scale *= c if p.op_type == "Mul" else 1.0 / c
                    cur = p.inputs[s_pos]
                    break
            else:
                return None
            m.nodes.append(p)
            continue
        if masked:
            return None
        masked = True
        if p.op_type == "Add":
            for s_pos in (0, 1):
                other = g.values[p.inputs[1 - s_pos]]
                if tuple(g.values[p.inputs[s_pos]].shape) == x.shape and _mask_fits(other, x.shape, dtypes.FLOAT32):
                    m.mask, cur = other.name, p.inputs[s_pos]
                    break
            else:
                return None
        elif p.op_type == "Where":
            cond, fill = g.values[p.inputs[0]], scalar(p.inputs[2])
            if fill is None or tuple(g.values[p.inputs[1]].shape) != x.shape \
                    or not _mask_fits(cond, x.shape, dtypes.BOOL):
                return None
            m.mask, m.fill, cur = cond.name, fill, p.inputs[1]
        else:
            return None
        if any(q.op_type in ("Mul", "Div") for q in m.nodes):
            return None            # a scale after the mask scales the mask too
        m.nodes.append(p)
    mm1 = producers[cur]
    qx, ktx = g.values[mm1.inputs[0]], g.values[mm1.inputs[1]]
    vx = g.values[mm2.inputs[1]]
    if len(qx.shape) != 4 or len(ktx.shape) != 4 or len(vx.shape) != 4:
        return None
    D = qx.shape[3]
    if tuple(qx.shape) != (B, H, Sq, D) or tuple(ktx.shape) != (B, H, D, Sk) or tuple(vx.shape[:3]) != (B, H, Sk):
        return None
    if any(g.values[v].const is not None for v in (qx.name, ktx.name, vx.name)):
        return None
    gone = [mm1] + m.nodes + [sm, mm2]
    attrs = {"scale": float(np.float32(m.scale)), PLAIN_SOFTMAX: 1}
    if m.fill is not None:
        attrs[MASK_FILL] = m.fill
    mask = [m.mask] if m.mask else []
    name = f"{sm.name}_attention" if sm.name else "attention"

    # the 3-D form when every operand is a head split and the result is merged back
    q3 = _split_source(g, qx.name, SPLIT, producers)
    k3 = _split_source(g, ktx.name, SPLIT_T, producers)
    v3 = _split_source(g, vx.name, SPLIT, producers)
    merge = _merge_target(g, mm2.outputs[0], only_use)
    if q3 and k3 and v3 and merge:
        tr, rs = merge
        attrs.update(q_num_heads=H, kv_num_heads=H)
        y3 = g.fresh_name(f"{name}_out")
        g.values[y3] = Value(y3, x.dtype, (B, Sq, H * vx.shape[3]))
        rs.inputs[0] = y3                 # the Reshape now views the 3-D output
        return [Node("Attention", [q3, k3, v3] + mask, [y3], attrs, name)], gone + [tr]
    # 4-D: K transposed back (cancel_transposes folds it into the Transpose that made Kᵀ)
    k4 = g.fresh_name(f"{ktx.name}_keys")
    g.values[k4] = Value(k4, ktx.dtype, (B, H, Sk, D))
    tk = Node("Transpose", [ktx.name], [k4], {"perm": [0, 1, 3, 2]}, f"{name}_keys")
    node = Node("Attention", [qx.name, k4, vx.name] + mask, [mm2.outputs[0]], attrs, name)
    return [tk, node], gone


def _mask_fits(v, scores: tuple, dtype) -> bool:
    """A mask value the Attention node takes as it is: the dtype, rank 1-4, all keys in its last
    dim, broadcasting to the scores."""
    if v.dtype != dtype or not 1 <= len(v.shape) <= 4 or v.shape[-1] != scores[-1]:
        return False
    try:
        return tuple(broadcast(tuple(v.shape), scores)) == tuple(scores)
    except (ShapeError, RunTimeDim):
        return False


def _split_source(g: Graph, value: str, perm: list, producers) -> Optional[str]:
    """The (batch, seq, heads * size) tensor that `value` is the head split of, by a Reshape to
    (batch, seq, heads, size) and a Transpose by `perm`; else None."""
    tr = producers.get(value)
    if tr is None or tr.op_type != "Transpose" or list(tr.attr("perm", [])) != perm:
        return None
    rs = producers.get(tr.inputs[0])
    if rs is None or rs.op_type != "Reshape":
        return None
    src = g.values[rs.inputs[0]]
    B, S, H, D = g.values[rs.outputs[0]].shape
    if tuple(src.shape) != (B, S, H * D) or src.const is not None:
        return None
    return src.name


def _merge_target(g: Graph, value: str, only_use) -> Optional[tuple[Node, Node]]:
    """(Transpose, Reshape) merging the heads of `value` (batch, heads, seq, size) back: the
    Transpose to (batch, seq, heads, size) is all that reads it, and a Reshape (to any shape:
    the 3-D output has the same elements in the same order) all that reads the Transpose."""
    tr = only_use(value)
    if tr is None or tr.op_type != "Transpose" or list(tr.attr("perm", [])) != SPLIT:
        return None
    rs = only_use(tr.outputs[0])
    if rs is None or rs.op_type != "Reshape":
        return None
    return tr, rs


def caches_into_attention(g: Graph) -> Graph:
    """A Hugging Face export's KV cache (torch.onnx of a transformers decoder with past_key_values)
    joined into the Attention node that reads it:

        present = Concat(past, new, axis=2)    [batch, kv heads, past + seq, head size]
        [Reshape -> Expand -> Reshape: each kv head repeated for its group of query heads]
        -> Attention(Q, present_k, present_v, mask)

    becomes Attention(Q, new_k, new_v, mask, past_k, past_v) with present_k and present_v as its
    outputs 1 and 2 (the opset-23 op's own cache form, ops/attention.py): the query heads of a
    group read their kv head where it is, instead of a copy repeated for each of them (GQA's
    repeat_kv wrote the whole cache `group` times a step), and the present is filled by the
    kernel that reads it, which on CPU targets may update the caller's array in place
    (passes/caches.py). The meaning is the same: the op's present is the Concat of the past and
    the new positions, its grouped heads read kv head h * kv / q as repeat_kv laid them."""
    producers = g.producers()
    consumers = g.consumers()
    outputs = set(g.outputs)
    gone: set[int] = set()
    for n in g.nodes:
        if n.op_type != "Attention" or not 3 <= len(n.inputs) <= 4 or any(n.outputs[1:]):
            continue
        if int(n.attr("is_causal", 0)) or int(n.attr("left_window_size", -1)) >= 0 \
                or int(n.attr("right_window_size", -1)) >= 0:
            continue          # (their frontier would move by the past's length)
        q = g.values[n.inputs[0]]
        if len(q.shape) != 4:
            continue
        joins = [_cache_join(g, n, pos, producers, consumers, outputs) for pos in (1, 2)]
        if None in joins or joins[0][3] != joins[1][3]:
            continue          # (K and V repeated alike: the op's K and V have one head count)
        # (query head h read repeated head h // (Hq / (H * group)), which is kv head
        # h // (Hq / H): the one the op's grouped heads read)
        (ck, past_k, new_k, _), (cv, past_v, new_v, _) = joins
        mask = n.inputs[3] if len(n.inputs) > 3 else ""
        n.inputs = [n.inputs[0], new_k, new_v, mask, past_k, past_v]
        n.outputs = [n.outputs[0], ck.outputs[0], cv.outputs[0]]
        gone |= {id(ck), id(cv)}
    if not gone:
        return g
    g.nodes = [n for n in g.nodes if id(n) not in gone]
    return eliminate_dead_code(g)


def _cache_join(g: Graph, att: Node, pos: int, producers, consumers, outputs
                ) -> Optional[tuple[Node, str, str, int]]:
    """(the Concat, past, new, group) when Attention `att`'s input `pos` is the Concat of a cache
    along its sequence axis, read through GQA's repeat_kv or as it is, and nothing else reads
    what `att` reads but the chain (the Concat's result may also be a graph output); else None."""
    def only(value: str, reader: Node) -> bool:
        return value not in outputs and [id(c) for c in consumers.get(value, [])] == [id(reader)]

    value, reader, group = att.inputs[pos], att, 1
    if [id(c) for c in consumers.get(value, [])].count(id(att)) != 1:
        return None                       # (K and V one tensor: not a cache's two halves)
    r2 = producers.get(value)
    if r2 is not None and r2.op_type == "Reshape":
        ex = producers.get(r2.inputs[0])
        r1 = producers.get(ex.inputs[0]) if ex is not None and ex.op_type == "Expand" else None
        if r1 is None or r1.op_type != "Reshape":
            return None
        base = g.values[r1.inputs[0]]
        if len(base.shape) != 4:
            return None
        B, H, T, D = base.shape
        group = g.values[ex.outputs[0]].shape[2]
        if (tuple(g.values[r1.outputs[0]].shape) != (B, H, 1, T, D)
                or tuple(g.values[ex.outputs[0]].shape) != (B, H, group, T, D)
                or tuple(g.values[value].shape) != (B, H * group, T, D)
                or not only(value, att) or not only(ex.outputs[0], r2) or not only(r1.outputs[0], ex)):
            return None
        value, reader = base.name, r1
    cat = producers.get(value)
    if cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2 or int(cat.attr("axis")) not in (2, -2):
        return None
    if [id(c) for c in consumers.get(value, [])] != [id(reader)]:
        return None
    past, new, out = (g.values[v] for v in (cat.inputs[0], cat.inputs[1], value))
    if len(out.shape) != 4 or past.dtype != out.dtype or new.dtype != out.dtype or past.const is not None:
        return None
    if tuple(past.shape[:2]) + (past.shape[3],) != tuple(new.shape[:2]) + (new.shape[3],):
        return None
    return cat, past.name, new.name, group
