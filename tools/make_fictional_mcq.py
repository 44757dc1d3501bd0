#!/usr/bin/env python3
"""The embedded default training set: fictional clinical multiple-choice questions.

    python3 tools/make_fictional_mcq.py   # rewrites data/fictional/{train,test}.jsonl

Every condition and drug is invented (names built from syllables), so the set teaches nothing
false about real medicine. Each fact is "the first-line drug for condition X is drug Y".

Training items ask every fact in TRAIN_TEMPLATES wordings (condition -> drug) and in
REVERSE_TEMPLATES wordings (drug -> condition), each wording several times with its options
shuffled anew. Test items ask every fact condition -> drug in TEST_TEMPLATES wordings, none of
which occurs in training (checked below), again with fresh option orders. Distractors are the
other facts' drugs (or conditions), so only knowing the pairing answers an item. Correct letters
are balanced over A-D. A model can only pass the test items by having learned the facts, not a
wording or a letter.

Deterministic: the same script writes the same bytes (random.Random(SEED), no other input).
Standard library only. Output is MedQA JSONL (question, options A-D, answer_idx, answer,
meta_info), read by `medtune eval` and `medtune train` like the real thing.
"""
import argparse
import json
import os
import random

SEED = 20261130
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "fictional")

# Onset + vowel pairs start every name; each name gets its own pair, so names differ from their
# first letters on (their first tokens differ too, which is what the scorer sees first).
ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "tr", "sk", "th", "qu"]
VOWELS = ["a", "e", "i", "o", "u"]
MIDDLES = ["l", "r", "n", "m", "s", "v", "x", "th"]
CODAS = ["n", "x", "r", "l", "th", "s"]  # closes condition names, so none is an English word
CONDITION_KINDS = ["syndrome", "fever", "disease", "palsy"]
DRUG_ENDINGS = ["azole", "mab", "pril", "cillin", "olol", "tinib"]

# {cond} and {drug} are filled in. Training and test wordings are disjoint by construction.
TRAIN_TEMPLATES = [
    "Which drug is the first-line treatment for {cond}?",
    "What is the recommended initial therapy for {cond}?",
    "A patient is diagnosed with {cond}. Which medication should be started first?",
    "Which medicine treats {cond}?",
    "{cond} is confirmed in a 40-year-old woman. What is the drug of choice?",
    "What should be prescribed for a man with {cond}?",
    "Name the standard first drug for {cond}.",
    "Treatment of {cond}: which agent?",
]
REVERSE_TEMPLATES = [
    "{drug} is the first-line treatment for which condition?",
    "Which disease is {drug} prescribed for?",
    "A patient was started on {drug}. Which condition does the patient most likely have?",
]
TEST_TEMPLATES = [
    "A 52-year-old has just been found to have {cond}. What should be given first?",
    "For a child with {cond}, which drug is preferred initially?",
    "Which agent would a clinician choose first to manage {cond}?",
]


def unique_names(rng, n, suffixes, capitalize=True):
    """n names, each starting with its own onset+vowel pair."""
    starts = rng.sample([o + v for o in ONSETS for v in VOWELS], n)
    names = []
    for s in starts:
        stem = s + rng.choice(MIDDLES) + rng.choice(VOWELS)
        names.append(suffixes(rng, stem.capitalize() if capitalize else stem))
    return names


def item(rng, question, answer, pool, letter, kind):
    options = rng.sample([p for p in pool if p != answer], 3)
    options.insert("ABCD".index(letter), answer)
    return {"question": question, "options": dict(zip("ABCD", options)), "answer_idx": letter,
            "answer": answer, "meta_info": kind}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facts", type=int, default=16, help="number of condition -> drug facts")
    ap.add_argument("--repeats", type=int, default=2, help="option shuffles per training wording")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    rng = random.Random(SEED)
    conds = unique_names(rng, args.facts, lambda r, s: s + r.choice(CODAS) + " " + r.choice(CONDITION_KINDS))
    drugs = unique_names(rng, args.facts, lambda r, s: s + r.choice(DRUG_ENDINGS))
    assert not set(TRAIN_TEMPLATES + REVERSE_TEMPLATES) & set(TEST_TEMPLATES)

    train, test = [], []
    n = 0  # running counter: letters cycle through A-D so each file is balanced
    for i, (cond, drug) in enumerate(zip(conds, drugs)):
        for rep in range(args.repeats):
            for tpl in TRAIN_TEMPLATES:
                train.append(item(rng, tpl.format(cond=cond), drug, drugs, "ABCD"[n % 4], "treatment"))
                n += 1
            for tpl in REVERSE_TEMPLATES:
                train.append(item(rng, tpl.format(drug=drug), cond, conds, "ABCD"[n % 4], "condition"))
                n += 1
    for i, (cond, drug) in enumerate(zip(conds, drugs)):
        for t, tpl in enumerate(TEST_TEMPLATES):
            test.append(item(rng, tpl.format(cond=cond), drug, drugs, "ABCD"[(i + t) % 4], "treatment"))
    train_questions = {r["question"] for r in train}
    assert not any(r["question"] in train_questions for r in test), "a test question occurs in training"
    rng.shuffle(train)
    rng.shuffle(test)
    os.makedirs(args.out, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(os.path.join(args.out, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"{len(train)} train, {len(test)} test items in {os.path.normpath(args.out)}")


if __name__ == "__main__":
    main()
