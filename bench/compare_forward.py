#!/usr/bin/env python3
"""Prompt processing and batch-1 decode on one GGUF, side by side in one run:
medtune (bench/bench_forward), llama.cpp (llama-cpp-python) and PyTorch (transformers, fp32).

    python3 bench/compare_forward.py --bench build/bench/bench_forward \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2

Each engine sees the same pseudo-random 512-token prompt length and decodes 64 tokens greedily;
medians over --repeats rounds after one warm-up round. Peers are optional: a missing package is
reported, not fatal. Prints a table and one JSON line with every number.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def bench_medtune(a):
    out = subprocess.run([a.bench, a.model, "--prompt-tokens", str(a.prompt), "--decode-tokens",
                          str(a.decode), "--repeats", str(a.repeats), "--threads", str(a.threads)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["prompt_tokens_per_s_median"], r["decode_tokens_per_s_median"]


def prompt_ids(n, vocab):
    s, ids = 12345, []
    for _ in range(n):  # the same generator as bench_forward.cpp
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        ids.append((s >> 33) % vocab)
    return ids


def bench_llama_cpp(a):
    from llama_cpp import Llama
    llm = Llama(model_path=a.model, n_ctx=a.prompt + a.decode + 8, n_batch=a.prompt, n_ubatch=a.prompt,
                n_threads=a.threads, n_threads_batch=a.threads, logits_all=False, verbose=False)
    ids = prompt_ids(a.prompt, llm.n_vocab())
    pp, tg = [], []
    for r in range(a.repeats + 1):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t_pp = time.perf_counter() - t0
        tok = 1  # the id does not change the cost of a decode step
        t0 = time.perf_counter()
        for _ in range(a.decode):
            llm.eval([tok])
        t_tg = time.perf_counter() - t0
        if r:
            pp.append(a.prompt / t_pp)
            tg.append(a.decode / t_tg)
    return statistics.median(pp), statistics.median(tg)


def bench_torch(a):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    d, f = os.path.split(os.path.abspath(a.model))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()
    ids = torch.tensor([prompt_ids(a.prompt, model.config.vocab_size)])
    pp, tg = [], []
    with torch.inference_mode():
        for r in range(a.repeats + 1):
            t0 = time.perf_counter()
            out = model(ids, use_cache=True, logits_to_keep=1)
            t_pp = time.perf_counter() - t0
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            for _ in range(a.decode):
                out = model(tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            t_tg = time.perf_counter() - t0
            if r:
                pp.append(a.prompt / t_pp)
                tg.append(a.decode / t_tg)
    return statistics.median(pp), statistics.median(tg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bench/bench_forward")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    results = {"medtune": bench_medtune(a)}
    for name, fn in (("llama.cpp", bench_llama_cpp), ("pytorch", bench_torch)):
        try:
            results[name] = fn(a)
        except ImportError as e:
            print(f"{name}: skipped ({e})", file=sys.stderr)
    base = results.get("llama.cpp")
    print(f"{'engine':<10} {'prompt tok/s':>13} {'decode tok/s':>13} {'pp vs llama.cpp':>16} {'tg vs llama.cpp':>16}")
    for name, (pp, tg) in results.items():
        rel = f"{pp / base[0]:>15.2f}x {tg / base[1]:>15.2f}x" if base else ""
        print(f"{name:<10} {pp:>13.1f} {tg:>13.1f} {rel}")
    print(json.dumps({"threads": a.threads, "prompt_tokens": a.prompt, "decode_tokens": a.decode,
                      "repeats": a.repeats, "results": results}))


if __name__ == "__main__":
    main()
