#!/usr/bin/env python3
"""Writes tests/fixtures/eval/python_random.json: outputs of Python's own random.Random that
src/eval/python_random.cpp must reproduce bit for bit, and the few-shot draws of
lm-evaluation-harness's ContextSampler (lm_eval/api/samplers.py) for a made-up pool.

Run from the repository root:  python3 tools/make_fewshot_fixtures.py

lm-eval (as of 2026-08) draws few-shot examples as follows, and this script does the same with
plain Python so that it needs no lm-eval install: the task's sampler gets
random.Random(fewshot_random_seed = 1234) once (Task.set_fewshot_seed), then fewshot_context()
calls sampler.sample(n=k, eval_doc=...) for each document in order, i.e. rnd.sample(pool, k);
when the few-shot split is the test split, rnd.sample(pool, k + 1) with the document removed and
the first k kept (ContextSampler.rm_eval_doc).
"""
import json
import os
import platform
import random

OUT = "tests/fixtures/eval/python_random.json"


def lm_eval_draws(pool_size, questions, k, seed, same_split):
    """Per question index q: pool indices. In the same-split case question q is pool record q."""
    rnd = random.Random(seed)
    pool = list(range(pool_size))
    out = []
    for q in range(questions):
        if same_split:
            drawn = rnd.sample(pool, k + 1)
            out.append([x for x in drawn if x != q][:k])
        else:
            out.append(rnd.sample(pool, k))
    return out


def main():
    seeds = [0, 1, 42, 1234, 2**32 - 1, 2**32 + 5, 2**40 + 7]
    words = {}
    for s in seeds:  # 700 words: crosses the 624-word regeneration of the state
        r = random.Random(s)
        seq = [r.getrandbits(32) for _ in range(700)]
        words[str(s)] = seq[:5] + seq[620:630] + seq[-3:]
    below = []
    for seed, n in [(1234, 1), (1234, 2), (1234, 3), (7, 10), (7, 1000), (99, 2**31 + 1), (5, 2**32 - 1)]:
        r = random.Random(seed)
        below.append({"seed": seed, "n": n, "values": [r._randbelow(n) for _ in range(20)]})
    samples = []
    # Both branches of random.sample: n <= setsize (list) and above (set); setsize is 21 for
    # k <= 5 and 21 + 4**ceil(log4(3k)) above.
    for seed, n, k in [(1234, 10, 3), (1234, 21, 5), (1234, 22, 5), (1234, 1272, 5), (3, 85, 6), (3, 86, 6),
                       (3, 100, 6), (11, 1000, 50), (11, 5, 5), (11, 1, 1), (11, 3, 0), (2**33, 10178, 25)]:
        r = random.Random(seed)
        samples.append({"seed": seed, "n": n, "k": k, "draws": [r.sample(range(n), k) for _ in range(3)]})
    out = {
        "python": platform.python_version(),
        "words": words,
        "randbelow": below,
        "sample": samples,
        "lm_eval": [
            {"pool": 50, "questions": 30, "k": 3, "seed": 1234, "same_split": False,
             "draws": lm_eval_draws(50, 30, 3, 1234, False)},
            {"pool": 12, "questions": 12, "k": 5, "seed": 1234, "same_split": True,
             "draws": lm_eval_draws(12, 12, 5, 1234, True)},
        ],
    }
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes) with Python {platform.python_version()}")


if __name__ == "__main__":
    main()
