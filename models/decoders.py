"""Language-model decoders with a KV cache, exported the way Hugging Face models with
past_key_values are (optimum's text-generation-with-past form): torch.onnx's TorchScript
exporter on a transformers model with random weights (nothing is downloaded), the cache passed
in and out as one tensor per layer and key / value:

  inputs   input_ids [batch, seq], attention_mask [batch, total], position_ids [batch, seq],
           past_key_values.<layer>.key / .value [batch, kv_heads, past, head]
  outputs  logits [batch, seq, vocab], present.<layer>.key / .value [batch, kv_heads, past + seq, head]

with batch, seq, total and past the dynamic axes (total = past + seq). The prompt runs with an
empty past (past = 0), each step after it with one token. Also the sources of onnxruntime-
genai's model builder's decoders (`genai_source`, `genai_build`), and onnxruntime's mobius
builder's static-cache decoders built from the same sources (`static_cache_build`). Used by
tests/test_llm_decode.py, tests/test_contrib_genai.py and tools/llm_bench.py.

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

# onnxruntime-genai's model builder's sources: a transformers model saved with save_pretrained
# and a word-level tokenizer (the builder reads one). "tiny": the tests'; "small": LLaMA-style
# of 125M parameters (hidden 768, 12 layers, 12 query and 4 key / value heads, vocabulary 32000),
# what the decode speed is measured on (tools/llm_bench.py)
GENAI_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, initializer_range=0.1)
GENAI_SMALL = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                   num_key_value_heads=4, vocab_size=32000, max_position_embeddings=1024, initializer_range=0.02)

# about a billion parameters (1.01B; 4 GB of float32): the largest tools/llm_memory.py compiles
GENAI_1B = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=20, num_attention_heads=32,
                num_key_value_heads=4, vocab_size=32000, max_position_embeddings=1024, initializer_range=0.02)


def parameters(config: dict) -> int:
    """How many parameters a LLaMA-style config of genai_source has (lm_head not tied)."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]
    return 2 * config["vocab_size"] * h + layers * (2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h) + h


def build(kind: str, seed: int = 0, config: dict | None = None):
    """The transformers model of `kind` (eval mode; `config`: its config's keyword arguments,
    TINY[kind] by default) and (layers, kv heads, head size)."""
    import torch
    import transformers as tf
    torch.manual_seed(seed)
    kw = config or TINY[kind]
    if kind == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**kw, attn_implementation="eager"))
        geometry = kw["num_hidden_layers"], kw["num_key_value_heads"], kw["hidden_size"] // kw["num_attention_heads"]
    elif kind == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(**kw, attn_implementation="eager"))
        geometry = kw["n_layer"], kw["n_head"], kw["n_embd"] // kw["n_head"]
    else:
        raise ValueError(f"unknown decoder kind {kind!r} (one of {sorted(TINY)})")
    return model.eval(), geometry


def export_with_past(kind: str, path: Path, seed: int = 0, config: dict | None = None) -> Path:
    """Export the `kind` decoder (see `build`) with its cache as inputs and outputs (the module
    doc's ports)."""
    import torch
    from transformers import DynamicCache
    model, (layers, kv_heads, head) = build(kind, seed, config)

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


def genai_source(kind: str, folder: Path, config: dict = GENAI_TINY) -> None:
    """A random-weight transformers model of `kind` (llama, qwen2, phi3) with `config`, and a
    word-level tokenizer, saved into `folder` for the model builder."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers
    torch.manual_seed(0)
    vocab = config["vocab_size"]
    if kind == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**config, rms_norm_eps=1e-5))
    elif kind == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**config, tie_word_embeddings=True))
        with torch.no_grad():           # (transformers starts the Q, K, V biases at zero: the builder drops those)
            for layer in model.model.layers:
                for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    p.bias.normal_(0, 0.1)
    elif kind == "phi3":
        # original_max_position_embeddings = max_position_embeddings: Phi-3 mini's short-context
        # form (the builder's Phi3MiniModel; a longer context is its LongRoPE form)
        model = tf.Phi3ForCausalLM(tf.Phi3Config(**config, original_max_position_embeddings=config[
            "max_position_embeddings"], pad_token_id=0))
    else:
        raise ValueError(f"unknown builder source kind {kind!r} (llama, qwen2, phi3)")
    with torch.no_grad():               # RMSNorm weights away from 1
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
    model.save_pretrained(folder)
    words = {f"w{i}": i for i in range(vocab - 3)} | {"<unk>": vocab - 3, "<s>": vocab - 2, "</s>": vocab - 1}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>").save_pretrained(folder)


def genai_build(source: Path, out: Path, precision: str, cache: Path, extra: list | None = None) -> Path:
    """onnxruntime-genai's model builder on a saved source (`-p fp32|int4 -e cpu`): its model.onnx."""
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(out),
           "-p", precision, "-e", "cpu", "-c", str(cache)] + (["--extra_options", *extra] if extra else [])
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"the model builder failed:\n{run.stdout[-2000:]}{run.stderr[-4000:]}")
    return out / "model.onnx"


def static_cache_build(source: Path, out: Path, longest: int) -> Path:
    """onnxruntime's mobius builder on a saved source (`genai_source`), its standard-ops
    static-cache form (`--static-cache --max-seq-len longest`: KV buffers [batch, longest,
    kv heads x head] updated by TensorScatter at write_indices, opset-24 Attention reading
    nonpad_kv_seqlen of them): its model.onnx."""
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "mobius", "build", "--config", str(source), "--static-cache",
           "--max-seq-len", str(longest), str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"the mobius builder failed:\n{run.stdout[-2000:]}{run.stderr[-4000:]}")
    return out / "model.onnx"


def static_cache_dims(longest: int) -> dict:
    """The run-time dims of a mobius static-cache decoder whose buffers hold `longest` tokens:
    one sequence, a run of 1..longest tokens."""
    return {"batch": (1, 1), "sequence_len": (1, longest)}


def genai_dims(longest: int, head: int) -> dict:
    """The run-time dims of a builder's decoder taking up to `longest` tokens (its KV buffers
    that long: the genai runtime's max_length)."""
    return {"batch_size": (1, 1), "sequence_length": (1, longest), "total_sequence_length": (1, longest),
            "past_sequence_length": (longest, longest), "kv_cache_dim": (head, head)}


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
