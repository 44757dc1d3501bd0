#!/usr/bin/env bash
# medtune eval --task / --suite open-medical-llm / --compare of two suite runs, as a user drives
# them, on a tiny random Llama with SmolLM2's tokenizer and the task fixtures
# (tests/fixtures/eval/tasks: one file per task under its suite name, plus other layouts).
# Usage (CTest): eval_suite.sh MEDTUNE_BIN PARITY_BIN. Needs the medtune-tiny-llama target and
# python3 (standard library only) to read the JSON.
set -u
MT=$1
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FIX=tests/fixtures/eval/tasks

# shellcheck source=tests/support/expect.sh
. tests/support/expect.sh
TINY=$(dirname "$MT")/medtune-tiny-llama
[[ -x "$TINY" ]] || { echo "FAIL: $TINY missing (build the medtune-tiny-llama target)"; exit 1; }
command -v python3 >/dev/null || { echo "skip: python3 is needed to read the JSON"; exit 77; }
# shellcheck source=tests/support/tiny_model.sh
. tests/support/tiny_model.sh
make_tiny_model "$TINY" "$tmp/m1" 1
make_tiny_model "$TINY" "$tmp/m2" 2

# One task: the sub-run files, with the task and its scoring in the provenance.
expect 0 "accuracy" -- "$MT" eval "$tmp/m1" --task pubmedqa --data "$FIX/pubmedqa.json" --out "$tmp/pub" -q
expect 0 '"scoring": "text"' -- python3 -m json.tool "$tmp/pub/report.json"
expect 0 '"task": "pubmedqa"' -- python3 -m json.tool "$tmp/pub/report.json"

# Whole suite, twice (two models), then compared.
expect 0 "Macro average" -- "$MT" eval "$tmp/m1" --suite open-medical-llm --data-dir "$FIX" --out "$tmp/s1" -q
expect 0 "Macro average" -- "$MT" eval "$tmp/m2" --suite open-medical-llm --data-dir "$FIX" --out "$tmp/s2" -q --limit 2
python3 - "$tmp/s1" "$tmp/s2" <<'EOF' || fail=1
import json, os, sys
for d, limit in ((sys.argv[1], None), (sys.argv[2], 2)):
    s = json.load(open(os.path.join(d, "suite.json")))
    tasks = [t["task"] for t in s["tasks"]]
    assert len(tasks) == 9, tasks
    for t in s["tasks"]:
        preds = [json.loads(l) for l in open(os.path.join(d, t["task"], "predictions.jsonl"))]
        assert t["n"] == len(preds), (t, len(preds))
        assert limit is None or t["n"] <= limit, t
        correct = sum(p["correct"] for p in preds)
        assert t["accuracy"]["correct"] == correct, t
        golds = [p["gold"] for p in preds]
        top = max(golds.count(g) for g in set(golds))
        assert t["majority_baseline"]["correct"] == top, t
    macro = sum(t["accuracy"]["value"] for t in s["tasks"]) / 9
    assert abs(s["macro_accuracy"] - macro) < 1e-12, (s["macro_accuracy"], macro)
print("ok: suite.json per-task counts, majority baselines and macro average recomputed from predictions")
EOF
# --limit 2 scored fewer questions: the runs are not on the same questions, so compare refuses.
expect 2 "runs cover different questions.*medqa_4options" -- "$MT" eval --compare "$tmp/s1" "$tmp/s2"
expect 0 "Macro average" -- "$MT" eval "$tmp/m2" --suite open-medical-llm --data-dir "$FIX" --out "$tmp/s3" -q
expect 0 "p_holm.*medqa_4options.*mmlu_professional_medicine.*Holm-Bonferroni" -- "$MT" eval --compare "$tmp/s1" "$tmp/s3"
expect 0 '"p_holm"' -- "$MT" eval --compare "$tmp/s1" "$tmp/s3" --json
expect 2 "is a suite run" -- "$MT" eval --compare "$tmp/s1" "$tmp/pub"

# Bad input: exit 2 with the file, line/record and field, or the option at fault.
mkdir -p "$tmp/partial"
cp "$FIX/medmcqa.jsonl" "$tmp/partial/"
expect 2 "no data for 8 of the 9 tasks.*medqa_4options.\{jsonl,json,csv\}" -- \
  "$MT" eval "$tmp/m1" --suite open-medical-llm --data-dir "$tmp/partial"
expect 2 "unknown task 'mmlu_virology'" -- "$MT" eval "$tmp/m1" --task mmlu_virology --data "$FIX/mmlu_anatomy.csv"
expect 2 "drop --format, --scoring and --fewshot" -- \
  "$MT" eval "$tmp/m1" --task medmcqa --data "$FIX/medmcqa.jsonl" --scoring text
expect 2 "unknown suite" -- "$MT" eval "$tmp/m1" --suite leaderboard --data-dir "$FIX"
printf '%s\n' '{"question": "Q?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 2}' > "$tmp/m.jsonl"
expect 2 "m.jsonl: cannot tell whether field 'cop' counts from 0" -- \
  "$MT" eval "$tmp/m1" --task medmcqa --data "$tmp/m.jsonl"
expect 0 "accuracy" -- "$MT" eval "$tmp/m1" --task medmcqa --data "$tmp/m.jsonl" --medmcqa-cop-base 1 --out "$tmp/m" -q
printf '%s\n' 'Q?,a,b,c,d,A' 'Q2?,a,b,c,d,F' > "$tmp/mmlu_anatomy.csv"
expect 2 "mmlu_anatomy.csv:2: field 'answer' is 'F', not one of A-D" -- \
  "$MT" eval "$tmp/m1" --task mmlu_anatomy --data "$tmp/mmlu_anatomy.csv"
exit $fail
