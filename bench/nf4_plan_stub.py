#!/usr/bin/env python3
"""A weightless stand-in for a large model, so that `medtune train --dry-run` prints its memory
plan (docs/qlora.md): config.json with the model's published shape, a model.safetensors whose
header lists every tensor at full size in BF16 and whose data section is a sparse hole (no disk
space, never read by a dry run), and a tokenizer copied from a small model (the dry run only
tokenizes the data to count steps).

  python3 bench/nf4_plan_stub.py llama2-7b|llama3-8b OUT_DIR TOKENIZER_DIR
"""
import json
import os
import shutil
import struct
import sys

SHAPES = {
    # published config.json values (meta-llama/Llama-2-7b-hf, meta-llama/Meta-Llama-3-8B)
    "llama2-7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                      rms_norm_eps=1e-5, rope_theta=10000.0),
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, rope_theta=500000.0),
}


def main():
    name, out, tok = sys.argv[1], sys.argv[2], sys.argv[3]
    c = SHAPES[name]
    os.makedirs(out, exist_ok=True)
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               tie_word_embeddings=False, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, **c)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    V, C, F, L = c["vocab_size"], c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    HD = C // c["num_attention_heads"]
    Q, KV = c["num_attention_heads"] * HD, c["num_key_value_heads"] * HD
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                       p + "self_attn.q_proj.weight": [Q, C], p + "self_attn.k_proj.weight": [KV, C],
                       p + "self_attn.v_proj.weight": [KV, C], p + "self_attn.o_proj.weight": [C, Q],
                       p + "mlp.gate_proj.weight": [F, C], p + "mlp.up_proj.weight": [F, C],
                       p + "mlp.down_proj.weight": [C, F]})
    header, off = {}, 0
    for k, s in shapes.items():
        n = 2
        for d in s:
            n *= d
        header[k] = {"dtype": "BF16", "shape": s, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)  # a hole: no blocks allocated
    for fn in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(tok, fn)):
            shutil.copy(os.path.join(tok, fn), os.path.join(out, fn))
    print(f"{out}: {off / 2**30:.2f} GiB of BF16 weights (sparse)")


if __name__ == "__main__":
    main()
