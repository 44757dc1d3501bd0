#!/usr/bin/env python3
"""Writes the fixtures of tests/unit/io/test_{safetensors,hf_config,checkpoint}.cpp.

    python3 tools/make_safetensors_fixtures.py        # from the repository root

Needs numpy + safetensors (the reference reader/writer) and transformers (the reference
config.json reader). The outputs are committed; tests never run Python.

- tests/fixtures/safetensors/*.safetensors: valid files written by safetensors' own writer, a BF16
  file written by hand (numpy has no bfloat16) and accepted by safetensors' reader, and broken
  files that safetensors' reader must reject (asserted here).
- tests/fixtures/safetensors/tiny_*: tiny model directories (config.json + weights), single-file
  and sharded, every value given by value_of() below.
- tests/fixtures/hf_config/<case>/config.json + expected.json: config forms, and expected.json
  holding what transformers makes of them (the C++ test compares against it).
"""
import json
import os
import struct
import sys

import numpy as np
import safetensors
import safetensors.numpy

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ST_DIR = os.path.join(ROOT, "tests", "fixtures", "safetensors")
CFG_DIR = os.path.join(ROOT, "tests", "fixtures", "hf_config")
CORPUS_DIR = os.path.join(ROOT, "fuzz", "corpus", "safetensors")


def raw_file(header: dict, data: bytes, pad=True) -> bytes:
    """A safetensors file from a header dict and data bytes, laid out as the reference writer does
    (header padded with spaces to a multiple of 8)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(path, content: bytes):
    with open(path, "wb") as f:
        f.write(content)


def reference_accepts(path) -> bool:
    try:
        with safetensors.safe_open(path, framework="np") as f:
            list(f.keys())
        return True
    except Exception:
        return False


def make_single_files():
    # valid.safetensors: every supported dtype except BF16, and an empty tensor.
    tensors = {
        "a": (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(2, 3),  # [-1, -0.5, 0, .5, 1, 1.5]
        "b": np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16),
        "c": np.array([7, -9], dtype=np.int64),
        "e": np.array([3.25], dtype=np.float64),
        "i": np.array([-5, 123456], dtype=np.int32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = os.path.join(ST_DIR, "valid.safetensors")
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt", "note": "medtune fixture"})
    back = safetensors.numpy.load_file(path)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v), k

    # bf16.safetensors: [1.5, -2.0, 0.15625] are exact in bfloat16: the top 16 bits of the f32.
    vals = np.array([1.5, -2.0, 0.15625], dtype=np.float32)
    bits = (vals.view(np.uint32) >> 16).astype("<u2")
    path = os.path.join(ST_DIR, "bf16.safetensors")
    write(path, raw_file({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}},
                         bits.tobytes()))
    assert reference_accepts(path)

    valid = open(os.path.join(ST_DIR, "valid.safetensors"), "rb").read()
    f32x6 = np.arange(6, dtype="<f4").tobytes()  # 24 bytes
    broken = {
        # Cut inside the data section: the last tensor's bytes are gone.
        "truncated.safetensors": valid[:-5],
        # Header length 2^40: far above the 100 MB bound.
        "header_too_big.safetensors": struct.pack("<Q", 1 << 40) + b"{}      ",
        # Header length 1000 in a 24-byte file.
        "header_past_eof.safetensors": struct.pack("<Q", 1000) + b'{"a":{}}        ',
        # The JSON stops in the middle of an object.
        "bad_json.safetensors": struct.pack("<Q", 24) + b'{"a": {"dtype": "F32",  ',
        "offsets_outside.safetensors": raw_file(
            {"a": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}}, f32x6),
        "overlap.safetensors": raw_file(
            {"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},
             "b": {"dtype": "F32", "shape": [6], "data_offsets": [16, 40]}},
            f32x6 + f32x6[:16]),
        "hole.safetensors": raw_file(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}, f32x6),
        "wrong_size.safetensors": raw_file(
            {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}, f32x6[:20]),
        "unknown_dtype.safetensors": raw_file(
            {"q": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}, b"\x01\x02\x03\x04"),
        "bad_metadata.safetensors": raw_file(
            {"__metadata__": {"step": 3},
             "a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}, f32x6),
        "empty.safetensors": b"",
    }
    for name, content in broken.items():
        path = os.path.join(ST_DIR, name)
        write(path, content)
        # The reference must reject it too (F8_E4M3 is valid for safetensors itself: our limit).
        if name != "unknown_dtype.safetensors":
            assert not reference_accepts(path), name
        else:
            assert reference_accepts(path), name


# --- tiny model directories -------------------------------------------------------------------
V, C, F, L, NH, NKV, HD = 16, 8, 12, 2, 2, 1, 4


def tiny_config(**over):
    c = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": V, "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    c.update(over)
    return c


def tiny_shapes(bias=False, tied=False):
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not tied:
        s["lm_head.weight"] = (V, C)
    for l in range(L):
        p = f"model.layers.{l}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (NH * HD, C)
        s[p + "self_attn.k_proj.weight"] = (NKV * HD, C)
        s[p + "self_attn.v_proj.weight"] = (NKV * HD, C)
        s[p + "self_attn.o_proj.weight"] = (C, NH * HD)
        if bias:
            s[p + "self_attn.q_proj.bias"] = (NH * HD,)
            s[p + "self_attn.k_proj.bias"] = (NKV * HD,)
            s[p + "self_attn.v_proj.bias"] = (NKV * HD,)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
    return s


def value_of(shape, dtype):
    """Element i (row-major) of every tiny tensor is (i % 64) * 0.25 - 4: exact in f16 and f32,
    and the test recomputes it."""
    n = int(np.prod(shape))
    return ((np.arange(n) % 64) * 0.25 - 4.0).astype(dtype).reshape(shape)


def make_model_dirs():
    # Single file, f32.
    d = os.path.join(ST_DIR, "tiny_llama")
    os.makedirs(d, exist_ok=True)
    json.dump(tiny_config(), open(os.path.join(d, "config.json"), "w"), indent=2)
    t = {k: value_of(s, np.float32) for k, s in tiny_shapes().items()}
    safetensors.numpy.save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

    # Two shards, f16, with the index transformers' save_pretrained writes.
    d = os.path.join(ST_DIR, "tiny_llama_sharded")
    os.makedirs(d, exist_ok=True)
    json.dump(tiny_config(torch_dtype="float16"), open(os.path.join(d, "config.json"), "w"),
              indent=2)
    t = {k: value_of(s, np.float16) for k, s in tiny_shapes().items()}
    names = sorted(t)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, keys in shards.items():
        safetensors.numpy.save_file({k: t[k] for k in keys}, os.path.join(d, fname),
                                    metadata={"format": "pt"})
        weight_map.update({k: fname for k in keys})
    total = sum(v.nbytes for v in t.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)

    # qwen2, tied embeddings (no lm_head stored), q/k/v biases.
    d = os.path.join(ST_DIR, "tiny_qwen2_tied")
    os.makedirs(d, exist_ok=True)
    json.dump(tiny_config(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                          tie_word_embeddings=True, bos_token_id=None, eos_token_id=15),
              open(os.path.join(d, "config.json"), "w"), indent=2)
    t = {k: value_of(s, np.float32) for k, s in tiny_shapes(bias=True, tied=True).items()}
    safetensors.numpy.save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


# --- config.json forms ------------------------------------------------------------------------
BASE = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4}

CONFIGS = {
    # Llama 2 style: top-level rope_theta, rope_scaling null, no head_dim, no num_key_value_heads.
    "llama_classic": dict(BASE, architectures=["LlamaForCausalLM"], model_type="llama",
                          max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                          rope_scaling=None, tie_word_embeddings=False, bos_token_id=1,
                          eos_token_id=2, torch_dtype="float16"),
    # transformers >= 5 writes rope_parameters and dtype.
    "llama_rope_parameters": dict(BASE, architectures=["LlamaForCausalLM"], model_type="llama",
                                  num_key_value_heads=2, head_dim=32,
                                  rope_parameters={"rope_theta": 500000.0, "rope_type": "default"},
                                  dtype="bfloat16", eos_token_id=[128001, 128009],
                                  bos_token_id=128000),
    # Llama 3.1 style rope_scaling (legacy key name) with rope_theta at the top level.
    "llama3_rope_scaling": dict(BASE, architectures=["LlamaForCausalLM"], model_type="llama",
                                num_key_value_heads=2, max_position_embeddings=131072,
                                rope_theta=500000.0,
                                rope_scaling={"factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 8192,
                                              "rope_type": "llama3"},
                                eos_token_id=[128001, 128008, 128009], torch_dtype="bfloat16"),
    # llama3 in the 5.x rope_parameters form, old "type" spelling, original_max defaulted.
    "llama3_rope_parameters": dict(BASE, model_type="llama", max_position_embeddings=2048,
                                   rope_parameters={"type": "llama3", "rope_theta": 50000.0,
                                                    "factor": 32.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0}),
    "qwen2": dict(BASE, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                  num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, sliding_window=32768, use_sliding_window=False,
                  max_window_layers=21, tie_word_embeddings=True, bos_token_id=151643,
                  eos_token_id=151645, torch_dtype="bfloat16"),
    "mistral": dict(BASE, architectures=["MistralForCausalLM"], model_type="mistral",
                    num_key_value_heads=1, sliding_window=4096, rope_theta=1000000.0,
                    head_dim=None, torch_dtype="bfloat16"),
    # No model_type: the architecture comes from `architectures`; tied embeddings.
    "tied_architectures_only": dict(BASE, architectures=["LlamaForCausalLM"],
                                    tie_word_embeddings=True),
}

# Broken configs: the C++ test checks the message names the file and these words.
BROKEN = {
    "unsupported_arch": dict(BASE, model_type="gpt2", architectures=["GPT2LMHeadModel"]),
    "hidden_size_string": dict(BASE, model_type="llama", hidden_size="64"),
    "rope_yarn": dict(BASE, model_type="llama",
                      rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 32768}),
    "rope_dynamic_type": dict(BASE, model_type="llama", rope_scaling={"type": "dynamic",
                                                                      "factor": 2.0}),
    "missing_vocab": {k: v for k, v in dict(BASE, model_type="llama").items() if k != "vocab_size"},
    "eos_float": dict(BASE, model_type="llama", eos_token_id=2.5),
}


def transformers_view(cfg_dir):
    """What transformers makes of config.json: the fields ModelConfig holds."""
    from transformers import AutoConfig, LlamaConfig, MistralConfig, Qwen2Config
    raw = json.load(open(os.path.join(cfg_dir, "config.json")))
    if "model_type" in raw:
        c = AutoConfig.from_pretrained(cfg_dir)
    else:  # AutoConfig needs model_type; the class named by `architectures` reads it as well
        cls = {"LlamaForCausalLM": LlamaConfig, "MistralForCausalLM": MistralConfig,
               "Qwen2ForCausalLM": Qwen2Config}[raw["architectures"][0]]
        c = cls.from_pretrained(cfg_dir)
    rp = dict(c.rope_parameters or {})
    rope_type = rp.get("rope_type", "default")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    eos = c.eos_token_id
    eos = [] if eos is None else (list(eos) if isinstance(eos, (list, tuple)) else [eos])
    out = {
        "architecture": c.model_type,
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": head_dim,
        "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": rp["rope_theta"],
        "rope_type": "" if rope_type == "default" else rope_type,
        "tie_word_embeddings": bool(c.tie_word_embeddings),
        # Qwen2 hard-codes bias=True on q/k/v; llama reads attention_bias; mistral has none.
        "attention_bias": True if c.model_type == "qwen2" else bool(getattr(c, "attention_bias",
                                                                            False)),
        "sliding_window": getattr(c, "sliding_window", None) or 0,
        "bos_token_id": -1 if c.bos_token_id is None else c.bos_token_id,
        "eos_token_ids": eos,
    }
    if rope_type == "llama3":
        out.update(factor=rp["factor"], low_freq_factor=rp["low_freq_factor"],
                   high_freq_factor=rp["high_freq_factor"],
                   original_max_position_embeddings=rp["original_max_position_embeddings"])
    return out


def make_configs():
    for name, cfg in {**CONFIGS, **BROKEN}.items():
        d = os.path.join(CFG_DIR, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    for name in CONFIGS:
        d = os.path.join(CFG_DIR, name)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(transformers_view(d), f, indent=2)


def make_corpus():
    os.makedirs(CORPUS_DIR, exist_ok=True)
    for name in ["valid.safetensors", "bf16.safetensors", "overlap.safetensors",
                 "wrong_size.safetensors"]:
        write(os.path.join(CORPUS_DIR, name), open(os.path.join(ST_DIR, name), "rb").read())


if __name__ == "__main__":
    os.makedirs(ST_DIR, exist_ok=True)
    make_single_files()
    make_model_dirs()
    make_configs()
    make_corpus()
    print("fixtures written", file=sys.stderr)
