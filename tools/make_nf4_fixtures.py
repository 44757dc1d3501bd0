#!/usr/bin/env python3
"""NF4 fixtures from bitsandbytes' CPU implementation -> tests/fixtures/nf4/.

For each case: <case>.in.f32 (input, fp32 little-endian), and what bitsandbytes makes of it with
quantize_4bit(blocksize=64, quant_type="nf4"):
  plain  (compress_statistics=False): <case>.packed (u8, two codes a byte, first in the high nibble),
         <case>.absmax.f32 (one per block of 64), <case>.deq.f32 (dequantize_4bit)
  nested (compress_statistics=True, bitsandbytes' "double quantization"):
         <case>.nested.qabsmax (u8 codes of absmax - offset in the signed dynamic map),
         <case>.nested.absmax2.f32 (one per block of 256 absmax values), <case>.nested.offset.f32,
         <case>.nested.deq.f32 (dequantize_4bit through the nested statistics)
Plus dynamic_map.f32 (create_dynamic_map(), 256 values) and nf4_code.f32 (the 16 NF4 values).
manifest.json lists the cases and their lengths, and records the versions and that everything ran
on the CPU. Run: python3 tools/make_nf4_fixtures.py [--check]  (--check compares instead of
writing, exit 1 on any difference: the live test, tests/e2e/nf4_live_bnb.sh).
     python3 tools/make_nf4_fixtures.py --tiny-checkpoint  (tests/fixtures/nf4/tiny_llama/, see
     make_tiny_checkpoint).
"""
import json
import os
import sys

try:
    import numpy as np
    import torch
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
except ImportError as e:
    print(f"skipping: {e} (pip install -r tools/requirements.txt)")
    sys.exit(77)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "nf4")
f32 = np.float32


def nf4_midpoints():
    code = np.array(F.get_4bit_type("nf4", device="cpu").numpy(), dtype=f32)
    return ((code[:-1] + code[1:]) / f32(2)).astype(f32), code


def cases():
    rng = np.random.default_rng(20261130)
    mids, code = nf4_midpoints()
    c = {}
    c["normal_2368"] = rng.standard_normal(2368).astype(f32) * f32(0.02)
    # a weight-like matrix whose absmax count (64*300/64 = 300) spans two nested blocks of 256
    c["matrix_300x64"] = (rng.standard_normal(300 * 64) * rng.choice([0.01, 0.05, 0.3], 300 * 64)).astype(f32)
    c["zeros_128"] = np.zeros(128, f32)
    # exact ties: each block has absmax 1 (so the scale is exactly 1) and holds the 15 fp32
    # midpoints between NF4 codes, their negatives, and values one ulp either side
    t = [f32(1.0)]
    for m in mids:
        t += [m, np.nextafter(m, f32(2)), np.nextafter(m, f32(-2))]
    t = np.array(t, f32)
    c["ties_128"] = np.concatenate([t, -t, np.zeros(128 - 2 * len(t), f32)])[:128].astype(f32)
    c["huge_tiny_192"] = np.concatenate([
        (rng.standard_normal(64) * 3e38).clip(-3.4e38, 3.4e38).astype(f32),
        (rng.standard_normal(64) * 1e-40).astype(f32),  # subnormals: absmax below 1e-38
        np.array([3.0e38, -1e-45, 1e-30, -0.0] * 16, f32)])
    c["odd_101"] = rng.standard_normal(101).astype(f32)
    c["remainder_200"] = rng.standard_normal(200).astype(f32) * f32(0.1)
    return c


def run(x):
    t = torch.from_numpy(x.copy())
    assert t.device.type == "cpu"
    out = {}
    q, s = F.quantize_4bit(t, blocksize=64, quant_type="nf4", compress_statistics=False)
    assert q.device.type == "cpu"
    out["packed"] = q.numpy().reshape(-1).astype(np.uint8).tobytes()
    out["absmax.f32"] = s.absmax.numpy().astype(f32).tobytes()
    out["deq.f32"] = F.dequantize_4bit(q, s).numpy().astype(f32).reshape(-1).tobytes()
    q2, s2 = F.quantize_4bit(t, blocksize=64, quant_type="nf4", compress_statistics=True)
    assert q2.numpy().tobytes() == q.numpy().tobytes()
    out["nested.qabsmax"] = s2.absmax.numpy().astype(np.uint8).tobytes()
    out["nested.absmax2.f32"] = s2.state2.absmax.numpy().astype(f32).tobytes()
    out["nested.offset.f32"] = np.array([s2.offset.item()], f32).tobytes()
    out["nested.deq.f32"] = F.dequantize_4bit(q2, s2).numpy().astype(f32).reshape(-1).tobytes()
    return out


def main():
    check = "--check" in sys.argv
    # Single-threaded torch: absmax.mean() (the nested offset) sums in an order that depends on
    # the thread count above 32768 elements; our cases stay far below, this only pins it.
    torch.set_num_threads(1)
    files = {}
    manifest = {"bitsandbytes": bnb.__version__, "torch": torch.__version__,
                "cuda_available": torch.cuda.is_available(),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "blocksize": 64, "nested_blocksize": 256, "cases": {}}
    assert not torch.cuda.is_available(), "must run bitsandbytes' CPU path"
    _, code = nf4_midpoints()
    files["nf4_code.f32"] = code.astype(f32).tobytes()
    files["dynamic_map.f32"] = F.create_dynamic_map().numpy().astype(f32).tobytes()
    for name, x in cases().items():
        manifest["cases"][name] = int(x.size)
        files[name + ".in.f32"] = x.astype(f32).tobytes()
        for k, v in run(x).items():
            files[name + "." + k] = v
    bad = 0
    for fname, data in sorted(files.items()):
        path = os.path.join(OUT, fname)
        if check:
            with open(path, "rb") as f:
                if f.read() != data:
                    print("DIFFERS:", fname)
                    bad += 1
        else:
            with open(path, "wb") as f:
                f.write(data)
    if check:
        with open(os.path.join(OUT, "manifest.json")) as f:
            committed = json.load(f)
        if committed["cases"] != manifest["cases"]:
            print("DIFFERS: manifest cases")
            bad += 1
        print(f"{len(files)} files compared with bitsandbytes {bnb.__version__}: {bad} differ")
        return 1 if bad else 0
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(files)} files to {OUT}")
    return 0




def make_tiny_checkpoint():
    """tests/fixtures/nf4/tiny_llama/: a random tiny Llama (dims multiples of 64) saved in F32
    (base/), the same loaded by transformers with load_in_4bit (nf4, double quantization,
    compute dtype float32) on the CPU and saved by save_pretrained (bnb/), and that quantized
    model's logits for fixed ids (logits.f32, (T, V); ids.json)."""
    from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM
    root = os.path.join(OUT, "tiny_llama")
    torch.manual_seed(7)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=256, tie_word_embeddings=False)
    base = LlamaForCausalLM(cfg).eval()
    base.save_pretrained(os.path.join(root, "base"))
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.float32)
    mq = LlamaForCausalLM.from_pretrained(os.path.join(root, "base"), quantization_config=q,
                                          device_map="cpu", dtype=torch.float32).eval()
    assert mq.model.layers[0].self_attn.q_proj.weight.device.type == "cpu"
    mq.save_pretrained(os.path.join(root, "bnb"))
    ids = [3, 17, 5, 42, 9, 1, 30, 127, 64]
    with torch.no_grad():
        logits = mq(torch.tensor([ids])).logits[0].float().numpy()
    logits.astype(f32).tofile(os.path.join(root, "logits.f32"))
    with open(os.path.join(root, "ids.json"), "w") as f:
        json.dump({"ids": ids, "bitsandbytes": bnb.__version__}, f)
        f.write("\n")
    print("wrote", root)


if __name__ == "__main__":
    if "--tiny-checkpoint" in sys.argv:
        make_tiny_checkpoint()
        sys.exit(0)
    sys.exit(main())
