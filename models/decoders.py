"""Language-model decoders with a KV cache, exported the way Hugging Face models with
past_key_values are (optimum's text-generation-with-past form): torch.onnx's TorchScript
exporter on a transformers model with random weights (nothing is downloaded), the cache passed
in and out as one tensor per layer and key / value:

  inputs   input_ids [batch, seq], attention_mask [batch, total], position_ids [batch, seq],
           past_key_values.<layer>.key / .value [batch, kv_heads, past, head]
  outputs  logits [batch, seq, vocab], present.<layer>.key / .value [batch, kv_heads, past + seq, head]

with batch, seq, total and past the dynamic axes (total = past + seq). The prompt runs with an
empty past (past = 0), each step after it with one token. Used by tests/test_llm_decode.py.

    python -m models.decoders --kind llama -o build/decoders/llama.onnx
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

# kind -> the transformers config's keyword arguments ("tiny": the tests' size)
TINY = {
    # LLaMA: grouped-query attention (4 query heads over 2 key / value heads), RMSNorm, rotary
    # positions, SwiGLU
    "llama": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, initializer_range=0.1),
    # GPT-2: learned positions, LayerNorm, GELU; weights wider than its 0.02 default, which makes
    # a random model's greedy tokens one repeated id
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128, initializer_range=0.2),
}
DIMS = ("batch", "seq", "total", "past")


def build(kind: str, seed: int = 0):
    """The transformers model of `kind` (eval mode) and (layers, kv heads, head size)."""
    import torch
    import transformers as tf
    torch.manual_seed(seed)
    kw = TINY[kind]
    if kind == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**kw, attn_implementation="eager"))
        geometry = kw["num_hidden_layers"], kw["num_key_value_heads"], kw["hidden_size"] // kw["num_attention_heads"]
    elif kind == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(**kw, attn_implementation="eager"))
        geometry = kw["n_layer"], kw["n_head"], kw["n_embd"] // kw["n_head"]
    else:
        raise ValueError(f"unknown decoder kind {kind!r} (one of {sorted(TINY)})")
    return model.eval(), geometry


def export_with_past(kind: str, path: Path, seed: int = 0) -> Path:
    """Export the `kind` decoder with its cache as inputs and outputs (the module doc's ports)."""
    import torch
    from transformers import DynamicCache
    model, (layers, kv_heads, head) = build(kind, seed)

    class WithPast(torch.nn.Module):
        """The model over a cache given as flat tensors, returning the next one flat."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
            flat = []
            for layer in out.past_key_values.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    seq, past = 3, 4                      # (example sizes; every axis below is dynamic)
    g = torch.Generator().manual_seed(seed)
    example = (torch.randint(0, 200, (1, seq), generator=g), torch.ones(1, past + seq, dtype=torch.int64),
               torch.arange(past, past + seq)[None],
               *(torch.randn(1, kv_heads, past, head, generator=g) for _ in range(2 * layers)))
    caches = [f"{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    inputs = ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{c}" for c in caches]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}}
    axes.update({name: {0: "batch", 2: "past"} for name in inputs[3:]})
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(WithPast(), example, str(path), input_names=inputs,
                          output_names=["logits"] + [f"present.{c}" for c in caches], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    return path


def dims(longest: int) -> dict:
    """The run-time dims of an exported decoder taking up to `longest` tokens in all."""
    return {"batch": (1, 1), "seq": (1, longest), "total": (1, longest), "past": (0, longest - 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=sorted(TINY), default="llama")
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args(argv)
    print(export_with_past(args.kind, args.output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
