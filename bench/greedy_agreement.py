#!/usr/bin/env python3
"""Greedy continuations of `medtune generate` at fp32 and int8, and of llama.cpp, on the same prompts:
how many tokens each pair agrees on before the first difference.

    VENV/bin/python bench/greedy_agreement.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --questions ../shared/data/medqa/dev.jsonl --prompts 50 --tokens 32

The prompts are the first --prompts MedQA questions' stems (raw text, no chat template), ids from
`medtune tokenize --json`; each engine continues them greedily for --tokens tokens (or to the end
of sequence). llama.cpp (llama-cpp-python, optional: a missing package is reported) is fed the same
ids. Greedy decoding amplifies any numerical difference: once two engines pick different tokens
their continuations part for good, so the shared prefix is the measure. Prints one JSON object: per pair,
the continuations identical to the end, those whose first token is the same, and the tokens agreed
on before the first difference (all --tokens for identical ones), median and mean.
"""
import argparse
import json
import os
import statistics
import subprocess


def medtune_ids(a, text, precision):
    out = subprocess.run([a.medtune, "generate", a.model, "-p", text, "-n", str(a.tokens), "--temperature", "0",
                          "--precision", precision, "--json", "-q"],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(a.threads)}).stdout
    return json.loads(out)["token_ids"]


def prompt_ids(a, text):
    out = subprocess.run([a.medtune, "tokenize", "--json", a.model, text], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["ids"]


def llama_cpp_engine(a):
    try:
        from llama_cpp import Llama
    except ImportError as e:
        print(f"llama-cpp-python not importable ({e}); comparing medtune's precisions only")
        return None
    llm = Llama(model_path=a.model, n_ctx=2048, n_threads=a.threads, n_batch=512, verbose=False)

    def run(ids):
        llm.reset()
        out = []
        for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            if len(out) == a.tokens:
                break
            out.append(t)  # the stop token too, as medtune's token_ids hold it
            if t == llm.token_eos():
                break
        return out
    return run


def common_prefix(x, y):
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--medtune", default="build/medtune")
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--questions", required=True, help="MedQA jsonl (a 'question' field per line)")
    p.add_argument("--prompts", type=int, default=50)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    texts = []
    with open(a.questions, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(json.loads(line)["question"])
            if len(texts) == a.prompts:
                break
    llama = llama_cpp_engine(a)
    runs = {"fp32": [], "int8": [], "llama.cpp": []}
    for text in texts:
        runs["fp32"].append(medtune_ids(a, text, "fp32"))
        runs["int8"].append(medtune_ids(a, text, "int8"))
        if llama:
            runs["llama.cpp"].append(llama(prompt_ids(a, text)))
    result = {"prompts": len(texts), "tokens": a.tokens, "model": a.model}
    pairs = [("int8", "fp32")] + ([("int8", "llama.cpp"), ("fp32", "llama.cpp")] if llama else [])
    for x, y in pairs:
        # Tokens agreed on: the shared prefix, or all --tokens when both continuations are the same
        # (also when both stopped early with the same stop token).
        prefixes = [a.tokens if u == v else common_prefix(u, v) for u, v in zip(runs[x], runs[y])]
        same = sum(u == v for u, v in zip(runs[x], runs[y]))
        result[f"{x} vs {y}"] = {"identical": same, "first_token_same": sum(n > 0 for n in prefixes),
                                 "agreed_tokens_median": statistics.median(prefixes),
                                 "agreed_tokens_mean": round(statistics.mean(prefixes), 2)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
