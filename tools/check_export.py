#!/usr/bin/env python3
"""Fixtures for medtune's export tests, and the checks of `medtune export` against the real peers.

    python3 tools/check_export.py --make-fixtures          # (re)write tests/fixtures/export/*
    python3 tools/check_export.py --medtune build/medtune  # run the peer checks (prints numbers)

--make-fixtures (needs numpy, gguf, safetensors; torch not needed) writes:
- q8_0_input.f32 / q8_0_gguf_py.bin: 64 blocks of float32 values (random normal, exact halves that
  test the rounding of ties, a zero block, huge and tiny blocks) and gguf-py's
  gguf.quants.quantize(..., Q8_0) of them. tests/unit/io/test_gguf_writer_export.cpp
  (QuantWriteExport) demands bit equality.
- writer_reference.gguf: a small file written by gguf-py's GGUFWriter (every metadata type medtune
  writes, F32/F16/Q8_0 tensors, 2-D and 1-D); test_gguf_writer_export.cpp builds the same content
  with medtune's writer and demands byte equality (GgufWriterExport).
- merge_llama_gqa.safetensors: W + (alpha/r) * B @ A in float64 (numpy) for every LoRA target of
  tests/fixtures/hf/llama_gqa (base + adapter_init), HF names; tests/unit/model/test_merge.cpp
  compares.

The default mode runs the peers on what medtune writes (skips, with a message and exit 0, when a
peer package is missing) and prints every measured gap:
1. merge: `medtune export merge` of each tests/fixtures/hf/*/adapter_init -> transformers logits vs
   PeftModel(base, adapter) logits (f32, float32 eager attention), and the bf16 weights vs torch's
   bf16 rounding of PEFT's merge_and_unload.
2. gguf: `medtune export gguf` (f16, q8_0) of llama_gqa+adapter: tensor bytes vs gguf-py; for it and
   for SmolLM2 (Q4_1 GGUF) + a random adapter, llama_cpp logits vs `medtune export logits` on the
   same file, top-token agreement, and (reported) the export's own rounding.
3. gguf-lora: `medtune export gguf-lora` -> llama_cpp(model, lora_path) vs medtune --adapter on the
   same F16 base, and the change the adapter makes in each.
Each bound is derived in the function that computes it; docs/export.md records the numbers.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
HF = os.path.join(ROOT, "tests", "fixtures", "hf")
OUT = os.path.join(ROOT, "tests", "fixtures", "export")
SMOLLM2 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


# ---------------------------------------------------------------- fixtures

def q8_0_input():
    """Must match nothing in C++: the test reads the committed file."""
    rng = np.random.default_rng(20261130)
    blocks = [rng.standard_normal(32).astype(np.float32) * np.float32(s) for s in (1, 0.02, 3e-3, 40)] * 8
    blocks = [b.copy() for b in blocks]
    # Ties: with amax = 127, d = 1 and id = 1, so x = k + 0.5 rounds away from zero (roundf), not
    # to even. 2.5 -> 3, -2.5 -> -3, 0.5 -> 1.
    tie = np.array([127, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5] + [0.25 * i for i in range(23)], np.float32)
    blocks.append(tie)
    blocks.append(-tie)
    blocks.append(np.zeros(32, np.float32))
    blocks.append(np.full(32, 1e-30, np.float32))  # d underflows to 0 in f16
    blocks.append(np.full(32, 6e4, np.float32))    # d near the f16 range
    while len(blocks) < 64:
        blocks.append((rng.standard_normal(32) * 10 ** rng.uniform(-4, 2)).astype(np.float32))
    return np.concatenate(blocks).astype(np.float32)


def make_q8_0():
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize
    x = q8_0_input()
    q = quantize(x.reshape(2, -1), GGMLQuantizationType.Q8_0)
    x.tofile(os.path.join(OUT, "q8_0_input.f32"))
    np.ascontiguousarray(q).tofile(os.path.join(OUT, "q8_0_gguf_py.bin"))


def make_writer_reference():
    """Must match make_reference_content() in tests/unit/io/test_gguf_writer_export.cpp."""
    import gguf
    from gguf import GGMLQuantizationType, GGUFValueType
    from gguf.quants import quantize
    path = os.path.join(OUT, "writer_reference.gguf")
    w = gguf.GGUFWriter(path, "llama")  # general.architecture = "llama" first
    w.add_uint32("llama.block_count", 2)
    w.add_int32("test.i32", -7)
    w.add_uint64("test.u64", 1 << 40)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo\n")
    w.add_array("test.strs", ["a", "", "ü"])
    w.add_key_value("test.i32s", [1, -2, 3], GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_key_value("test.f32s", [0.5, -1.25], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT32)
    a = (np.arange(15, dtype=np.float32) * 0.25 - 1).reshape(3, 5)
    b = (np.arange(7, dtype=np.float32) - 3).astype(np.float16)
    c = quantize((np.arange(128, dtype=np.float32) / 7 - 9).reshape(2, 64), GGMLQuantizationType.Q8_0)
    w.add_tensor("a.weight", a)
    w.add_tensor("b.bias", b)
    w.add_tensor("c.weight", c, raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_merge_reference():
    from safetensors.numpy import load_file, save_file
    d = os.path.join(HF, "llama_gqa")
    base = load_file(os.path.join(d, "base", "model.safetensors"))
    ad = load_file(os.path.join(d, "adapter_init", "adapter_model.safetensors"))
    cfg = json.load(open(os.path.join(d, "adapter_init", "adapter_config.json")))
    scale = cfg["lora_alpha"] / (cfg["r"] ** 0.5 if cfg.get("use_rslora") else cfg["r"])
    out = {}
    for k in sorted(ad):
        if not k.endswith("lora_A.weight"):
            continue
        module = k[len("base_model.model."):-len(".lora_A.weight")]
        A = ad[k].astype(np.float64)
        B = ad[k.replace("lora_A", "lora_B")].astype(np.float64)
        W = base[module + ".weight"].astype(np.float64)
        out[module + ".weight"] = W + scale * (B @ A)
    save_file(out, os.path.join(OUT, "merge_llama_gqa.safetensors"))


def make_fixtures():
    os.makedirs(OUT, exist_ok=True)
    make_q8_0()
    make_writer_reference()
    make_merge_reference()
    print("wrote", OUT)


# ---------------------------------------------------------------- checks against peers

def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r


def medtune_logits(medtune, model, ids, adapter=None):
    from safetensors.numpy import load_file
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "l.safetensors")
        cmd = [medtune, "export", "logits", model, "--ids", ",".join(map(str, ids)), "-o", out]
        if adapter:
            cmd += ["--adapter", adapter]
        run(cmd)
        return load_file(out)["logits"].astype(np.float64)


def llama_cpp_logits(model_path, ids, lora=None, kv_f32=False):
    import llama_cpp
    kw = dict(model_path=model_path, n_ctx=max(64, len(ids)), logits_all=True, verbose=False,
              n_threads=2, n_gpu_layers=0)
    if kv_f32:  # llama.cpp's KV cache is F16 by default, which rounds K and V (2^-11 relative)
        kw.update(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    if lora:
        kw["lora_path"] = lora
    llm = llama_cpp.Llama(**kw)
    llm.eval(ids)
    out = np.array(llm.scores[: len(ids)], dtype=np.float64)
    llm.close()
    return out


def gap(a, b):
    """Largest |a - b| relative to the largest |b| (logit scale), and the max abs difference."""
    d = np.abs(a - b).max()
    return float(d), float(d / np.abs(b).max())


RESULTS = []


def report(what, value, bound):
    ok = value <= bound
    RESULTS.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {value:.3g} (bound {bound:.3g})")


def check_merge(medtune):
    try:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"skip merge check: {e}")
        return
    for d in sorted(glob.glob(os.path.join(HF, "*", "adapter_init"))):
        name = os.path.basename(os.path.dirname(d))
        base = os.path.join(os.path.dirname(d), "base")
        V = json.load(open(os.path.join(base, "config.json")))["vocab_size"]
        ids = torch.tensor([[i % V for i in (1, 5, 17, 42, 99, 3, 64, 7)]])
        with torch.no_grad():
            m = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
            ref = PeftModel.from_pretrained(m, d)(ids).logits[0].double().numpy()
            with tempfile.TemporaryDirectory() as t:
                run([medtune, "export", "merge", base, "--adapter", d, "-o", t, "--dtype", "f32"])
                merged = AutoModelForCausalLM.from_pretrained(t, dtype=torch.float32, attn_implementation="eager")
                got = merged(ids).logits[0].double().numpy()
            # Both sides hold W + s*B@A rounded to fp32 (PEFT computes it in fp32 arithmetic,
            # medtune rounds the fp64 sum once), so weights differ by ~1 fp32 ulp (6e-8 relative);
            # through the 2-layer fp32 forward (logits O(1..10)) that stays below 1e-5.
            report(f"merge {name} f32: transformers(merged) vs PEFT(base+adapter) max |dlogit|",
                   gap(got, ref)[0], 1e-5)
            # bf16: compare the weights with torch's bf16 rounding of PEFT's own merge. They can
            # differ only where PEFT's fp32 sum (rounded twice) and medtune's fp64 sum (rounded
            # once) fall on two sides of a bf16 rounding boundary: by one bf16 ulp, in a fraction of
            # elements of the order of the fp32 error over the bf16 spacing (~2^-16 per ulp of error).
            peft_merged = PeftModel.from_pretrained(
                AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager"), d
            ).merge_and_unload().state_dict()
            with tempfile.TemporaryDirectory() as t:
                run([medtune, "export", "merge", base, "--adapter", d, "-o", t, "--dtype", "bf16"])
                from safetensors.torch import load_file as tload
                ours = tload(os.path.join(t, "model.safetensors"))
            differ = total = worst = 0
            for k, v in ours.items():
                want = peft_merged[k].to(torch.bfloat16)
                a, b = v.view(torch.int16).int(), want.view(torch.int16).int()
                differ += int((a != b).sum())
                total += a.numel()
                worst = max(worst, int((a - b).abs().max()))
            report(f"merge {name} bf16: weights more than 1 bf16 ulp from torch's rounding of PEFT's merge", worst > 1, 0)
            report(f"merge {name} bf16: fraction of weights 1 ulp off (of {total})", differ / total, 2.0 ** -10)


    # A quantized GGUF source: merge dequantizes SmolLM2's Q4_1 weights exactly, so transformers on
    # the merged f32 directory must match medtune on the Q4_1 file + adapter to the project's fp32
    # bound for this 30-layer model (tests/unit/model/test_real_model.cpp): 1e-4 of max|logit|.
    if os.path.exists(SMOLLM2):
        sm_ids = [1, 504, 3458, 314, 260, 3467, 30, 28, 12941, 5248]
        with tempfile.TemporaryDirectory() as t, torch.no_grad():
            adapter = os.path.join(t, "ad")
            make_random_adapter(SMOLLM2, adapter)
            run([medtune, "export", "merge", SMOLLM2, "--adapter", adapter, "-o", os.path.join(t, "m")])
            m = AutoModelForCausalLM.from_pretrained(os.path.join(t, "m"), dtype=torch.float32, attn_implementation="eager")
            got = m(torch.tensor([sm_ids])).logits[0].double().numpy()
            ref = medtune_logits(medtune, SMOLLM2, sm_ids, adapter)
            report("merge SmolLM2 (Q4_1 GGUF) + adapter, f32: transformers(merged) vs medtune(Q4_1 + adapter), "
                   "max|d|/max|logit|", rel_gap(got, ref), 1e-4)
    else:
        print(f"skip SmolLM2 merge check: {SMOLLM2} absent (scripts/fetch_model.sh)")


def rel_gap(a, b):
    """max |a - b| / max |b|: the disagreement relative to the logit scale."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def engine_bound(typ, layers):
    """Bound on max|llama.cpp - medtune| / max|logit| for the same file. ggml's CPU matmul converts
    the activations to the weight's dot type: F16 weights -> activations rounded to f16 (relative
    2^-11), Q8_0 weights -> activations quantized to Q8_0 blocks (up to half a step, amax/254 ~
    2^-8 of the block's max); medtune keeps them fp32. Each layer rounds 4 distinct activation
    vectors (attention input for q/k/v, o_proj input, MLP input for gate/up, down_proj input),
    plus the head's input; first order, the relative errors add: (4L + 1) * unit."""
    unit = 2.0 ** -11 if typ == "f16" else 2.0 ** -8
    return (4 * layers + 1) * unit


def engine_bound_from_source(typ, yard):
    """For a deep model the additive bound is loose (30 layers: 0.47 for Q8_0); the measured
    disagreement of the two engines on the llama.cpp-written Q4_1 source (`yard`, where llama.cpp
    quantizes activations to Q8_1, the same 8-bit blocks) is a tighter yardstick: Q8_0 files get
    yard * 1.5 (50% for the different weights), F16 files yard * 1.5 * 2^-11 / 2^-8 (activation
    rounding 8x finer)."""
    return 1.5 * yard * (1.0 if typ == "q8_0" else 2.0 ** -3)


def check_tensors_against_gguf_py(path, base_dir, adapter_dir, typ):
    """Every weight of medtune's GGUF equals what gguf-py (the library convert_hf_to_gguf writes
    with) produces from W + s*B@A computed by numpy in float64, permuted with the converter's
    formula: F16 via numpy's float64->float16 (one rounding), Q8_0 via float32 then
    gguf.quants.quantize."""
    import gguf
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize
    from safetensors.numpy import load_file
    cfg = json.load(open(os.path.join(base_dir, "config.json")))
    acfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    s = acfg["lora_alpha"] / (acfg["r"] ** 0.5 if acfg.get("use_rslora") else acfg["r"])
    W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(base_dir, "model.safetensors")).items()}
    ad = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    for k in ad:
        if k.endswith("lora_A.weight"):
            m = k[len("base_model.model."):-len(".lora_A.weight")] + ".weight"
            W[m] = W[m] + s * (ad[k.replace("lora_A", "lora_B")].astype(np.float64) @ ad[k].astype(np.float64))
    NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def permute(w, n_head):  # convert_hf_to_gguf.py LlamaModel.permute
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    sub = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
           "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for l in range(cfg["num_hidden_layers"]):
        for h, g in sub.items():
            names[f"model.layers.{l}.{h}.weight"] = f"blk.{l}.{g}.weight"
    r = gguf.GGUFReader(path)
    got = {t.name: t for t in r.tensors}
    differ = total = 0
    for hf, g in names.items():
        if hf not in W:
            continue
        w = W[hf]
        if "q_proj" in hf:
            w = permute(w, NH)
        if "k_proj" in hf:
            w = permute(w, NKV)
        t = got[g]
        if w.ndim == 1:
            want = w.astype(np.float32).view(np.uint8)
        elif typ == "q8_0" and w.shape[1] % 32 == 0:
            want = quantize(w.astype(np.float32), GGMLQuantizationType.Q8_0)
        else:
            want = w.astype(np.float16)
        a = np.asarray(t.data).view(np.uint8).reshape(-1)
        b = np.ascontiguousarray(want).view(np.uint8).reshape(-1)
        assert a.size == b.size, (g, a.size, b.size)
        differ += int((a != b).sum())
        total += a.size
    return differ, total


def check_gguf(medtune):
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        print(f"skip gguf checks: {e}")
        return
    gqa = os.path.join(HF, "llama_gqa")
    base, adapter = os.path.join(gqa, "base"), os.path.join(gqa, "adapter_init")
    ids = [1, 5, 17, 42, 99, 3, 64, 7]
    with tempfile.TemporaryDirectory() as t:
        ref = medtune_logits(medtune, base, ids, adapter)
        for typ in ("f16", "q8_0"):
            out = os.path.join(t, f"gqa_{typ}.gguf")
            run([medtune, "export", "gguf", base, "--adapter", adapter, "-o", out, "--type", typ])
            differ, total = check_tensors_against_gguf_py(out, base, adapter, typ)
            report(f"gguf llama_gqa+adapter {typ}: weight bytes differing from gguf-py's (of {total})", differ, 0)
            mine = medtune_logits(medtune, out, ids)
            report(f"gguf llama_gqa+adapter {typ}: llama.cpp vs medtune on the file, max|d|/max|logit|",
                   rel_gap(llama_cpp_logits(out, ids), mine), engine_bound(typ, 2))
            print(f"info gguf llama_gqa+adapter {typ}: medtune(file) vs medtune(base+adapter) max|d|/max|logit| "
                  f"{rel_gap(mine, ref):.3g} (the export's own rounding)")
        # The adapter alone, applied by llama.cpp at run time to an F16 base.
        base_gguf = os.path.join(t, "gqa_base_f16.gguf")
        lora = os.path.join(t, "gqa_lora.gguf")
        run([medtune, "export", "gguf", base, "-o", base_gguf, "--type", "f16"])
        run([medtune, "export", "gguf-lora", "--adapter", adapter, "--base", base, "-o", lora])
        check_lora(medtune, "llama_gqa", base_gguf, lora, adapter, ids, engine_bound("f16", 2))

        if not os.path.exists(SMOLLM2):
            print(f"skip SmolLM2 checks: {SMOLLM2} absent (scripts/fetch_model.sh)")
            return
        L = 30
        sm_ids = [1, 504, 3458, 314, 260, 3467, 30, 28, 12941, 5248]
        adapter = os.path.join(t, "smol_adapter")
        make_random_adapter(SMOLLM2, adapter)
        ref = medtune_logits(medtune, SMOLLM2, sm_ids, adapter)
        yard = rel_gap(llama_cpp_logits(SMOLLM2, sm_ids), medtune_logits(medtune, SMOLLM2, sm_ids))
        print(f"info SmolLM2 Q4_1 source (written by llama.cpp's tools): llama.cpp vs medtune max|d|/max|logit| "
              f"{yard:.3g}: the engines' disagreement on a file neither of us wrote")
        for typ in ("f16", "q8_0"):
            out = os.path.join(t, f"smol_{typ}.gguf")
            run([medtune, "export", "gguf", SMOLLM2, "--adapter", adapter, "-o", out, "--type", typ])
            mine = medtune_logits(medtune, out, sm_ids)
            lc = llama_cpp_logits(out, sm_ids)
            report(f"gguf SmolLM2+adapter {typ}: llama.cpp vs medtune on the file, max|d|/max|logit|",
                   rel_gap(lc, mine), min(engine_bound(typ, L), engine_bound_from_source(typ, yard)))
            report(f"gguf SmolLM2+adapter {typ}: llama.cpp and medtune agree on the top token at every position",
                   float((lc.argmax(1) != mine.argmax(1)).sum()), 0)
            print(f"info gguf SmolLM2+adapter {typ}: medtune(file) vs medtune(Q4_1 base+adapter) max|d|/max|logit| "
                  f"{rel_gap(mine, ref):.3g} (the export's own rounding of the dequantized Q4_1 weights)")
        base_gguf = os.path.join(t, "smol_base_f16.gguf")
        lora = os.path.join(t, "smol_lora.gguf")
        run([medtune, "export", "gguf", SMOLLM2, "-o", base_gguf, "--type", "f16"])
        run([medtune, "export", "gguf-lora", "--adapter", adapter, "--base", SMOLLM2, "-o", lora])
        check_lora(medtune, "SmolLM2", base_gguf, lora, adapter, sm_ids, engine_bound_from_source("f16", yard))
        # On the quantized source itself (what a user runs): reported, the engines' Q4_1 gap dominates.
        w = llama_cpp_logits(SMOLLM2, sm_ids, lora)
        print(f"info gguf-lora SmolLM2 on the Q4_1 source: llama.cpp(--lora) vs medtune(--adapter) max|d|/max|logit| "
              f"{rel_gap(w, ref):.3g} (compare with the source's {yard:.3g})")


def check_lora(medtune, name, base_gguf, lora, adapter, ids, f16_bound):
    """llama.cpp(base, --lora) against medtune(base, --adapter) on the same F16 base file, and the
    change the adapter makes in each."""
    with_lora = llama_cpp_logits(base_gguf, ids, lora)
    without = llama_cpp_logits(base_gguf, ids)
    mt_with = medtune_logits(medtune, base_gguf, ids, adapter)
    mt_without = medtune_logits(medtune, base_gguf, ids)
    report(f"gguf-lora {name}: llama.cpp(F16 base + --lora) vs medtune(F16 base + --adapter), max|d|/max|logit|",
           rel_gap(with_lora, mt_with), f16_bound)
    change = rel_gap(with_lora - without, mt_with - mt_without)
    # The change is a difference of two runs, each off by up to the engine bound of its own scale.
    bound = 2 * f16_bound * np.abs(mt_with).max() / np.abs(mt_with - mt_without).max()
    report(f"gguf-lora {name}: the adapter's change of logits, llama.cpp vs medtune, max|d|/max|change|", change, bound)
    print(f"info gguf-lora {name}: the adapter changes the logits by up to {np.abs(mt_with - mt_without).max():.3g}")


def make_random_adapter(gguf_path, out_dir, r=8, alpha=16.0, seed=7):
    """A PEFT-format adapter with random A and B for a GGUF model (no HF copy of SmolLM2 here)."""
    import gguf
    from safetensors.numpy import save_file
    g = gguf.GGUFReader(gguf_path)
    f = lambda k: int(g.fields[k].contents())
    C, F, L = f("llama.embedding_length"), f("llama.feed_forward_length"), f("llama.block_count")
    NH, NKV = f("llama.attention.head_count"), f("llama.attention.head_count_kv")
    HD = C // NH
    shapes = {"self_attn.q_proj": (NH * HD, C), "self_attn.k_proj": (NKV * HD, C),
              "self_attn.v_proj": (NKV * HD, C), "self_attn.o_proj": (C, NH * HD),
              "mlp.gate_proj": (F, C), "mlp.up_proj": (F, C), "mlp.down_proj": (C, F)}
    rng = np.random.default_rng(seed)
    t = {}
    for l in range(L):
        for m, (o, i) in shapes.items():
            p = f"base_model.model.model.layers.{l}.{m}"
            t[p + ".lora_A.weight"] = (rng.uniform(-1, 1, (r, i)) / np.sqrt(i)).astype(np.float32)
            t[p + ".lora_B.weight"] = (rng.standard_normal((o, r)) * 0.02).astype(np.float32)
    os.makedirs(out_dir, exist_ok=True)
    save_file(t, os.path.join(out_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0, "bias": "none",
           "target_modules": [m.split(".")[1] for m in shapes], "task_type": "CAUSAL_LM",
           "use_rslora": False, "use_dora": False, "fan_in_fan_out": False, "base_model_name_or_path": None}
    json.dump(cfg, open(os.path.join(out_dir, "adapter_config.json"), "w"))


def check_gguf_from_hf(medtune):
    """A GGUF exported from a Hugging Face directory: (1) llama3 rope scaling, written as
    rope_freqs.weight, and o_proj's bias, each run by llama.cpp against medtune's base + adapter on
    the source directory; (2) the tokenizer converted from tokenizer.json, run by llama.cpp's
    tokenizer against medtune's on MedQA prompts."""
    try:
        import llama_cpp
    except ImportError as e:
        print(f"skip gguf-from-hf checks: {e}")
        return
    ids = [1, 5, 17, 42, 99, 3, 64, 7]
    with tempfile.TemporaryDirectory() as t:
        for fixture in ("llama3_rope", "llama_attn_bias"):
            base = os.path.join(HF, fixture, "base")
            adapter = os.path.join(HF, fixture, "adapter_init")
            out = os.path.join(t, f"{fixture}.gguf")
            run([medtune, "export", "gguf", base, "--adapter", adapter, "-o", out, "--type", "f32"])
            # F32 weights and an F32 KV cache: ggml computes in fp32 too (no activation rounding);
            # the engines then differ only in summation order and libm (ulp-level per op, ~1e-6
            # of the logit scale after 2 layers); 1e-4 leaves a wide margin yet catches any wrong
            # rope frequency or missing bias (both move the logits by >1e-2 here).
            report(f"gguf-from-hf {fixture}+adapter f32: llama.cpp(file) vs medtune(HF dir + adapter), max|d|/max|logit|",
                   rel_gap(llama_cpp_logits(out, ids, kv_f32=True), medtune_logits(medtune, base, ids, adapter)), 1e-4)

        tiny = os.path.join(os.path.dirname(medtune), "medtune-tiny-llama")
        if not os.path.exists(tiny):
            print(f"skip tokenizer check: {tiny} absent (build the medtune-tiny-llama target)")
            return
        d = os.path.join(t, "tiny")
        run([tiny, d, "49152", "3"])
        for f in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2", f)
            with open(src, "rb") as a, open(os.path.join(d, f), "wb") as b:
                b.write(a.read())
        out = os.path.join(t, "tiny.gguf")
        run([medtune, "export", "gguf", d, "-o", out, "--type", "f32"])
        data = os.environ.get("MEDTUNE_MEDQA_DEV") or os.path.join(ROOT, "data", "sample", "medqa_dev.jsonl")
        texts = []
        with open(data, encoding="utf-8") as f:
            for line in f:
                q = json.loads(line)
                opts = q["options"]
                texts.append("Question: " + q["question"] + "\n" +
                             "\n".join(f"{k}. {v}" for k, v in sorted(opts.items())) + "\nAnswer:")
                if len(texts) == 50:
                    break
        llm = llama_cpp.Llama(model_path=out, vocab_only=True, verbose=False)
        differ = 0
        for text in texts:
            mine = json.loads(run([medtune, "tokenize", out, text, "--json", "--no-special"]).stdout)["ids"]
            theirs = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            differ += mine != theirs
        llm.close()
        report(f"gguf-from-hf tokenizer (SmolLM2 tokenizer.json): prompts where llama.cpp's ids differ from medtune's "
               f"(of {len(texts)}, {os.path.basename(data)})", differ, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-fixtures", action="store_true")
    ap.add_argument("--medtune", default=os.path.join(ROOT, "build", "medtune"))
    args = ap.parse_args()
    if args.make_fixtures:
        make_fixtures()
        return 0
    if not os.path.exists(args.medtune):
        sys.exit(f"{args.medtune}: no medtune binary (build it, or pass --medtune)")
    check_merge(args.medtune)
    check_gguf(args.medtune)
    check_gguf_from_hf(args.medtune)
    print(f"{sum(RESULTS)}/{len(RESULTS)} checks passed")
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
