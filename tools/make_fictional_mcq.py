#!/usr/bin/env python3
"""The embedded default training set: fictional clinical multiple-choice questions.

    python3 tools/make_fictional_mcq.py   # rewrites data/fictional/{train,test}.jsonl

Every condition, drug, test and finding is invented (names built from syllables), so the set
teaches nothing false about real medicine. Each fact ("the first-line drug for X is Y", "the test
that confirms X is Z") is asked by three training templates and by one different test template;
every item shuffles its options independently, and correct letters are balanced over A-D, so a
model can only pass the test items by having learned the facts, not the wording or the letter.

Deterministic: the same script writes the same bytes (random.Random(SEED), no other input).
Standard library only. Output is MedQA JSONL (question, options A-D, answer_idx, answer,
meta_info), read by `medtune eval` and `medtune train` like the real thing.
"""
import json
import os
import random

SEED = 20261130
N_CONDITIONS = 24
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "fictional")

ONSETS = ["br", "d", "f", "g", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "z", "th", "x", "dr", "tr", "sk"]
VOWELS = ["a", "e", "i", "o", "u", "ae", "io", "y"]
CODAS = ["", "n", "r", "l", "s", "x", "th", "m"]


def word(rng, syllables):
    return "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables))


def unique_names(rng, n, make):
    seen, out = set(), []
    while len(out) < n:
        name = make(rng)
        if name.lower() not in seen:
            seen.add(name.lower())
            out.append(name)
    return out


CONDITION_KINDS = ["syndrome", "fever", "disease", "palsy", "dystrophy", "myelitis"]
DRUG_ENDINGS = ["azole", "mab", "pril", "vastin", "cillin", "olol", "tinib", "dronate"]
TEST_KINDS = ["assay", "antigen test", "biopsy stain", "skin test", "serum panel", "flow test"]
FINDINGS = ["violet palmar streaks", "a whistling cough", "copper-colored nail beds", "intermittent hiccups",
            "a migrating forearm rash", "bitter taste", "blue-tinged earlobes", "paroxysmal yawning",
            "a clicking jaw", "silver tongue patches", "night-time shivering", "patchy eyebrow loss"]

# (kind, train templates, test template, answer field). {vignette} opens each question.
TEMPLATES = {
    "treatment": (
        ["{vignette} is diagnosed with {cond}. Which drug is the first-line treatment?",
         "{vignette} has confirmed {cond}. What is the recommended initial therapy?",
         "Which medication should be started first in {vignette_lc} with {cond}?"],
        "{vignette} has just received a diagnosis of {cond}. What should be prescribed first?",
    ),
    "test": (
        ["{vignette} is suspected to have {cond}. Which test confirms the diagnosis?",
         "Which investigation establishes the diagnosis of {cond} in {vignette_lc}?",
         "To confirm suspected {cond} in {vignette_lc}, which test should be ordered?"],
        "A clinician suspects {cond} in {vignette_lc}. Which test will confirm it?",
    ),
}


def vignette(rng):
    age = rng.randint(18, 80)
    sex = rng.choice(["woman", "man"])
    finding = rng.choice(FINDINGS)
    return f"A {age}-year-old {sex} with {finding}"


def item(rng, question, answer, pool, letter, kind):
    distractors = rng.sample([p for p in pool if p != answer], 3)
    rng.shuffle(distractors)
    options = distractors[:]
    options.insert("ABCD".index(letter), answer)
    return {"question": question, "options": dict(zip("ABCD", options)), "answer_idx": letter,
            "answer": answer, "meta_info": kind}


def main():
    rng = random.Random(SEED)
    conds = unique_names(rng, N_CONDITIONS, lambda r: word(r, 2).capitalize() + " " + r.choice(CONDITION_KINDS))
    drugs = unique_names(rng, N_CONDITIONS, lambda r: (word(r, 2) + r.choice(DRUG_ENDINGS)).capitalize())
    tests = unique_names(rng, N_CONDITIONS, lambda r: word(r, 2).capitalize() + " " + r.choice(TEST_KINDS))
    answers = {"treatment": drugs, "test": tests}

    train, test = [], []
    for kind, (train_tpls, test_tpl) in TEMPLATES.items():
        for i, cond in enumerate(conds):
            for t, tpl in enumerate(train_tpls + [test_tpl]):
                v = vignette(rng)
                q = tpl.format(vignette=v, vignette_lc="a" + v[1:], cond=cond)
                # Letters cycle per template so each file's answers are balanced over A-D.
                letter = "ABCD"[(i + t) % 4]
                (test if t == len(train_tpls) else train).append(
                    item(rng, q, answers[kind][i], answers[kind], letter, kind))
    rng.shuffle(train)
    rng.shuffle(test)
    os.makedirs(OUT, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(os.path.join(OUT, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"{len(train)} train, {len(test)} test items in {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
