"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble) as
graphs of ai.onnx operators.

Both attribute layouts (the per-(tree, node) tuples of versions 1-3, the interior-node and
leaf arrays of TreeEnsemble-5) become one table over "slots": every node of every tree, a
leaf pointing to itself. Per slot: the feature compared, the threshold, the comparison, the
slots the true and false branches go to, whether a missing (NaN) feature takes the true branch,
and the leaf's contribution to each target (a row of zeros for interior nodes).

The traversal runs every tree of every input row at once, one level per step, for as many
steps as the deepest tree has levels, on an [N, T] tensor of current slots starting at the
roots:

    feature = Gather(features, slot);  x = GatherElements(X, feature, axis=1)
    go_true = x <= Gather(thresholds, slot)    (or the node's comparison; or NaN and tracked)
    slot    = Where(go_true, Gather(true_slot, slot), Gather(false_slot, slot))

(a row that reached a leaf stays there). The leaves' contributions, Gather(values, slot) of
[N, T, targets], are then aggregated over the trees (SUM, AVERAGE, MIN, MAX), the base values
added, and the post transform applied. A classifier takes the arg max's label, with ONNX
Runtime's rules for two classes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, numpy_helper

from ..errors import ModelError
from .emit import Emit, text
from .ml import class_labels, post_transform

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
_MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ,
          "BRANCH_NEQ": NEQ, "BRANCH_MEMBER": MEMBER, "LEAF": LEAF}
_COMPARE = {LEQ: "LessOrEqual", LT: "Less", GTE: "GreaterOrEqual", GT: "Greater", EQ: "Equal"}
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")            # TreeEnsemble-5's codes 0-3
_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


@dataclass
class Forest:
    feature: np.ndarray        # int64 [S]
    threshold: np.ndarray      # float [S]
    mode: np.ndarray           # int [S]
    true_slot: np.ndarray      # int64 [S]
    false_slot: np.ndarray     # int64 [S]
    missing_true: np.ndarray   # bool [S]
    members: list              # per slot: the set of a BRANCH_MEMBER node, else None
    roots: np.ndarray          # int64 [T]
    values: np.ndarray         # float32 [S, K]
    has_value: np.ndarray      # bool [S, K]

    def depth(self, label: str) -> int:
        """Levels of the deepest tree; refuses a cycle or a branch that leaves its slots."""
        S = len(self.mode)
        for a in (self.true_slot, self.false_slot):
            if len(a) and (a.min() < 0 or a.max() >= S):
                raise ModelError(f"{label}: a branch points outside the ensemble's nodes")
        deepest = 0
        for r in self.roots:
            level, frontier, seen = 0, {int(r)}, set()
            while any(self.mode[s] != LEAF for s in frontier):
                seen |= frontier
                frontier = {int(c) for s in frontier if self.mode[s] != LEAF
                            for c in (self.true_slot[s], self.false_slot[s])}
                level += 1
                if level > S:
                    raise ModelError(f"{label}: tree rooted at node {int(r)} has a cycle")
            deepest = max(deepest, level)
        return deepest


def _attr_array(a: dict, key: str, dtype):
    """attribute `key`, or its _as_tensor variant, as an array (None when absent)."""
    if key + "_as_tensor" in a:
        return numpy_helper.to_array(a[key + "_as_tensor"]).astype(dtype).reshape(-1)
    v = a.get(key)
    return None if v is None else np.asarray(v, dtype).reshape(-1)


def forest_v3(e: Emit, a: dict, prefix: str, n_out: int) -> Forest:
    """The table of a TreeEnsembleRegressor (prefix "target") or TreeEnsembleClassifier
    ("class") of versions 1-3: nodes named by (tree id, node id), weights by the same pair."""
    tree, node = _attr_array(a, "nodes_treeids", np.int64), _attr_array(a, "nodes_nodeids", np.int64)
    if tree is None or node is None or not len(tree):
        raise ModelError(f"{e.label} has no nodes")
    S = len(tree)
    cols = {k: _attr_array(a, k, dt) for k, dt in (("nodes_featureids", np.int64), ("nodes_values", np.float64),
                                                 ("nodes_truenodeids", np.int64), ("nodes_falsenodeids", np.int64))}
    modes = [text(m) for m in a.get("nodes_modes", [])]
    missing = _attr_array(a, "nodes_missing_value_tracks_true", np.int64)
    for k, v in list(cols.items()) + [("nodes_modes", modes), ("nodes_nodeids", node)]:
        if v is None or len(v) != S:
            raise ModelError(f"{e.label}: attribute {k} does not have one entry per node ({S})")
    if missing is not None and len(missing) not in (0, S):
        raise ModelError(f"{e.label}: nodes_missing_value_tracks_true does not have one entry per node ({S})")
    bad = sorted({m for m in modes if m not in _MODES})
    if bad:
        raise ModelError(f"{e.label}: unknown node mode(s) {', '.join(bad)}")
    mode = np.array([_MODES[m] for m in modes], np.int64)
    if (mode == MEMBER).any():
        e.refuse("BRANCH_MEMBER nodes in a version 1-3 tree ensemble")
    slot = {(int(t), int(n)): k for k, (t, n) in enumerate(zip(tree, node))}
    if len(slot) != S:
        raise ModelError(f"{e.label}: a (tree id, node id) pair appears twice")

    def target(k, child):
        if mode[k] == LEAF:
            return k
        s = slot.get((int(tree[k]), int(child)))
        if s is None:
            raise ModelError(f"{e.label}: node {int(node[k])} of tree {int(tree[k])} branches to node "
                             f"{int(child)}, which that tree does not have")
        return s
    true_slot = np.array([target(k, c) for k, c in enumerate(cols["nodes_truenodeids"])], np.int64)
    false_slot = np.array([target(k, c) for k, c in enumerate(cols["nodes_falsenodeids"])], np.int64)
    children = {int(s) for k in range(S) if mode[k] != LEAF for s in (true_slot[k], false_slot[k])}
    roots = []
    for t in sorted(set(int(x) for x in tree)):
        top = [k for k in range(S) if tree[k] == t and k not in children]
        if len(top) != 1:
            raise ModelError(f"{e.label}: tree {t} has {len(top)} root nodes (nodes no other node branches to)")
        roots.append(top[0])
    values, has = np.zeros((S, n_out), np.float32), np.zeros((S, n_out), bool)
    wt, wn = _attr_array(a, f"{prefix}_treeids", np.int64), _attr_array(a, f"{prefix}_nodeids", np.int64)
    wi, ww = _attr_array(a, f"{prefix}_ids", np.int64), _attr_array(a, f"{prefix}_weights", np.float64)
    if any(v is None for v in (wt, wn, wi, ww)) or not (len(wt) == len(wn) == len(wi) == len(ww)):
        raise ModelError(f"{e.label}: the {prefix}_treeids/nodeids/ids/weights attributes differ in length")
    for t, n, i, w in zip(wt, wn, wi, ww):
        s = slot.get((int(t), int(n)))
        if s is None or not 0 <= i < n_out:
            raise ModelError(f"{e.label}: a weight for node {int(n)} of tree {int(t)}, output {int(i)}, "
                             "which the ensemble does not have")
        values[s, i] += np.float32(w)
        has[s, i] = True
    # (a leaf's feature id is not read by the spec, but the traversal gathers it: 0, always in range)
    return Forest(np.where(mode == LEAF, 0, cols["nodes_featureids"]), cols["nodes_values"], mode, true_slot, false_slot,
                  np.zeros(S, bool) if missing is None or not len(missing) else missing.astype(bool),
                  [None] * S, np.array(roots, np.int64), values, has)


def forest_v5(e: Emit, a: dict) -> Forest:
    """The table of a TreeEnsemble-5: interior nodes are slots [0, I), leaves [I, I + L)."""
    feat, splits = _attr_array(a, "nodes_featureids", np.int64), a.get("nodes_splits")
    if feat is None or splits is None:
        raise ModelError(f"{e.label} has no nodes")
    I = len(feat)
    splits = numpy_helper.to_array(splits).reshape(-1).astype(np.float64)
    modes = numpy_helper.to_array(a["nodes_modes"]).reshape(-1).astype(np.int64) if "nodes_modes" in a else None
    cols = {k: _attr_array(a, k, np.int64) for k in ("nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                                                    "nodes_falseleafs")}
    missing = _attr_array(a, "nodes_missing_value_tracks_true", np.int64)
    for k, v in list(cols.items()) + [("nodes_splits", splits), ("nodes_modes", modes)]:
        if v is None or len(v) != I:
            raise ModelError(f"{e.label}: attribute {k} does not have one entry per interior node ({I})")
    if modes.min() < 0 or modes.max() > MEMBER:
        raise ModelError(f"{e.label}: a node mode outside 0-6")
    lt, lw = _attr_array(a, "leaf_targetids", np.int64), a.get("leaf_weights")
    if lt is None or lw is None:
        raise ModelError(f"{e.label} has no leaves")
    lw = numpy_helper.to_array(lw).reshape(-1)
    L, K = len(lt), int(a.get("n_targets", 1))
    if len(lw) != L:
        raise ModelError(f"{e.label}: {len(lw)} leaf weights for {L} leaf target ids")

    def slots(ids, leafs):
        if ((leafs == 0) & ((ids < 0) | (ids >= I))).any() or ((leafs != 0) & ((ids < 0) | (ids >= L))).any():
            raise ModelError(f"{e.label}: a branch points outside the nodes or leaves")
        return np.where(leafs != 0, ids + I, ids)
    members = [None] * (I + L)
    if (modes == MEMBER).any():
        mv = numpy_helper.to_array(a["membership_values"]).reshape(-1) if "membership_values" in a else np.zeros(0)
        sets = np.split(mv, np.flatnonzero(np.isnan(mv)))
        sets = [s[~np.isnan(s)] for s in sets]
        member_nodes = np.flatnonzero(modes == MEMBER)
        if len(sets) < len(member_nodes):
            raise ModelError(f"{e.label}: {len(sets)} membership sets for {len(member_nodes)} BRANCH_MEMBER nodes")
        for k, s in zip(member_nodes, sets):
            members[k] = s
    values, has = np.zeros((I + L, K), np.float32), np.zeros((I + L, K), bool)
    if len(lt) and (lt.min() < 0 or lt.max() >= K):
        raise ModelError(f"{e.label}: a leaf target id outside [0, n_targets = {K})")
    values[I + np.arange(L), lt] = lw.astype(np.float32)
    has[I + np.arange(L), lt] = True
    roots = _attr_array(a, "tree_roots", np.int64)
    if roots is None or not len(roots) or roots.min() < 0 or roots.max() >= I:
        raise ModelError(f"{e.label}: tree_roots must index interior nodes")
    mode = np.concatenate([modes, np.full(L, LEAF)])
    ar = np.arange(I + L, dtype=np.int64)
    true_slot = np.concatenate([slots(cols["nodes_truenodeids"], cols["nodes_trueleafs"]), ar[I:]])
    false_slot = np.concatenate([slots(cols["nodes_falsenodeids"], cols["nodes_falseleafs"]), ar[I:]])
    miss = np.zeros(I + L, bool)
    if missing is not None and len(missing):
        miss[:I] = missing.astype(bool)
    return Forest(np.concatenate([feat, np.zeros(L, np.int64)]), np.concatenate([splits, np.zeros(L)]), mode,
                  true_slot, false_slot, miss, members, roots, values, has)


def _traverse(e: Emit, f: Forest, x: str) -> str:
    """The [N, T] slots every tree reaches for every row of x (see the module docstring)."""
    depth = f.depth(e.label)
    np_t = np.float64 if e.elem_type(x) == TensorProto.DOUBLE else np.float32
    T = len(f.roots)
    n = e.op("Slice", [e.op("Shape", [x]), e.const(np.array([0], np.int64)), e.const(np.array([1], np.int64))])
    slot = e.op("Expand", [e.const(f.roots.reshape(1, T), "roots"),
                           e.op("Concat", [n, e.const(np.array([T], np.int64))], axis=0)])
    interior = f.mode[f.mode != LEAF]
    used = sorted(set(int(m) for m in interior))
    table = {"feature": e.const(f.feature, "features"), "threshold": e.const(f.threshold.astype(np_t), "thresholds"),
             "true": e.const(f.true_slot, "true_slots"), "false": e.const(f.false_slot, "false_slots")}
    if len(used) > 1:
        table["mode"] = e.const(f.mode, "modes")
    if f.missing_true.any():
        table["missing"] = e.const(f.missing_true, "missing_true")
    if MEMBER in used:
        width = max(len(s) for s in f.members if s is not None)
        sets = np.full((len(f.mode), max(width, 1)), np.nan, np_t)
        for k, s in enumerate(f.members):
            if s is not None:
                sets[k, :len(s)] = s
        table["members"] = e.const(sets, "members")
    for _ in range(depth):
        v = e.op("GatherElements", [x, e.op("Gather", [table["feature"], slot], axis=0)], axis=1)
        thr = e.op("Gather", [table["threshold"], slot], axis=0)

        def compare(code):
            if code == NEQ:
                return e.op("Not", [e.op("Equal", [v, thr])])
            if code == MEMBER:
                eq = e.op("Equal", [e.unsqueeze(v, -1), e.op("Gather", [table["members"], slot], axis=0)])
                return e.op("Cast", [e.reduce("ReduceMax", e.op("Cast", [eq], to=TensorProto.INT32), -1, keepdims=0)],
                            to=TensorProto.BOOL)
            return e.op(_COMPARE[code], [v, thr])
        go = compare(used[-1]) if used else e.const(np.array(False))
        if len(used) > 1:
            mode = e.op("Gather", [table["mode"], slot], axis=0)
            for code in reversed(used[:-1]):
                go = e.op("Where", [e.op("Equal", [mode, e.const(np.array(code, np.int64))]), compare(code), go])
        if "missing" in table:
            go = e.op("Or", [go, e.op("And", [e.op("IsNaN", [v]), e.op("Gather", [table["missing"], slot], axis=0)])])
        slot = e.op("Where", [go, e.op("Gather", [table["true"], slot], axis=0),
                              e.op("Gather", [table["false"], slot], axis=0)])
    return slot


def _aggregate(e: Emit, f: Forest, slot: str, how: str, base) -> str:
    """[N, K] scores: the leaves' values aggregated over the trees, plus the base values."""
    T = len(f.roots)
    if how in ("SUM", "AVERAGE"):
        total = e.reduce("ReduceSum", e.op("Gather", [e.const(f.values, "leaf_values"), slot], axis=0), 1, keepdims=0)
        if how == "AVERAGE":
            total = e.op("Div", [total, e.const(np.float32(T))])
    elif how in ("MIN", "MAX"):
        # a tree whose leaf gives no value to a target does not take part; no tree at all: 0
        fill = np.float32(np.inf if how == "MIN" else -np.inf)
        vals = np.where(f.has_value, f.values, fill).astype(np.float32)
        red = "ReduceMin" if how == "MIN" else "ReduceMax"
        g = e.op("Gather", [e.const(vals, "leaf_values"), slot], axis=0)
        total = e.reduce(red, g, 1, keepdims=0)
        total = e.op("Where", [e.op("IsInf", [total]), e.const(np.float32(0)), total])
    else:
        raise ModelError(f"{e.label}: unknown aggregate_function {how!r}")
    if base is not None and len(base):
        total = e.op("Add", [total, e.const(np.asarray(base, np.float32), "base_values")])
    return total


def _regressor(e: Emit, a: dict):
    K = int(a.get("n_targets", 1))
    f = forest_v3(e, a, "target", K)
    x = e.node.input[0]
    x = x if e.elem_type(x) in (TensorProto.FLOAT, TensorProto.DOUBLE) else e.float32(x)
    scores = _aggregate(e, f, _traverse(e, f, x), text(a.get("aggregate_function", "SUM")),
                        _attr_array(a, "base_values", np.float64))
    post_transform(e, scores, text(a.get("post_transform", "NONE")), out=e.node.output[0])


def _tree_ensemble(e: Emit, a: dict):
    f = forest_v5(e, a)
    x = e.node.input[0]
    agg, post = int(a.get("aggregate_function", 1)), int(a.get("post_transform", 0))
    if not 0 <= agg < 4 or not 0 <= post < 5:
        raise ModelError(f"{e.label}: aggregate_function {agg} or post_transform {post} out of range")
    t = e.elem_type(x)
    xs = x if t in (TensorProto.FLOAT, TensorProto.DOUBLE) else e.float32(x)
    scores = _aggregate(e, f, _traverse(e, f, xs), _AGGREGATES[agg], None)
    if t == TensorProto.FLOAT:
        post_transform(e, scores, _TRANSFORMS[post], out=e.node.output[0])
    else:
        e.op("Cast", [post_transform(e, scores, _TRANSFORMS[post])], out=e.node.output[0], to=t)


def _classifier(e: Emit, a: dict):
    labels = class_labels(e, a)
    C = len(labels)
    f = forest_v3(e, a, "class", C)
    post = text(a.get("post_transform", "NONE"))
    x = e.node.input[0]
    x = x if e.elem_type(x) in (TensorProto.FLOAT, TensorProto.DOUBLE) else e.float32(x)
    base = _attr_array(a, "base_values", np.float64)
    y, z = e.node.output[0], (e.node.output[1] if len(e.node.output) > 1 else "")
    slot = _traverse(e, f, x)
    used = np.flatnonzero(f.has_value.any(axis=0))
    if C > 2:
        scores = post_transform(e, _aggregate(e, f, slot, "SUM", base), post, out=z or None)
        e.op("Gather", [e.const(labels, "labels"), e.op("ArgMax", [scores], axis=1, keepdims=0)], out=y, axis=0)
        return
    # two classes: ONNX Runtime's rules (read off its outputs, tests/test_ml_ops.py)
    base = np.zeros(0) if base is None else base
    # (a base value is added where ONNX Runtime adds it to the score it reports: the first
    # class's, when the trees score only that one)
    first_only_base = len(used) == 1 and used[0] == 0 and len(base) == 1
    if C != 2 or not len(used) or (len(used) == 1 and post not in ("NONE", "LOGISTIC")) or \
            (np.any(base != 0) and not first_only_base):
        e.refuse(f"a {C}-class ensemble whose trees score {len(used)} class(es), with base values "
                 f"{base.tolist()} and post_transform {post}")
    sums = _aggregate(e, f, slot, "SUM", np.array([base[0], 0.0]) if first_only_base else None)
    one = e.const(np.array([1], np.int64))

    def column(k: int) -> str:
        return e.op("Slice", [sums, e.const(np.array([k], np.int64)), e.const(np.array([k + 1], np.int64)), one])
    weights = _attr_array(a, "class_weights", np.float64)
    positive_weights = bool((weights >= 0).all())
    if len(used) == 2:
        # both scored: the top class, as with more classes (ONNX Runtime 1.x gives 1 where the
        # second class's raw score is > 0, else 0, whatever the class labels: not followed)
        scores = post_transform(e, sums, post, out=z or None)
        e.op("Gather", [e.const(labels, "labels"), e.op("ArgMax", [scores], axis=1, keepdims=0)], out=y, axis=0)
        return
    elif used[0] == 1:
        # the second class scored: scores [T(0), T(s)]; its label where s > 0.5 (weights all
        # >= 0) or s > 0
        s, cut = column(1), 0.5 if positive_weights else 0.0
        if z:
            transformed = e.op("Sigmoid", [sums]) if post == "LOGISTIC" else sums
            e.op("Identity", [transformed], out=z)
    else:
        # the first class scored, s its score (plus the base value): scores
        # [sigmoid(-s), sigmoid(s)] (LOGISTIC),
        # [1 - s, s] (NONE, weights all >= 0) or [-s, s]; the second label where s > 0.5
        # (weights all >= 0) or s > 0
        s, cut = column(0), 0.5 if positive_weights else 0.0
        if post == "LOGISTIC":
            first, second = e.op("Sigmoid", [e.op("Neg", [s])]), e.op("Sigmoid", [s])
        elif positive_weights:
            first, second = e.op("Sub", [e.const(np.float32(1)), s]), s
        else:
            first, second = e.op("Neg", [s]), s
        if z:
            e.op("Concat", [first, second], out=z, axis=1)
    positive = e.op("Greater", [s, e.const(np.float32(cut))])
    label = e.op("Where", [positive, e.const(labels[1:2]), e.const(labels[0:1])])
    e.op("Reshape", [label, e.const(np.array([-1], np.int64))], out=y)


TREE_BUILDERS = {"TreeEnsembleRegressor": _regressor, "TreeEnsembleClassifier": _classifier,
                 "TreeEnsemble": _tree_ensemble}
