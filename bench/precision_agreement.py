#!/usr/bin/env python3
"""Agreement of two `medtune eval` runs of the same questions, e.g. --precision int8 against fp32:

    python3 bench/precision_agreement.py RUN_FP32 RUN_INT8

RUN_* is a run directory (its predictions.jsonl) or a predictions.jsonl. Prints, as one JSON
object: the questions in common, the share whose predicted letter is the same, the mean and max
|delta log-prob| over every option of every question (the options' log-probabilities as the scorer
wrote them), and each run's accuracy. The paired accuracy test is `medtune eval --compare A B`
(exact McNemar, src/eval/compare.h). A malformed line stops with its file and line number.
"""
import json
import math
import sys


def read(path):
    if not path.endswith(".jsonl"):
        path = path.rstrip("/") + "/predictions.jsonl"
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                out[r["id"]] = (r["pred"], r["gold"], r.get("option_logprobs") or [])
            except (ValueError, KeyError) as e:
                sys.exit(f"{path}:{n}: not a predictions record ({e})")
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = read(sys.argv[1]), read(sys.argv[2])
    ids = sorted(a.keys() & b.keys())
    if not ids:
        sys.exit("no question ids in common")
    same = sum(a[i][0] == b[i][0] for i in ids)
    deltas = []
    for i in ids:
        la, lb = a[i][2], b[i][2]
        if len(la) != len(lb):
            sys.exit(f"question {i}: {len(la)} vs {len(lb)} option log-probs")
        deltas += [abs(x - y) for x, y in zip(la, lb) if x is not None and y is not None
                   and math.isfinite(x) and math.isfinite(y)]
    acc = lambda r: sum(r[i][0] == r[i][1] for i in ids) / len(ids)
    print(json.dumps({
        "n": len(ids),
        "letter_agreement": same / len(ids),
        "mean_abs_delta_logprob": sum(deltas) / len(deltas) if deltas else None,
        "max_abs_delta_logprob": max(deltas) if deltas else None,
        "accuracy_a": acc(a), "accuracy_b": acc(b),
        "a": sys.argv[1], "b": sys.argv[2]}))


if __name__ == "__main__":
    main()
