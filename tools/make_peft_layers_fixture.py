#!/usr/bin/env python3
"""Generate tests/fixtures/peft/layers_to_transform/: PEFT LoRA adapters that adapt only some
modules (layers_to_transform, layers_pattern, exclude_modules), and PEFT's own verdicts.

  base/                  save_pretrained of a tiny random float32 Llama with 3 layers
                         (vocab 64, hidden 16, 2 q heads / 1 kv head, head_dim 8, intermediate 24)
  adapter/               PEFT LoRA save_pretrained: r 4, lora_alpha 8, all seven projections,
                         layers_to_transform [0, 2], layers_pattern "layers",
                         exclude_modules ["o_proj", "model.layers.2.mlp.up_proj"],
                         init_lora_weights=False (A and B random, so B != 0): 11 adapted modules
  reference.safetensors  input_ids [1, 10] i64; base_logits_f64, lora_logits_f64 [1, 10, 64] f64
                         (PeftModel.from_pretrained(base f32, adapter).double(), eager attention)
  meta.json              the modules PEFT adapted (every LoraLayer in the PeftModel), the LoRA
                         options, seed, versions
  rules.json             peft.tuners.tuners_utils.check_target_module_exists on 37 module names
                         (the model's own and made-up ones) under 14 configs, each config as
                         LoraConfig.save_pretrained wrote it and read back with from_pretrained.
                         "medtune_refuses": true marks configs medtune must refuse (a layers_pattern
                         other than "layers", a negative layer index): for those the verdicts show
                         that PEFT adapts none of the model's modules.

Used by tests/unit/model/test_peft_layers.cpp (logits and adapted modules against medtune) and
tests/unit/io/test_peft_adapter.cpp (PeftRules: the rule, case by case). About 100 KB in all.

Python is a fixture-generation tool only; nothing at build or test time runs it.

Usage: python tools/make_peft_layers_fixture.py [--out tests/fixtures/peft/layers_to_transform]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch

torch.set_num_threads(1)

from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402
from peft.tuners.tuners_utils import check_target_module_exists  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import randomize, versions  # noqa: E402  (same weight scales, same version record)

SEED = 4321
T = 10
LAYERS = 3
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS, layers_to_transform=[0, 2],
            layers_pattern="layers", exclude_modules=["o_proj", "model.layers.2.mlp.up_proj"],
            init_lora_weights=False, bias="none", task_type="CAUSAL_LM")
MODEL = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=LAYERS,
             num_attention_heads=2, num_key_value_heads=1, head_dim=8, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False)

PROJ_PATHS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
MODEL_MODULES = [f"model.layers.{l}.{p}" for l in range(LAYERS) for p in PROJ_PATHS]
# Names no Llama has, to pin down the rule itself: nested numbers (first vs last), a pattern at the
# start of the name, leading zeros, suffixes that are not whole components, non-projection modules.
MADE_UP = [
    "x.blocks.2.layers.3.q_proj", "x.layers.3.experts.2.q_proj", "x.layers.2.blocks.3.q_proj",
    "layers.3.q_proj", "layers.0.q_proj", "model.0.q_proj", "model.q_proj", "q_proj",
    "model.layers.00.self_attn.q_proj", "model.layers.002.self_attn.q_proj",
    "model.layers.1.self_attn.xq_proj", "model.layers.10.mlp.down_proj", "model.layers.1",
    "model.layers.1.self_attn", "lm_head", "model.embed_tokens",
]

# name -> (LoraConfig kwargs beyond r/alpha, medtune refuses it)
RULE_CASES = {
    "all_layers": (dict(target_modules=TARGETS), False),
    "layers_0_2_default_pattern": (dict(target_modules=TARGETS, layers_to_transform=[0, 2]), False),
    "layer_1_as_int": (dict(target_modules=TARGETS, layers_to_transform=1), False),
    "layer_1_pattern_layers": (dict(target_modules=TARGETS, layers_to_transform=[1], layers_pattern="layers"), False),
    "layer_3_pattern_list": (dict(target_modules=["q_proj"], layers_to_transform=[3],
                                  layers_pattern=["blocks", "layers"]), False),
    "layer_2_empty_pattern": (dict(target_modules=TARGETS, layers_to_transform=[2], layers_pattern=""), False),
    "layers_empty_list": (dict(target_modules=TARGETS, layers_to_transform=[], layers_pattern="layers"), False),
    "full_name_target_skips_layer_filter": (dict(target_modules=["q_proj", "model.layers.1.self_attn.v_proj"],
                                                 layers_to_transform=[0]), False),
    "exclude_names": (dict(target_modules=TARGETS,
                           exclude_modules=["o_proj", "model.layers.2.mlp.up_proj", "1.self_attn.q_proj"]), False),
    "exclude_beats_full_name_target": (dict(target_modules=["q_proj", "model.layers.1.self_attn.v_proj"],
                                            exclude_modules=["self_attn.v_proj"]), False),
    "exclude_and_layers": (dict(target_modules=TARGETS, layers_to_transform=[0, 1], exclude_modules=["down_proj"]),
                           False),
    "pattern_h": (dict(target_modules=TARGETS, layers_to_transform=[0, 1, 2], layers_pattern="h"), True),
    "pattern_blocks_layer": (dict(target_modules=TARGETS, layers_to_transform=[0, 1, 2],
                                  layers_pattern=["blocks", "layer"]), True),
    "negative_layer": (dict(target_modules=TARGETS, layers_to_transform=[-1]), True),
}


def fixed_order(cfg: dict) -> dict:
    """PEFT writes target_modules and exclude_modules from Python sets (order varies from run to
    run); sort them so that regenerating gives the same files."""
    for k in ("target_modules", "exclude_modules"):
        if isinstance(cfg.get(k), list):
            cfg[k] = sorted(cfg[k])
    return cfg


def rules() -> dict:
    cases = []
    for name, (kwargs, refused) in RULE_CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM", **kwargs).save_pretrained(tmp)
            cfg = LoraConfig.from_pretrained(tmp)  # what PeftModel.from_pretrained would use
            saved = fixed_order(json.load(open(os.path.join(tmp, "adapter_config.json"))))
        # _ExcludedModule is falsy, a re.Match truthy, None / False falsy.
        adapted = {k: bool(check_target_module_exists(cfg, k)) for k in MODEL_MODULES + MADE_UP}
        if refused:
            assert not any(adapted[m] for m in MODEL_MODULES), name
        cases.append({"name": name, "medtune_refuses": refused, "adapter_config": saved, "adapted": adapted})
    return {"description": "peft.tuners.tuners_utils.check_target_module_exists(LoraConfig.from_pretrained(dir), "
                           "name) for each config and module name; tools/make_peft_layers_fixture.py",
            "cases": cases, "versions": versions()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "peft",
                                                  "layers_to_transform"))
    a = ap.parse_args()
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    base_dir, adapter_dir = os.path.join(a.out, "base"), os.path.join(a.out, "adapter")

    g = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    cfg = LlamaConfig(**MODEL)
    model = LlamaForCausalLM(cfg).float()
    randomize(model, cfg, g)
    model.save_pretrained(base_dir, safe_serialization=True)

    torch.manual_seed(SEED + 1)  # draws the LoRA init (kaiming-uniform A and B)
    pm = get_peft_model(model, LoraConfig(**LORA))
    adapted = sorted(n.removeprefix("base_model.model.") for n, m in pm.named_modules() if isinstance(m, LoraLayer))
    expected = sorted(f"model.layers.{l}.{p}" for l in (0, 2) for p in PROJ_PATHS
                      if not p.endswith("o_proj") and (l, p) != (2, "mlp.up_proj"))
    assert adapted == expected, adapted
    pm.save_pretrained(adapter_dir, safe_serialization=True)
    os.remove(os.path.join(adapter_dir, "README.md"))  # PEFT's model-card template, not needed
    acfg_path = os.path.join(adapter_dir, "adapter_config.json")
    acfg = fixed_order(json.load(open(acfg_path)))
    with open(acfg_path, "w") as f:
        json.dump(acfg, f, indent=2, sort_keys=True)
    saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    assert sorted(saved) == sorted(f"base_model.model.{m}.lora_{ab}.weight" for m in adapted for ab in "AB")
    del pm, model

    input_ids = torch.randint(0, MODEL["vocab_size"], (1, T), generator=g, dtype=torch.int64)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        base_logits = base.double().eval()(input_ids=input_ids).logits
    base32 = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    lm = PeftModel.from_pretrained(base32, adapter_dir).double().eval()
    loaded = sorted(n.removeprefix("base_model.model.") for n, m in lm.named_modules() if isinstance(m, LoraLayer))
    assert loaded == adapted, loaded
    with torch.no_grad():
        lora_logits = lm(input_ids=input_ids).logits
    diff = float((lora_logits - base_logits).abs().max())
    assert torch.isfinite(lora_logits).all() and diff > 1e-2, diff

    save_file({"input_ids": input_ids.contiguous(), "base_logits_f64": base_logits.contiguous(),
               "lora_logits_f64": lora_logits.contiguous()}, os.path.join(a.out, "reference.safetensors"))
    meta = {
        "description": "tiny Llama, 3 layers; PEFT LoRA on layers 0 and 2 only, o_proj and layer 2's up_proj "
                       "excluded; logits computed in float64 from the float32 files",
        "peft_adapted_modules": adapted,
        "lora": {k: v for k, v in LORA.items()},
        "scaling": LORA["lora_alpha"] / LORA["r"],
        "model": MODEL,
        "max_abs_lora_minus_base_logit": diff,
        "lora_logits_abs_max": float(lora_logits.abs().max()),
        "seed": SEED,
        "seed_note": "torch.Generator(seed) draws the weights then input_ids; torch.manual_seed(seed + 1) before "
                     "get_peft_model draws the LoRA init",
        "versions": versions(),
    }
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.out, "rules.json"), "w") as f:
        json.dump(rules(), f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"adapted {len(adapted)} modules; |lora - base| max {diff:.3f}; |lora| max {meta['lora_logits_abs_max']:.2f}")


if __name__ == "__main__":
    main()
