#!/usr/bin/env python3
"""Writes an F16 GGUF with random weights in the shapes of a 7B-class Llama and the tokenizer of
another GGUF, so that medtune and llama.cpp can be timed on a 7B-sized file where no such model
can be downloaded. llama.cpp's own quantizer then makes the Q4_1 / Q8_0 files both engines read
(bench/llama_quantize.py), as for SmolLM2.

Speed does not depend on the weights' values, so one random tensor per shape is written for every
layer (uniform in +-1/sqrt(in), PyTorch's default Linear init; norms 1): the file takes minutes,
not the hour that 6.7 billion fresh random numbers would. Greedy decoding on such a model is
gibberish; both engines compute the same gibberish the same way, which is all a timing needs.

Usage (the gguf package, e.g. the torch peer's python from bench/setup_peers.sh):
  make_scaled_gguf.py TOKENIZER.gguf OUT.gguf [--arch llama2-7b|llama3-8b] [--layers N]
llama2-7b: hidden 4096, ffn 11008, 32 heads without GQA; llama3-8b: ffn 14336, 8 kv heads, rope
theta 500000. The vocabulary is the tokenizer file's (SmolLM2's 49152, not Llama's 32000/128256):
the lm_head is 4096 x 49152, between Llama 2's and Llama 3's.
"""
import argparse
import sys

import numpy as np

# The widths of bench/make_random_llama.cpp's kArchs of the same names (hf_peft_anchor.py's shapes);
# keep the two tables together. The vocabulary is the tokenizer file's instead.
ARCHS = {
    "llama2-7b": dict(hidden=4096, ffn=11008, heads=32, kv_heads=32, layers=32, rope_theta=10000.0, context=4096),
    "llama3-8b": dict(hidden=4096, ffn=14336, heads=32, kv_heads=8, layers=32, rope_theta=500000.0, context=8192),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer_gguf")
    ap.add_argument("out")
    ap.add_argument("--arch", choices=sorted(ARCHS), default="llama2-7b")
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: the arch's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import gguf

    a = dict(ARCHS[args.arch])
    if args.layers > 0:
        a["layers"] = args.layers
    src = gguf.GGUFReader(args.tokenizer_gguf)
    if "tokenizer.ggml.tokens" not in src.fields:
        sys.exit(f"make_scaled_gguf.py: {args.tokenizer_gguf} has no tokenizer.ggml.tokens")
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    head_dim = a["hidden"] // a["heads"]

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(f"random {args.arch} ({a['layers']} layers) with {args.tokenizer_gguf}'s tokenizer")
    w.add_context_length(a["context"])
    w.add_embedding_length(a["hidden"])
    w.add_block_count(a["layers"])
    w.add_feed_forward_length(a["ffn"])
    w.add_head_count(a["heads"])
    w.add_head_count_kv(a["kv_heads"])
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(a["rope_theta"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # The tokenizer's keys as they are in the source file.
    for key, field in src.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), vtype)

    rng = np.random.default_rng(args.seed)

    def linear(out_f: int, in_f: int) -> np.ndarray:  # (out, in): GGUF's ne = [in, out]
        bound = 1.0 / np.sqrt(in_f)
        return rng.uniform(-bound, bound, size=(out_f, in_f)).astype(np.float16)

    h, f, kv = a["hidden"], a["ffn"], a["kv_heads"] * head_dim
    shared = {
        "attn_q": linear(h, h), "attn_k": linear(kv, h), "attn_v": linear(kv, h),
        "attn_output": linear(h, h), "ffn_gate": linear(f, h), "ffn_up": linear(f, h),
        "ffn_down": linear(h, f),
    }
    ones = np.ones(h, dtype=np.float32)
    w.add_tensor("token_embd.weight", rng.uniform(-0.5, 0.5, size=(vocab, h)).astype(np.float16))
    for i in range(a["layers"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        for name, t in shared.items():
            w.add_tensor(f"blk.{i}.{name}.weight", t)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", linear(vocab, h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"{args.out}: {args.arch}, {a['layers']} layers, vocab {vocab}")


if __name__ == "__main__":
    main()
