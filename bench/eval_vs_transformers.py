#!/usr/bin/env python3
"""MedQA scoring speed, questions per second, side by side in one run: `medtune eval` vs a
straightforward transformers loop doing the same scoring (lm_eval prompts, SmolLM2 GGUF).

    python3 bench/eval_vs_transformers.py --medtune build/medtune \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --data dev.jsonl --limit 200 --threads 2

medtune: `medtune -t T eval MODEL --data D --limit L [--scoring text]`; q/s = questions / wall
time of the process (model load included; it is an mmap). transformers: the GGUF dequantized to
float32 (load not timed), torch.set_num_threads(T), tokens from HF tokenizers with
tests/fixtures/tokenizer/smollm2/tokenizer.json, no KV cache reuse:
  letter     one forward of the context per question, log-softmax at its last position
  text bs1   lm-eval's HF backend way: one forward of context + option per (question, option)
  text bs4   the same 4 sequences of a question in one right-padded batch with an attention mask
Each measurement is repeated --repeats times (alternating engines); medians are printed, with
one JSON line holding every number. Next to q/s (wall time) each engine's CPU seconds per
question (user + sys, all threads): on a shared, loaded machine the wall time mostly measures
the load, the CPU time much less so (though OpenMP threads spinning at barriers count as CPU). The transformers predictions are checked against medtune's.

--bf16 adds letter scoring at bf16 to the rounds: `medtune eval --precision bf16` against the same
transformers loop under `torch.autocast("cpu", dtype=torch.bfloat16)` (PyTorch's CPU bf16), and
reports each one's letter agreement with its fp32 run.
--int8 adds medtune's letter scoring at `--precision int8` (no transformers counterpart: it is
compared with the same fp32 loop, and its letters with medtune's fp32 ones).
--letter-only leaves out option-text scoring (bench/cpu_goals.py's scoring goal is letters only).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import eval_reference as er  # noqa: E402  (prompt rendering and _encode_pair, shared with the reference)


def run_medtune(a, scoring, out, precision="fp32"):
    cmd = [a.medtune, "-t", str(a.threads), "eval", a.model, "--data", a.data, "--limit", str(a.limit),
           "--scoring", scoring, "--precision", precision, "--out", out, "-q"]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    preds = [json.loads(l) for l in open(os.path.join(out, "predictions.jsonl")) if l.strip()]
    return len(preds) / wall, cpu / len(preds), preds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--medtune", required=True)
    ap.add_argument("--model", default=er.DEFAULT_GGUF)
    ap.add_argument("--data", default=os.environ.get("MEDTUNE_MEDQA_DEV", "/work/shared/data/medqa/dev.jsonl"))
    ap.add_argument("--tokenizer", default=er.DEFAULT_TOKENIZER)
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-bs4", action="store_true")
    ap.add_argument("--letter-only", action="store_true",
                    help="no option-text scoring (its transformers loop, one forward per option, is the slowest run)")
    ap.add_argument("--bf16", action="store_true", help="also letter scoring at bf16 (medtune and torch autocast)")
    ap.add_argument("--int8", action="store_true", help="also medtune's letter scoring at precision int8")
    a = ap.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    tk = Tokenizer.from_file(a.tokenizer)
    d, name = os.path.split(os.path.abspath(a.model))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()
    pad = 0
    qs = er.read_questions(a.data, a.limit)
    enc = []
    for _, question, options, _ in qs:
        ctx_text = er.lm_eval_context(question, options)
        ctx = tk.encode(ctx_text).ids
        letters = [er.continuation_ids(tk, ctx_text, " " + chr(65 + i))[0] for i in range(len(options))]
        texts = [er.continuation_ids(tk, ctx_text, " " + o) for o in options]
        enc.append((ctx, letters, texts, options))

    def hf_letter(bf16=False):
        import contextlib
        preds = []
        c0 = time.process_time()
        t0 = time.perf_counter()
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with torch.no_grad(), autocast:
            for ctx, letters, _, _ in enc:
                last = torch.log_softmax(model(torch.tensor([ctx]), use_cache=False).logits[0, -1], -1)
                preds.append(er.argmax([float(last[t]) for t in letters]))
        return len(enc) / (time.perf_counter() - t0), (time.process_time() - c0) / len(enc), preds

    def hf_text(bs):
        preds = []
        c0 = time.process_time()
        t0 = time.perf_counter()
        with torch.no_grad():
            for ctx, _, texts, _ in enc:
                seqs = [ctx + c for c in texts]
                ll = []
                for i in range(0, len(seqs), bs):
                    chunk = seqs[i:i + bs]
                    T = max(len(s) for s in chunk)
                    ids = torch.tensor([s + [pad] * (T - len(s)) for s in chunk])
                    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in chunk])
                    lp = torch.log_softmax(model(ids, attention_mask=mask, use_cache=False).logits, -1)
                    for b, c in enumerate(texts[i:i + bs]):
                        P = len(ctx)
                        ll.append(float(sum(lp[b, P - 1 + j, t] for j, t in enumerate(c))))
                preds.append(er.argmax(ll))
        return len(enc) / (time.perf_counter() - t0), (time.process_time() - c0) / len(enc), preds

    runs = {k: [] for k in ("medtune letter", "medtune text", "hf letter", "hf text bs1", "hf text bs4",
                            "medtune letter bf16", "hf letter bf16", "medtune letter int8")}
    cpu = {k: [] for k in runs}  # CPU seconds (user + sys, all threads) per question
    preds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for key, fn in (("medtune letter", lambda: run_medtune(a, "letter", os.path.join(tmp, "l"))),
                            ("hf letter", hf_letter),
                            ("medtune text", lambda: run_medtune(a, "text", os.path.join(tmp, "t"))),
                            ("hf text bs1", lambda: hf_text(1)),
                            ("hf text bs4", lambda: hf_text(4)),
                            ("medtune letter bf16", lambda: run_medtune(a, "letter", os.path.join(tmp, "lb"), "bf16")),
                            ("hf letter bf16", lambda: hf_letter(True)),
                            ("medtune letter int8", lambda: run_medtune(a, "letter", os.path.join(tmp, "li"), "int8"))):
                if ((key == "hf text bs4" and a.no_bs4) or (" text" in key and a.letter_only)
                        or (key.endswith("bf16") and not a.bf16)
                        or (key.endswith("int8") and not a.int8)):
                    continue
                qps, cpq, p = fn()
                runs[key].append(qps)
                cpu[key].append(cpq)
                preds[key] = p
                print(f"  round {r + 1}: {key:15s} {qps:.3f} q/s  {cpq:.2f} CPU s/question", file=sys.stderr,
                      flush=True)

    letter = lambda p: [ord(x["pred"]) - 65 for x in p]  # noqa: E731
    agree_letter = sum(x == y for x, y in zip(letter(preds["medtune letter"]), preds["hf letter"]))
    agree_text = (None if a.letter_only else
                  sum(x == y for x, y in zip(letter(preds["medtune text"]), preds["hf text bs1"])))
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items() if v}
    n = len(enc)
    print(f"\nMedQA dev, first {n} questions, lm_eval prompts, {os.path.basename(a.model)}, {a.threads} threads, "
          f"median of {a.repeats} run(s)")
    print(f"{'scoring':10s} {'medtune q/s':>12s} {'transformers':>22s} {'q/s':>8s} {'medtune / tf':>13s}"
          f" {'CPU s/q medtune':>16s} {'tf':>6s} {'ratio':>6s}")
    rows = [("letter", "medtune letter", "hf letter", "fp32, 1 fwd/question"),
            ("text", "medtune text", "hf text bs1", "fp32, 1 fwd/option"),
            ("text", "medtune text", "hf text bs4", "fp32, 4 options/batch")]
    if a.bf16:
        rows.append(("letter", "medtune letter bf16", "hf letter bf16", "bf16 autocast, letter"))
    if a.int8:
        rows.append(("letter", "medtune letter int8", "hf letter", "fp32 (int8: medtune)"))
    for scoring, mk, hk, what in rows:
        if hk in med:
            print(f"{scoring:10s} {med[mk]:12.3f} {what:>22s} {med[hk]:8.3f} {med[mk] / med[hk]:12.2f}x"
                  f" {med_cpu[mk]:16.2f} {med_cpu[hk]:6.2f} {med_cpu[hk] / med_cpu[mk]:5.2f}x")
    print(f"predictions agree (medtune vs transformers fp32): letter {agree_letter}/{n}"
          + ("" if agree_text is None else f", text {agree_text}/{n}"))
    agree_bf16 = {}
    if a.bf16:
        agree_bf16 = {"medtune": sum(x == y for x, y in zip(letter(preds["medtune letter bf16"]), letter(preds["medtune letter"]))),
                      "transformers": sum(x == y for x, y in zip(preds["hf letter bf16"], preds["hf letter"]))}
        print(f"bf16 letters agreeing with the same engine's fp32: medtune {agree_bf16['medtune']}/{n}, "
              f"transformers {agree_bf16['transformers']}/{n}")
    agree_int8 = None
    if a.int8:
        agree_int8 = sum(x == y for x, y in zip(letter(preds["medtune letter int8"]), letter(preds["medtune letter"])))
        print(f"medtune int8 letters agreeing with its fp32 ones: {agree_int8}/{n}")
    print(json.dumps({"questions": n, "threads": a.threads, "repeats": a.repeats, "runs": runs, "median": med,
                      "cpu_s_per_question": cpu, "median_cpu_s_per_question": med_cpu,
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                      "agree_letter": agree_letter, "agree_text": agree_text, "agree_bf16_vs_fp32": agree_bf16,
                      "agree_int8_vs_fp32": agree_int8,
                      "torch": torch.__version__, "transformers": transformers.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
