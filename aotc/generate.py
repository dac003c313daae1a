"""Greedy generation with a compiled decoder: the loop an app runs around a language model's
artifact, a prompt (prefill) then one token per step, the cache fed back each time.

The artifact is one compiled with run-time dimensions for the sequence (and, where the model's
cache grows, for the past length), so that the prompt and the single-token steps run on one
build. The forms recognized, by their inputs' names:

- input_ids [1, seq] (required), attention_mask [1, past + seq] (ones), position_ids
  [1, seq] (past, past + 1, ...), write_indices [1] (past: where the step's keys and values
  go) and nonpad_kv_seqlen [1] (past + seq: how many the cache holds after the step), each
  where the model has it;
- caches: every input named past_key_values.* (or past.*) with the output of the same name
  under present.*, and every input X with an output updated_X (onnxruntime's mobius builder's
  static cache: key_cache.N, updated_key_cache.N), the output what the next step takes as the
  input. A cache whose length is fixed (onnxruntime-genai's model builder's shared max-length
  buffer, mobius's static cache) starts as zeros of that length; one whose length is a run-time
  dimension (Hugging Face exports with past_key_values) starts empty and grows by the step's
  tokens. A cache the artifact updates in place (its manifest's "in_place_of") is one array
  throughout, given as the input and as the output (one that grows as the leading part of an
  array of the output's largest shape: a step writes only its own positions); on a GPU target
  those arrays stay on the device while tokens are generated (CompiledModel.keep_caches).

`generate(model, prompt, steps)` returns the greedy ids; `Generator(model)` gives the pieces:
`tokens(prompt)` (an iterator, one run of the model per token taken), `step` (one run on given
ids and caches) and `empty_caches`. Tokenizers are out of scope: ids in, ids out."""
from __future__ import annotations

import re
from typing import Iterator, Optional, Sequence

import numpy as np

from .errors import ShapeError, UnsupportedError

_PAST = re.compile(r"^(past_key_values|past)([._].*)$")


class Generator:
    """The feeds a decoder artifact takes at each step, worked out once from its manifest."""

    def __init__(self, model):
        self.model = model
        ports = {p["name"]: p for p in model.manifest["inputs"]}
        outs = [p["name"] for p in model.manifest["outputs"]]
        if "input_ids" not in ports:
            raise UnsupportedError([f"a decoder without an input named input_ids (inputs: {sorted(ports)})"])
        self.logits = "logits" if "logits" in outs else outs[0]
        self.caches: dict[str, str] = {}       # past input -> the present output that feeds it next
        for name in ports:
            m = _PAST.match(name)
            if f"updated_{name}" in outs:
                self.caches[name] = f"updated_{name}"
            elif m:
                present = "present" + m.group(2)
                if present not in outs:
                    raise UnsupportedError([f"cache input {name!r} has no output {present!r} to feed it"])
                self.caches[name] = present
        # caches the artifact updates in place: one array, passed as the input and the output
        self.in_place = {p["in_place_of"]: p["name"] for p in model.manifest["outputs"] if p.get("in_place_of")}
        known = {"input_ids", "attention_mask", "position_ids", "write_indices", "nonpad_kv_seqlen", *self.caches}
        other = sorted(set(ports) - known)
        if other:
            raise UnsupportedError([f"decoder input(s) {', '.join(map(repr, other))}: generate() feeds "
                                    "input_ids, attention_mask, position_ids, write_indices, nonpad_kv_seqlen "
                                    "and caches (past_key_values.* / past.* with present.*, or X with updated_X)"])
        self.ports = ports
        self._logits = None                    # the array the logits are written into (step)
        # an artifact of aotc's whose caches are all updated in place runs its steps through a
        # Binding (_bound_step); anything else (ONNX Runtime in aotc.bench) through run()
        self._bindable = hasattr(model, "bind") and all(k in self.in_place for k in self.caches)
        self._binding = None
        # the longest sequence the artifact takes: input_ids' (and the mask's) largest length
        self.max_total = int(ports.get("attention_mask", ports["input_ids"])["shape"][1])
        self.growing = {}                      # cache -> its run-time length axis (a cache that grows)
        for name in self.caches:
            for d in ports[name].get("dims", []):
                if d["axis"] != 0:
                    self.growing[name] = d
        for name, d in self.growing.items():
            if d["min"] > 0:
                raise ShapeError(f"cache {name!r} takes lengths {d['min']}..{d['max']}: a prompt starts "
                                 "with an empty one", f"compile with --dim {d['dim']}=0..{d['max']}")

    def empty_caches(self) -> dict:
        """Each cache before a prompt: zeros of its fixed length, or empty where it grows (where
        the artifact updates it in place, the empty leading part of an array of its output's
        largest shape, which every step then fills further)."""
        out = {}
        outs = {p["name"]: p for p in self.model.manifest["outputs"]}
        for name in self.caches:
            p = self.ports[name]
            shape = list(p["shape"])
            shape[0] = 1
            if name in self.growing:
                axis = self.growing[name]["axis"]
                shape[axis] = 0
                if name in self.in_place:
                    full = np.zeros(outs[self.in_place[name]]["shape"], _dtype(p))
                    out[name] = full[tuple(slice(0, n) for n in shape)]
                    continue
            out[name] = np.zeros(shape, _dtype(p))
        return out

    def step(self, ids: Sequence[int], past: int, caches: dict) -> tuple[np.ndarray, dict]:
        """Runs `ids` after `past` tokens whose cache is `caches`: (the last position's logits,
        the caches for the next step)."""
        n = len(ids)
        if past + n > self.max_total:
            raise ShapeError(f"{past + n} tokens: the artifact takes at most {self.max_total}",
                             "compile with a larger sequence range")
        if self._bindable:
            return self._bound_step(ids, past, caches)
        feeds = {"input_ids": np.array([ids], _dtype(self.ports["input_ids"]))}
        if "attention_mask" in self.ports:
            feeds["attention_mask"] = np.ones((1, past + n), _dtype(self.ports["attention_mask"]))
        if "position_ids" in self.ports:
            feeds["position_ids"] = np.arange(past, past + n, dtype=_dtype(self.ports["position_ids"]))[None]
        if "write_indices" in self.ports:
            feeds["write_indices"] = np.array([past], _dtype(self.ports["write_indices"]))
        if "nonpad_kv_seqlen" in self.ports:
            feeds["nonpad_kv_seqlen"] = np.array([past + n], _dtype(self.ports["nonpad_kv_seqlen"]))
        feeds.update(caches)
        # (a cache that grows in place is a view of its array: its base)
        into = {self.in_place[k]: v if v.base is None or k not in self.growing else v.base
                for k, v in caches.items() if k in self.in_place}
        if self._logits is None:
            port = next(p for p in self.model.manifest["outputs"] if p["name"] == self.logits)
            self._logits = np.empty(port["shape"], _dtype(port))
        # the logits into one array for every step (a fresh 25 MB one per prompt run had its
        # pages faulted in: 2-4 ms of a 190 ms one); a run on ONNX Runtime (aotc.bench) ignores it
        into[self.logits] = self._logits
        out = dict(zip(self.model.output_names, self.model.run(feeds, into=into)))
        return out[self.logits][0, -1].copy(), {k: out[v] for k, v in self.caches.items()}

    _SMALL = ("input_ids", "attention_mask", "position_ids", "write_indices", "nonpad_kv_seqlen")

    def _bound_step(self, ids: Sequence[int], past: int, caches: dict) -> tuple[np.ndarray, dict]:
        """step() through a Binding (CompiledModel.bind): every array bound once (the inputs
        other than caches at their largest shapes, written in place each step; each cache's one
        array as its input and output, bound anew when `caches` is not what the step before
        returned), then a step writes its ids, positions and indices and sets the run's sizes.
        (run() checks and binds every port each call: about 0.4 ms a step of a 125M decoder.)"""
        b, n = self._binding, len(ids)
        if b is None:
            b = self._binding = self.model.bind()
            self._in_at = {name: i for i, name in enumerate(self.model.input_names)}
            self._out_at = {name: k for k, name in enumerate(self.model.output_names)}
            self._small = {}
            for name in self._SMALL:
                if name in self.ports:      # (ones: the attention mask stays so)
                    self._small[name] = np.ones(self.ports[name]["shape"], _dtype(self.ports[name]))
                    b.input(self._in_at[name], self._small[name])
            port = next(p for p in self.model.manifest["outputs"] if p["name"] == self.logits)
            self._logits = np.empty(port["shape"], _dtype(port))
            b.output(self._out_at[self.logits], self._logits)
            self._bound_caches = None
        at, small = self._in_at, self._small
        if caches is not self._bound_caches:
            self._full = {}
            for k, v in caches.items():
                full = v if v.base is None or k not in self.growing else v.base
                b.input(at[k], full, v.shape if at[k] in b.shape_fields else None)
                b.output(self._out_at[self.in_place[k]], full)
                self._full[k] = (full, list(v.shape))
        small["input_ids"].reshape(-1)[:n] = ids
        if "position_ids" in small:
            small["position_ids"].reshape(-1)[:n] = np.arange(past, past + n)
        if "write_indices" in small:
            small["write_indices"].reshape(-1)[0] = past
        if "nonpad_kv_seqlen" in small:
            small["nonpad_kv_seqlen"].reshape(-1)[0] = past + n
        sizes = {"input_ids": (1, n), "attention_mask": (1, past + n), "position_ids": (1, n),
                 "write_indices": (1,), "nonpad_kv_seqlen": (1,)}
        for name in small:
            if at[name] in b.shape_fields:
                b.shape(at[name], sizes[name])
        for k, (full, shape) in self._full.items():
            if k in self.growing:
                shape[self.growing[k]["axis"]] = past
                b.shape(at[k], shape)
        b.run()
        nxt = {}                 # the presents: each cache's array, a growing one's leading part
        for k, (full, shape) in self._full.items():
            axis = self.growing[k]["axis"] if k in self.growing else -1
            nxt[k] = full[tuple(slice(0, past + n if a == axis else m) for a, m in enumerate(shape))] \
                if axis >= 0 else full
        self._bound_caches = nxt
        dims = b.output_dims(self._out_at[self.logits])
        return self._logits.reshape(-1)[:int(np.prod(dims))].reshape(dims)[0, -1].copy(), nxt

    def tokens(self, prompt: Sequence[int]) -> Iterator[int]:
        """Greedy tokens after `prompt`, one run of the model per token taken: the first runs
        the prompt, each later one the token before it."""
        if not prompt:
            raise ShapeError("generate needs a prompt of at least one token")
        return self._tokens(list(prompt))

    def _tokens(self, prompt: list) -> Iterator[int]:
        # on a GPU target the caches stay on the device from the prompt to the last token (the
        # arrays hold them again when the generation ends: the generator closed or collected)
        keep = getattr(self.model, "keep_caches", None)
        if keep is not None:
            keep(True)
        try:
            logits, caches = self.step(prompt, 0, self.empty_caches())
            done = len(prompt)
            while True:
                token = int(np.argmax(logits))
                yield token
                logits, caches = self.step([token], done, caches)
                done += 1
        finally:
            if keep is not None:
                keep(False)

    def generate(self, prompt: Sequence[int], steps: int, eos: Optional[int] = None) -> list[int]:
        """Greedy decoding: the prompt, then `steps` tokens each the argmax of the logits
        (fewer when `eos` comes); returns the generated ids."""
        out = []
        for token in self.tokens(prompt):
            out.append(token)
            if len(out) == steps or token == eos:
                break
        return out


def generate(model, prompt: Sequence[int], steps: int, eos: Optional[int] = None) -> list[int]:
    """Greedy decoding of `steps` tokens after `prompt` with a loaded decoder artifact
    (aotc.load / aotc.compile); see the module's doc for the forms it takes."""
    return Generator(model).generate(prompt, steps, eos)


def _dtype(port: dict) -> np.dtype:
    return np.dtype(port["dtype"])
