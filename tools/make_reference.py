#!/usr/bin/env python3
"""Generate the Hugging Face parity fixtures in tests/fixtures/hf/<name>/.

Every fixture directory holds (see tools/README.md for the full description):
  base/                       save_pretrained of a tiny random float32 model (config.json, model.safetensors)
  adapter_init/               PEFT LoRA save_pretrained (adapter_config.json, adapter_model.safetensors)
  reference.safetensors       inputs, base/LoRA logits, greedy continuation
  lora_grads.safetensors      d(loss)/d(every LoRA parameter), float64, PEFT names
  lora_after_adamw.safetensors LoRA parameters after one AdamW step, float64, PEFT names
  meta.json                   losses, hyper-parameters, config description, versions, seed

All reference numbers are computed in float64 from the saved float32 weights
(load float32, .double(), compute), with attn_implementation="eager".

Python is a fixture-generation tool only; nothing at build or test time runs it.

Usage: python tools/make_reference.py [--out tests/fixtures/hf] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys

import torch

torch.set_num_threads(1)

import peft  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

SEED = 1234
B, T = 2, 12          # batch, sequence length
PAD_TAIL = 3          # row 1 is right-padded over its last PAD_TAIL positions
PROMPT_LEN = T // 2   # labels are -100 on positions < PROMPT_LEN (the "prompt")
GREEDY_P = 6          # greedy prompt length
GREEDY_NEW = 8        # greedy new tokens
PAD_ID = 0            # id written at padded positions

LORA_R = 4
LORA_ALPHA = 8
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAMW = {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}

# name -> (config class, model class, config kwargs, human description)
CONFIGS = {
    "llama_gqa": (
        LlamaConfig, LlamaForCausalLM,
        dict(vocab_size=100, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False),
        "Llama, GQA 4 q heads / 2 kv heads, head_dim 8, untied lm_head, rope_theta 1e4",
    ),
    "llama_mha_odd": (
        LlamaConfig, LlamaForCausalLM,
        dict(vocab_size=101, hidden_size=36, intermediate_size=70, num_hidden_layers=2,
             num_attention_heads=3, num_key_value_heads=3, rope_theta=500000.0,
             rms_norm_eps=1e-5, tie_word_embeddings=False),
        "Llama, MHA 3 heads x head_dim 12 = hidden 36, intermediate 70, vocab 101, "
        "rope_theta 5e5, rms_norm_eps 1e-5, untied",
    ),
    "llama_tied": (
        LlamaConfig, LlamaForCausalLM,
        dict(vocab_size=97, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=True),
        "Llama, GQA 4/2, tie_word_embeddings=True (no lm_head.weight in model.safetensors)",
    ),
    "llama3_rope": (
        LlamaConfig, LlamaForCausalLM,
        # head_dim 16 and original_max_position_embeddings 32 put the 8 rope frequencies in all
        # three llama3 regimes at theta 1e4: wavelength 6.3 < 32/4 (kept), 19.9 in [8, 32]
        # (smoothly interpolated), >= 62.8 > 32 (divided by factor 8).
        dict(vocab_size=100, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=1, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=256,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        "Llama, GQA 2 q heads / 1 kv head, head_dim 16, llama3 rope scaling factor 8, "
        "low 1, high 4, original_max_position_embeddings 32 (all three frequency regimes hit)",
    ),
    "qwen2_bias": (
        Qwen2Config, Qwen2ForCausalLM,
        dict(vocab_size=100, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False),
        "Qwen2, q/k/v bias (o_proj none), GQA 4/2, tied embeddings (as Qwen2-0.5B), rope_theta 1e6",
    ),
    "mistral": (
        MistralConfig, MistralForCausalLM,
        # sliding_window 32 > every sequence used here (T=12, greedy 6+8=14), so the window
        # never masks anything; it is only a config field the loader must accept.
        dict(vocab_size=100, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=32,
             head_dim=8),
        "Mistral, GQA 4/2, sliding_window 32 (> all sequence lengths used, so no effect), untied",
    ),
    "llama_headdim": (
        LlamaConfig, LlamaForCausalLM,
        dict(vocab_size=100, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False),
        "Llama, explicit head_dim 16 != hidden/heads (8): q_proj [64,32], k/v [32,32], o_proj [32,64]",
    ),
    "llama_attn_bias": (
        LlamaConfig, LlamaForCausalLM,
        dict(vocab_size=100, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=True),
        "Llama with attention_bias=True: q, k, v AND o_proj carry a bias (unlike Qwen2)",
    ),
}
CLASSIC_OF = ("llama_gqa", "llama_gqa_classic_config")


def fixture_seed(name: str) -> int:
    """Distinct per fixture (so e.g. mistral and llama_gqa, same shapes, get different weights)."""
    return SEED + 100 * list(CONFIGS).index(name)


def set_seed(seed: int) -> torch.Generator:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    return g


@torch.no_grad()
def randomize(model: torch.nn.Module, cfg, g: torch.Generator) -> None:
    """Give every parameter an O(1)-meaningful random value.

    Linear weights ~ N(0, 1/fan_in) so activations keep unit scale; embeddings ~ N(0, 1) (untied) or
    N(0, 0.5^2) (tied, they are also the lm_head); lm_head ~ N(0, (2/sqrt(H))^2) so logits are O(1..10);
    norm weights 1 + 0.1 N(0,1); biases 0.2 N(0,1)."""
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    for name, p in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if tied else 1.0))
        elif name.endswith("lm_head.weight"):
            p.copy_(torch.randn(p.shape, generator=g) * (2.0 / math.sqrt(p.shape[1])))
        elif "norm" in name and name.endswith(".weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
        elif name.endswith(".bias"):
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
        elif name.endswith(".weight") and p.dim() == 2:
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")


def make_inputs(vocab: int, g: torch.Generator):
    input_ids = torch.randint(1, vocab, (B, T), generator=g, dtype=torch.int64)
    attention_mask = torch.ones(B, T, dtype=torch.int64)
    attention_mask[1, T - PAD_TAIL:] = 0
    input_ids[attention_mask == 0] = PAD_ID
    labels = input_ids.clone()
    labels[:, :PROMPT_LEN] = -100
    labels[attention_mask == 0] = -100
    greedy_prompt = torch.randint(1, vocab, (1, GREEDY_P), generator=g, dtype=torch.int64)
    return input_ids, attention_mask, labels, greedy_prompt


def causal_lm_loss_f64(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' ForCausalLMLoss (logits[:, :-1] vs labels[:, 1:], mean over labels != -100),
    but kept in float64: transformers itself upcasts logits with .float(), i.e. to float32."""
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100, reduction="mean")


def load_base_f64(base_dir: str) -> torch.nn.Module:
    m = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    return m.double().eval()


def peft_key(name: str) -> str:
    # PeftModel parameter "...q_proj.lora_A.default.weight" is saved as "...q_proj.lora_A.weight"
    return name.replace(".default.", ".")


def greedy(model, prompt: torch.Tensor) -> torch.Tensor:
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                         max_new_tokens=GREEDY_NEW, eos_token_id=None, pad_token_id=PAD_ID,
                         num_beams=1, temperature=None, top_p=None, top_k=None)
    # Cross-check against a plain argmax loop without KV cache (also proves no eos/processor effect).
    ids = prompt.clone()
    with torch.no_grad():
        for _ in range(GREEDY_NEW):
            nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    assert torch.equal(out, ids), (out, ids)
    return out


def check_rope(name: str, model) -> dict:
    """For llama3 scaling: record how many inverse frequencies the scaling changed."""
    rot = model.model.rotary_emb
    inv = rot.inv_freq.double()
    hd = inv.numel() * 2
    theta = model.config.rope_parameters["rope_theta"]
    default = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    changed = int((~torch.isclose(inv, default, rtol=1e-6, atol=0)).sum())
    return {"inv_freq": inv.tolist(), "inv_freq_default": default.tolist(), "n_changed": changed}


def build_fixture(name: str, out_root: str) -> dict:
    cfg_cls, model_cls, kwargs, desc = CONFIGS[name]
    d = os.path.join(out_root, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    base_dir = os.path.join(d, "base")
    adapter_dir = os.path.join(d, "adapter_init")

    seed = fixture_seed(name)
    g = set_seed(seed)
    cfg = cfg_cls(**kwargs)
    model = model_cls(cfg).float()
    randomize(model, cfg, g)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model.save_pretrained(base_dir, safe_serialization=True)
    stored = load_file(os.path.join(base_dir, "model.safetensors"))
    assert ("lm_head.weight" in stored) == (not cfg.tie_word_embeddings), sorted(stored)
    assert all(v.dtype == torch.float32 for v in stored.values())

    # LoRA with init_lora_weights=False: A and B both keep nn.Linear's default (kaiming-uniform)
    # init, so B != 0 and the adapter changes the output.
    torch.manual_seed(seed + 1)
    lcfg = LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS,
                      init_lora_weights=False, bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(model, lcfg)
    pm.save_pretrained(adapter_dir, safe_serialization=True)
    os.remove(os.path.join(adapter_dir, "README.md"))  # PEFT's model-card template, 5 KB, not needed
    # PEFT writes target_modules from a Python set (order varies run to run); fix it for stable files.
    acfg_path = os.path.join(adapter_dir, "adapter_config.json")
    acfg = json.load(open(acfg_path))
    assert sorted(acfg["target_modules"]) == sorted(LORA_TARGETS), acfg["target_modules"]
    acfg["target_modules"] = LORA_TARGETS
    with open(acfg_path, "w") as f:
        json.dump(acfg, f, indent=2, sort_keys=True)
    del pm, model

    input_ids, attention_mask, labels, greedy_prompt = make_inputs(cfg.vocab_size, g)

    # ---- base model, float64 ----
    base = load_base_f64(base_dir)
    with torch.no_grad():
        out = base(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    base_logits = out.logits
    base_loss = causal_lm_loss_f64(base_logits, labels)
    hf_base_loss = out.loss.item()  # transformers' own (float32-upcast) loss, a cross-check only
    assert abs(hf_base_loss - float(base_loss)) < 1e-5 * max(1.0, float(base_loss))
    greedy_out = greedy(base, greedy_prompt)
    rope_info = check_rope(name, base)
    if name == "llama3_rope":
        assert rope_info["n_changed"] > 0, "llama3 scaling did not change any frequency"

    # ---- LoRA model, float64, loss + grads + one AdamW step ----
    base2 = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    lm = PeftModel.from_pretrained(base2, adapter_dir, is_trainable=True).double()
    lm.eval()  # dropout is 0 anyway; eval() keeps everything deterministic
    lora_params = {peft_key(n): p for n, p in lm.named_parameters() if p.requires_grad}
    saved_adapter = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    assert sorted(lora_params) == sorted(saved_adapter), (sorted(lora_params)[:3], sorted(saved_adapter)[:3])
    for k, p in lora_params.items():
        assert p.dtype == torch.float64
        assert torch.equal(p.detach(), saved_adapter[k].double()), k
    out = lm(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    lora_logits = out.logits
    lora_loss = causal_lm_loss_f64(lora_logits, labels)
    assert abs(out.loss.item() - lora_loss.item()) < 1e-5 * max(1.0, lora_loss.item())
    lora_loss.backward()
    grads = {k: p.grad.detach().clone().contiguous() for k, p in lora_params.items()}
    for k, v in grads.items():
        assert torch.isfinite(v).all() and v.abs().max() > 0, k
    opt = torch.optim.AdamW(list(lora_params.values()), lr=ADAMW["lr"], betas=tuple(ADAMW["betas"]),
                            eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    opt.step()
    after = {k: p.detach().clone().contiguous() for k, p in lora_params.items()}

    for t in (base_logits, lora_logits):
        assert torch.isfinite(t).all()
    lora_logits = lora_logits.detach()
    diff = float((lora_logits - base_logits).abs().max())
    assert diff > 1e-2, f"LoRA barely changes logits ({diff})"

    ref = {
        "input_ids": input_ids.contiguous(),
        "attention_mask": attention_mask.contiguous(),
        "labels": labels.contiguous(),
        "base_logits": base_logits.detach().float().contiguous(),
        "lora_logits": lora_logits.detach().float().contiguous(),
        "base_logits_f64": base_logits.detach().contiguous(),
        "lora_logits_f64": lora_logits.detach().contiguous(),
        "greedy_prompt": greedy_prompt.contiguous(),
        "greedy_out": greedy_out.contiguous(),
    }
    save_file(ref, os.path.join(d, "reference.safetensors"))
    save_file(grads, os.path.join(d, "lora_grads.safetensors"))
    save_file(after, os.path.join(d, "lora_after_adamw.safetensors"))

    cfg_json = json.load(open(os.path.join(base_dir, "config.json")))
    meta = {
        "name": name,
        "arch": cfg_json["architectures"][0],
        "model_type": cfg_json["model_type"],
        "description": desc,
        "config": {k: cfg_json.get(k) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
            "tie_word_embeddings", "rope_parameters", "rope_theta", "rope_scaling",
            "max_position_embeddings", "sliding_window", "attention_bias")},
        "base_loss": float(base_loss),
        "lora_loss": lora_loss.item(),
        "hf_base_loss_f32_upcast": hf_base_loss,
        "loss": "mean cross-entropy of logits[:, :-1] vs labels[:, 1:] over labels != -100, in float64",
        "n_loss_tokens": int((labels[:, 1:] != -100).sum()),
        "lora": {"r": LORA_R, "alpha": LORA_ALPHA, "scaling": LORA_ALPHA / LORA_R,
                 "dropout": 0.0, "targets": LORA_TARGETS, "init_lora_weights": False},
        "adamw": ADAMW,
        "shapes": {"B": B, "T": T, "pad_tail_row1": PAD_TAIL, "prompt_len": PROMPT_LEN,
                   "greedy_prompt_len": GREEDY_P, "greedy_new_tokens": GREEDY_NEW, "pad_id": PAD_ID},
        "position_ids": "not passed: transformers uses 0..T-1 for every row (right padding, so the "
                        "real tokens' positions are the same as with mask-derived positions)",
        "attn_implementation": "eager",
        "dtype": "weights stored float32; all references computed in float64 from them",
        "max_abs_lora_minus_base_logit": diff,
        "base_logits_abs_max": float(base_logits.abs().max()),
        "base_logits_std": float(base_logits.std()),
        "rope": rope_info,
        "seed": seed,
        "seed_note": "torch.Generator(seed) draws weights, then inputs; torch.manual_seed(seed + 1) before "
                     "get_peft_model draws the LoRA init",
        "versions": versions(),
    }
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return meta


def make_classic(out_root: str) -> None:
    """Copy llama_gqa with base/config.json rewritten in the classic (pre rope_parameters) form."""
    src, dst = (os.path.join(out_root, n) for n in CLASSIC_OF)
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    cpath = os.path.join(dst, "base", "config.json")
    cfg = json.load(open(cpath))
    rp = cfg.pop("rope_parameters")
    assert rp.get("rope_type", "default") == "default", rp
    # The form transformers 4.3x-4.4x wrote (and most Llama-2-era checkpoints carry): top-level
    # rope_theta, rope_scaling null, "torch_dtype" instead of "dtype", and no head_dim (so the loader
    # must default it to hidden_size / num_attention_heads).
    assert cfg["head_dim"] == cfg["hidden_size"] // cfg["num_attention_heads"]
    del cfg["head_dim"]
    cfg["torch_dtype"] = cfg.pop("dtype")
    cfg["rope_scaling"] = None
    cfg["rope_theta"] = rp["rope_theta"]
    new = cfg
    with open(cpath, "w") as f:
        json.dump(new, f, indent=2, sort_keys=True)
        f.write("\n")
    # transformers must read the classic form into the same model: same logits bit for bit.
    ref = load_file(os.path.join(dst, "reference.safetensors"))
    m = load_base_f64(os.path.join(dst, "base"))
    assert m.config.rope_parameters["rope_theta"] == rp["rope_theta"]
    with torch.no_grad():
        lg = m(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits
    assert torch.equal(lg, ref["base_logits_f64"]), float((lg - ref["base_logits_f64"]).abs().max())
    mp = os.path.join(dst, "meta.json")
    meta = json.load(open(mp))
    meta["name"] = CLASSIC_OF[1]
    meta["description"] = ("Identical to llama_gqa (same weights, adapter, references) but base/config.json "
                           "uses the classic form: top-level rope_theta, rope_scaling null, no "
                           "rope_parameters, torch_dtype instead of dtype, no head_dim")
    with open(mp, "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "safetensors": safetensors.__version__,
            "python": sys.version.split()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "hf"))
    ap.add_argument("--only", nargs="*", help="subset of: " + ", ".join(CONFIGS))
    a = ap.parse_args()
    names = a.only or list(CONFIGS)
    os.makedirs(a.out, exist_ok=True)
    for n in names:
        m = build_fixture(n, a.out)
        print(f"{n:16s} base_loss {m['base_loss']:.6f} lora_loss {m['lora_loss']:.6f} "
              f"|logits|max {m['base_logits_abs_max']:.2f} std {m['base_logits_std']:.2f} "
              f"lora-base max {m['max_abs_lora_minus_base_logit']:.3f} rope changed {m['rope']['n_changed']}")
    if CLASSIC_OF[0] in names:
        make_classic(a.out)
        print(f"{CLASSIC_OF[1]:16s} written (classic config form, same logits verified)")


if __name__ == "__main__":
    main()
