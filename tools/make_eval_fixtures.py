#!/usr/bin/env python3
"""Reference values for medtune's evaluation statistics (tests/fixtures/eval/).

    pip install numpy scipy statsmodels
    python tools/make_eval_fixtures.py            # writes tests/fixtures/eval/*

Independent of medtune's C++: Wilson intervals come from statsmodels' proportion_confint, the exact
McNemar test from statsmodels' mcnemar(exact=True) (cross-checked against scipy's binomtest), and
ECE from a literal transcription of Guo et al.'s reference code (gpleiss/temperature_scaling,
`_ECELoss`), since neither library has one. Deterministic: a fixed seed, and JSON floats written
with repr precision, so rerunning reproduces the files byte for byte.

Files:
  stats_reference.json   wilson / mcnemar / ece / letter_prior cases
  run_a.jsonl, run_b.jsonl
                         synthetic per-question predictions (the predictions.jsonl format) for the
                         same 200 made-up question ids; run_a is weak (near the letter prior),
                         run_b better. No MedQA text: ids and numbers only.
  run_expected.json      metrics of each run and the paired comparison, computed here.
"""
import json
import os

import numpy as np
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "eval")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
NUM_BINS = 10


def wilson(k, n):
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return {"k": k, "n": n, "lo": float(lo), "hi": float(hi)}


def mcnemar_case(b, c):
    # Table rows: run A right / wrong; columns: run B right / wrong. b = A right & B wrong.
    res = mcnemar([[10, b], [c, 7]], exact=True)
    p = float(res.pvalue)
    if b + c > 0:  # scipy's exact two-sided binomial test agrees on the symmetric p = 1/2 case
        assert abs(min(1.0, binomtest(min(b, c), b + c, 0.5).pvalue) - p) <= 1e-12 * max(p, 1e-300)
    return {"b": b, "c": c, "statistic": int(res.statistic), "p_value": p}


def ece_reference(conf, correct, n_bins=NUM_BINS):
    """Guo et al.'s _ECELoss with NumPy in place of torch; bins (lo, hi], edges i / n_bins."""
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    ece, mce, bins = 0.0, 0.0, []
    for i in range(n_bins):
        lo, hi = i / n_bins, (i + 1) / n_bins
        in_bin = (conf > lo) & (conf <= hi)
        if i == 0:
            in_bin |= conf == 0.0  # medtune puts a confidence of exactly 0 in the first bin
        prop = in_bin.mean() if len(conf) else 0.0
        count = int(in_bin.sum())
        if count > 0:
            acc = float(correct[in_bin].mean())
            avg = float(conf[in_bin].mean())
            ece += abs(avg - acc) * prop
            mce = max(mce, abs(avg - acc))
            bins.append({"lo": lo, "hi": hi, "count": count, "accuracy": acc, "mean_confidence": avg})
        else:
            bins.append({"lo": lo, "hi": hi, "count": 0, "accuracy": None, "mean_confidence": None})
    return {"ece": float(ece), "mce": float(mce), "bins": bins}


def letter_prior(gold, k):
    counts = np.bincount(np.asarray(gold, dtype=np.int64), minlength=k)
    best = int(np.argmax(counts))  # first maximum: ties to the earlier letter
    return {"gold_counts": counts.tolist(), "letter": best, "correct": int(counts[best]),
            "accuracy": float(counts[best] / len(gold))}


def stats_reference(rng):
    wilson_cases = [(0, 1), (1, 1), (0, 10), (10, 10), (3, 10), (7, 13), (50, 100), (1, 1000),
                    (999, 1000), (0, 1272), (1272, 1272), (412, 1272), (352, 1272), (636, 1272)]
    mcnemar_cases = [(0, 0), (0, 1), (1, 0), (1, 1), (5, 5), (3, 12), (12, 3), (0, 20), (20, 0),
                     (61, 104), (100, 130), (400, 450), (7, 8), (0, 1272)]
    ece_cases = []
    for n, shape in [(50, (2.0, 2.0)), (150, (5.0, 2.0)), (300, (1.2, 3.0))]:
        conf = rng.beta(*shape, size=n)
        correct = rng.random(n) < conf ** 1.4
        ece_cases.append({"confidence": conf.tolist(), "correct": correct.astype(int).tolist(),
                          **ece_reference(conf, correct)})
    # Edges: a confidence equal to a bin's upper edge belongs to that bin, (0.2, 0.3] holds 0.3.
    edge_conf = [0.1, 0.2, 0.3, 0.3, 0.7, 1.0, 0.25, 0.0]
    edge_correct = [0, 1, 1, 0, 1, 1, 0, 0]
    ece_cases.append({"confidence": edge_conf, "correct": edge_correct,
                      **ece_reference(edge_conf, edge_correct)})
    prior_cases = []
    for gold, k in [([0, 1, 2, 3, 2, 2, 1], 4), ([1, 1, 3, 3], 4), ([4, 4, 0, 1, 2, 3, 4], 5),
                    (rng.integers(0, 4, size=1272).tolist(), 4)]:
        prior_cases.append({"gold": gold, "num_options": k, **letter_prior(gold, k)})
    return {"z": 1.959963984540054, "wilson": [wilson(k, n) for k, n in wilson_cases],
            "mcnemar": [mcnemar_case(b, c) for b, c in mcnemar_cases], "ece": ece_cases,
            "letter_prior": prior_cases}


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def synthetic_runs(rng, n=200, k=4):
    """Two runs over the same made-up questions; gold letters skewed like real answer keys."""
    ids = [f"synthetic.jsonl:{i + 1}" for i in range(n)]
    meta = ["step1" if rng.random() < 0.55 else "step2&3" for _ in range(n)]
    gold = rng.choice(k, size=n, p=[0.22, 0.27, 0.29, 0.22])
    runs = {}
    for name, skill in [("run_a", 0.2), ("run_b", 1.6)]:
        rows = []
        for i in range(n):
            logits = rng.normal(0.0, 1.0, size=k)
            logits[gold[i]] += skill * rng.random() * 2
            logits[2] += 0.35  # a position bias towards C, as small models show
            logp = logits - np.log(np.exp(logits).sum())
            probs = softmax(logp)
            pred = int(np.argmax(probs))
            row = {"id": ids[i], "meta_info": meta[i], "gold": LETTERS[gold[i]],
                   "pred": LETTERS[pred], "correct": bool(pred == gold[i]),
                   "option_logprobs": [float(v) for v in logp],
                   "option_probs": [float(v) for v in probs]}
            if name == "run_b":  # run_b also carries acc_norm predictions
                row["pred_norm"] = LETTERS[int(np.argmax(logp + rng.normal(0, 0.3, size=k)))]
            rows.append(row)
        runs[name] = rows
    return runs, k


def expected_metrics(rows, k):
    gold = [LETTERS.index(r["gold"]) for r in rows]
    pred = [LETTERS.index(r["pred"]) for r in rows]
    right = [p == g for p, g in zip(pred, gold)]
    out = {"count": len(rows), "accuracy": wilson(sum(right), len(rows))}
    if "pred_norm" in rows[0]:
        out["acc_norm"] = wilson(sum(LETTERS.index(r["pred_norm"]) == g for r, g in zip(rows, gold)),
                                 len(rows))
    groups = {}
    for r, ok in zip(rows, right):
        groups.setdefault(r["meta_info"], []).append(ok)
    out["by_meta_info"] = [{"name": g, **wilson(sum(v), len(v))} for g, v in sorted(groups.items())]
    out["predicted_counts"] = np.bincount(pred, minlength=k).tolist()
    out["letter_prior"] = letter_prior(gold, k)
    conf = [max(r["option_probs"]) for r in rows]
    top_right = [int(np.argmax(r["option_probs"])) == g for r, g in zip(rows, gold)]
    out["calibration"] = ece_reference(conf, top_right)
    return out


def main():
    rng = np.random.default_rng(20240611)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "stats_reference.json"), "w") as f:
        json.dump(stats_reference(rng), f, indent=1)
        f.write("\n")
    runs, k = synthetic_runs(rng)
    for name, rows in runs.items():
        with open(os.path.join(OUT, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    ra = [r["correct"] for r in runs["run_a"]]
    rb = [r["correct"] for r in runs["run_b"]]
    b = sum(x and not y for x, y in zip(ra, rb))
    c = sum(y and not x for x, y in zip(ra, rb))
    expected = {"num_options": k, "run_a": expected_metrics(runs["run_a"], k),
                "run_b": expected_metrics(runs["run_b"], k),
                "compare": {"a_right_b_wrong": b, "a_wrong_b_right": c,
                            "both_right": sum(x and y for x, y in zip(ra, rb)),
                            "both_wrong": sum(not x and not y for x, y in zip(ra, rb)),
                            **{key: v for key, v in mcnemar_case(b, c).items() if key in ("statistic", "p_value")}}}
    with open(os.path.join(OUT, "run_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
