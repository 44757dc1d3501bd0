#!/usr/bin/env python3
"""PEFT adapter fixtures for tests/unit/io/test_{safetensors_writer,peft_adapter}.cpp, and the
check that PEFT itself loads what medtune writes.

    python3 tools/check_peft_roundtrip.py --make-fixtures   # (re)write tests/fixtures/peft/*
    python3 tools/check_peft_roundtrip.py                   # check tests/fixtures/peft/medtune_written

Needs torch, transformers, peft, safetensors (versions in tools/README.md). Tests never run Python;
the outputs are committed.

--make-fixtures writes, from the reference libraries:
- all_dtypes.safetensors: safetensors.torch.save_file of the tensors that
  test_safetensors_writer.cpp builds (same names, dtypes, values; metadata {"format": "pt"}), so
  the C++ writer's bytes can be compared with the reference writer's.
- adapter_values.json: for every tests/fixtures/hf/*/adapter_init, the config's r / lora_alpha,
  every tensor's shape, and a few values (first, last, and one in the middle, by flat index) read
  with safetensors.
- adapter_bf16/, adapter_f16/: llama_gqa's adapter_init loaded with PeftModel, cast to bfloat16 /
  float16 and saved by PEFT's save_pretrained; adapter_values.json holds a few of their values
  widened to float32 by torch.

medtune_written/ is NOT made here: it is written by medtune (test_peft_adapter.cpp writes
llama_gqa/adapter_init's values with write_peft_adapter into a temporary directory and demands
byte equality with the committed copy; to refresh it, run the test binary with
MEDTUNE_UPDATE_PEFT_FIXTURE=1). The default mode checks that copy with PEFT:
1. PeftModel.from_pretrained(base, medtune_written) gives logits equal (torch.equal, float32 and
   float64) to PeftModel.from_pretrained(base, adapter_init) on the reference input_ids, and the
   stored lora_logits_f64 to 1e-12;
2. the LoRA parameters PEFT loaded are identical;
3. PEFT's own save_pretrained of the loaded adapter reproduces medtune's adapter_model.safetensors
   byte for byte, and an adapter_config.json with the same content (target_modules compared as a
   set: PEFT writes it from a set, in arbitrary order; base_model_name_or_path left out: PEFT
   fills in the local path of the base it was loaded on).
"""
import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

import torch
from peft import LoraConfig, PeftModel
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HF = os.path.join(ROOT, "tests", "fixtures", "hf")
OUT = os.path.join(ROOT, "tests", "fixtures", "peft")
BASE = os.path.join(HF, "llama_gqa", "base")
ADAPTER = os.path.join(HF, "llama_gqa", "adapter_init")
WRITTEN = os.path.join(OUT, "medtune_written")


def all_dtypes_tensors():
    """Must match make_all_dtypes() in tests/unit/io/test_safetensors_writer.cpp."""
    return {
        "w.f32": (torch.arange(6, dtype=torch.float32) * 0.5 - 1.0).reshape(2, 3),
        "b.f16": torch.tensor([1.0, -2.0, 0.5, 65504.0], dtype=torch.float16),
        "a.bf16": torch.tensor([1.5, -0.25, 3.0], dtype=torch.bfloat16),
        "d.f64": torch.tensor([[1e-300], [-2.5]], dtype=torch.float64),
        "c.i64": torch.tensor([7, -9], dtype=torch.int64),
        "e.i32": torch.tensor([[1, -2], [3, 2147483647]], dtype=torch.int32),
        "s.f32": torch.tensor(42.0, dtype=torch.float32),  # scalar: shape []
        "z.f32": torch.zeros((0, 3), dtype=torch.float32),  # empty: data_offsets [x, x]
        "x.f16": torch.tensor([[0.0]], dtype=torch.float16),
    }


def sample_indices(n):
    return sorted({0, n // 2, n - 1})


def describe(dirpath):
    cfg = json.load(open(os.path.join(dirpath, "adapter_config.json")))
    out = {"r": cfg["r"], "lora_alpha": cfg["lora_alpha"], "tensors": {}}
    with safe_open(os.path.join(dirpath, "adapter_model.safetensors"), "pt") as f:
        for k in sorted(f.keys()):
            t = f.get_tensor(k)
            flat = t.float().reshape(-1)  # torch's own widening for bf16/f16
            out["tensors"][k] = {
                "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape),
                "values": [[i, float(flat[i])] for i in sample_indices(flat.numel())],
            }
    return out


def dump_one_tensor_per_line(values):
    """JSON with one line per tensor: small to commit, easy to diff."""
    lines = ["{"]
    for i, (fixture, v) in enumerate(sorted(values.items())):
        lines.append(f' "{fixture}": {{"r": {v["r"]}, "lora_alpha": {json.dumps(v["lora_alpha"])}, "tensors": {{')
        items = sorted(v["tensors"].items())
        for j, (k, t) in enumerate(items):
            lines.append(f'  "{k}": {json.dumps(t, sort_keys=True)}' + ("," if j + 1 < len(items) else ""))
        lines.append(" }}" + ("," if i + 1 < len(values) else ""))
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == values
    return text


def load_base():
    return AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager")


def make_fixtures():
    os.makedirs(OUT, exist_ok=True)
    save_file(all_dtypes_tensors(), os.path.join(OUT, "all_dtypes.safetensors"), metadata={"format": "pt"})

    values = {}
    for d in sorted(glob.glob(os.path.join(HF, "*", "adapter_init"))):
        values[os.path.basename(os.path.dirname(d))] = describe(d)

    for name, dtype in (("adapter_bf16", torch.bfloat16), ("adapter_f16", torch.float16)):
        model = PeftModel.from_pretrained(load_base(), ADAPTER).to(dtype)
        dst = os.path.join(OUT, name)
        shutil.rmtree(dst, ignore_errors=True)
        model.save_pretrained(dst)
        readme = os.path.join(dst, "README.md")  # PEFT's model card: not part of the format
        if os.path.exists(readme):
            os.remove(readme)
        # PEFT writes target_modules from a set; fix the order so regeneration is reproducible.
        cfg_path = os.path.join(dst, "adapter_config.json")
        cfg = json.load(open(cfg_path))
        cfg["target_modules"] = json.load(open(os.path.join(ADAPTER, "adapter_config.json")))["target_modules"]
        cfg["base_model_name_or_path"] = None  # PEFT records our local path; adapter_init has null
        with open(cfg_path, "w") as f:
            f.write(json.dumps(cfg, indent=2, sort_keys=True))
        values[name] = describe(dst)
        with safe_open(os.path.join(dst, "adapter_model.safetensors"), "pt") as f:
            assert all(f.get_tensor(k).dtype == dtype for k in f.keys()), name

    with open(os.path.join(OUT, "adapter_values.json"), "w") as f:
        f.write(dump_one_tensor_per_line(values))
    print("wrote", OUT)


def lora_state(model):
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


def check():
    ok = True

    def expect(cond, what):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + what)
        ok = ok and bool(cond)

    with safe_open(os.path.join(HF, "llama_gqa", "reference.safetensors"), "pt") as f:
        input_ids = f.get_tensor("input_ids")
        attention_mask = f.get_tensor("attention_mask")
        lora_logits_f64 = f.get_tensor("lora_logits_f64")

    ref = PeftModel.from_pretrained(load_base(), ADAPTER).eval()
    ours = PeftModel.from_pretrained(load_base(), WRITTEN).eval()
    expect(isinstance(ours.peft_config["default"], LoraConfig), "PEFT reads medtune's adapter_config.json as a LoraConfig")
    c = ours.peft_config["default"]
    expect(c.r == 4 and c.lora_alpha == 8 and not c.use_rslora, f"r={c.r} lora_alpha={c.lora_alpha} use_rslora={c.use_rslora}")

    s_ref, s_ours = lora_state(ref), lora_state(ours)
    expect(s_ref.keys() == s_ours.keys() and len(s_ref) == 28, f"same {len(s_ours)} LoRA parameters")
    expect(all(torch.equal(s_ref[k], s_ours[k]) for k in s_ref), "LoRA parameters bit-identical")

    with torch.no_grad():
        l_ref = ref(input_ids=input_ids, attention_mask=attention_mask).logits
        l_ours = ours(input_ids=input_ids, attention_mask=attention_mask).logits
        expect(torch.equal(l_ref, l_ours), f"float32 logits equal (max |diff| {(l_ref - l_ours).abs().max().item():.3g})")
        l_ours64 = ours.double()(input_ids=input_ids, attention_mask=attention_mask).logits
        l_ref64 = ref.double()(input_ids=input_ids, attention_mask=attention_mask).logits
        expect(torch.equal(l_ref64, l_ours64), "float64 logits equal")
        real = attention_mask.bool()  # padded positions are best left out (tools/README.md)
        d = (l_ours64 - lora_logits_f64)[real].abs().max().item()
        expect(d < 1e-12, f"float64 logits vs reference.safetensors lora_logits_f64: max |diff| {d:.3g}")
        base_diff = (l_ours64 - load_base().double()(input_ids=input_ids).logits)[real].abs().max().item()
        expect(base_diff > 1.0, f"the adapter changes the logits (max |diff| vs base {base_diff:.3g})")

    with tempfile.TemporaryDirectory() as tmp:
        PeftModel.from_pretrained(load_base(), WRITTEN).save_pretrained(tmp)
        a = open(os.path.join(tmp, "adapter_model.safetensors"), "rb").read()
        b = open(os.path.join(WRITTEN, "adapter_model.safetensors"), "rb").read()
        expect(a == b, "PEFT's save_pretrained writes the same adapter_model.safetensors bytes")
        cp = json.load(open(os.path.join(tmp, "adapter_config.json")))
        cm = json.load(open(os.path.join(WRITTEN, "adapter_config.json")))
        expect(set(cp["target_modules"]) == set(cm["target_modules"]), "same target_modules (as sets)")
        cp["target_modules"] = cm["target_modules"] = None
        # PEFT re-saves with the path of the base model it was loaded on; ours says null.
        cp["base_model_name_or_path"] = cm["base_model_name_or_path"]
        diff = {k: (cp.get(k), cm.get(k)) for k in set(cp) | set(cm) if cp.get(k) != cm.get(k)}
        expect(not diff, f"same adapter_config.json content as PEFT's save_pretrained {diff if diff else ''}")

    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-fixtures", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.make_fixtures:
        make_fixtures()
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
