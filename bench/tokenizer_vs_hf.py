#!/usr/bin/env python3
"""Single-thread encode throughput on MedQA dev prompts: medtune's tokenizer_bench vs Hugging
Face tokenizers (Rust, via Python), same tokenizer, same prompts; prints both and the ratio.

  python3 bench/tokenizer_vs_hf.py --bench build/bench/tokenizer_bench \\
      --medqa-dev /work/shared/data/medqa/dev.jsonl \\
      [--tokenizer tests/fixtures/tokenizer/smollm2/tokenizer.json] [--repeats 5]

HF is timed calling Tokenizer.encode per prompt (encode_batch would use several threads);
RAYON_NUM_THREADS=1 keeps it on one thread anyway. The first pass (cold word caches) is reported
separately; the headline numbers are medians of the warm passes. Also checks that both produce
the same number of tokens.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def prompts(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                o = item["options"]
                out.append(f"Question: {item['question']}\nA. {o['A']}\nB. {o['B']}\nC. {o['C']}\n"
                           f"D. {o['D']}\nAnswer:")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--medqa-dev", required=True)
    p.add_argument("--tokenizer", default="tests/fixtures/tokenizer/smollm2/tokenizer.json")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()

    from tokenizers import Tokenizer, __version__
    texts = prompts(a.medqa_dev)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    tok = Tokenizer.from_file(a.tokenizer)

    def one_pass():
        t0 = time.perf_counter()
        n = 0
        for t in texts:
            n += len(tok.encode(t, add_special_tokens=False).ids)
        return time.perf_counter() - t0, n

    cold, hf_tokens = one_pass()
    warm = sorted(one_pass()[0] for _ in range(a.repeats))
    hf_med = statistics.median(warm)

    def batch_pass():  # one call, no per-prompt Python overhead (one rayon thread)
        t0 = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        return time.perf_counter() - t0

    batch_med = statistics.median(batch_pass() for _ in range(a.repeats))

    res = subprocess.run([a.bench, a.tokenizer, a.medqa_dev, str(a.repeats)], check=True,
                         capture_output=True, text=True)
    mt = json.loads(res.stdout.strip().splitlines()[-1])
    if mt["tokens"] != hf_tokens:
        print(f"WARNING: token counts differ: medtune {mt['tokens']} vs HF {hf_tokens}")

    print(f"MedQA dev: {len(texts)} prompts, {nbytes / 1e6:.3f} MB, {hf_tokens} tokens; "
          f"tokenizer {a.tokenizer}; HF tokenizers {__version__}; one thread")
    print(f"{'':10s} {'cold s':>8s} {'median s':>9s} {'MB/s':>8s} {'tokens/s':>12s}")
    print(f"{'HF':10s} {cold:8.3f} {hf_med:9.3f} {nbytes / 1e6 / hf_med:8.2f} {hf_tokens / hf_med:12.0f}")
    print(f"{'HF batch':10s} {'':8s} {batch_med:9.3f} {nbytes / 1e6 / batch_med:8.2f} "
          f"{hf_tokens / batch_med:12.0f}")
    print(f"{'medtune':10s} {mt['cold_s']:8.3f} {mt['median_s']:9.3f} {mt['mb_per_s']:8.2f} "
          f"{mt['tokens_per_s']:12.0f}")
    print(f"ratio medtune/HF throughput (median, warm): {hf_med / mt['median_s']:.2f}x; "
          f"cold: {cold / mt['cold_s']:.2f}x; vs HF encode_batch: {batch_med / mt['median_s']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
