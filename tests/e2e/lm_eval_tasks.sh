#!/usr/bin/env bash
# medtune eval --task against lm-evaluation-harness's own `--model hf` on the same items.
#
#   bash tests/e2e/lm_eval_tasks.sh MEDTUNE_BIN [PARITY_BIN]      (from the repo root, as CTest runs it)
#
# Every fixture file of tests/fixtures/eval/tasks (the nine tasks, in their published layouts) is
# scored by lm-eval (tools/lm_eval_tasks.py run: lm-eval's own task YAMLs, the data swapped for the
# local file) and by `medtune eval --task`, on one model: a tiny random Llama (2 layers, hidden 64,
# seeded) with SmolLM2's real tokenizer (tests/fixtures/tokenizer/smollm2), written by transformers
# here. Checked per record: the same number of choices, |delta log-likelihood| <= TOL for every
# choice, and the same prediction (argmax) except where lm-eval's top two are within TOL.
# TOL (default 1e-4): both sides compute in float32 with different summation orders; over a
# 2-layer model and continuations of at most a few tokens the log-likelihoods agree to ~1e-6, and
# 1e-4 leaves room for that while still catching any wrong token, prompt or choice (those move a
# log-likelihood by far more than 1e-2).
# Needs torch, transformers and lm-eval in the Python named by MEDTUNE_LM_EVAL_PYTHON; exits 77
# (skip) with a message without it. PARITY_BIN is not used.
set -euo pipefail

BIN=${1:?usage: lm_eval_tasks.sh MEDTUNE_BIN [PARITY_BIN]}
TOL=${MEDTUNE_LM_EVAL_TOL:-1e-4}
PY=${MEDTUNE_LM_EVAL_PYTHON:-}
if [[ -z "$PY" ]]; then
  echo "skip: set MEDTUNE_LM_EVAL_PYTHON to a python with torch, transformers and lm-eval (pip install lm-eval)"
  exit 77
fi
if ! "$PY" -c "import lm_eval, torch, transformers" 2>/dev/null; then
  echo "skip: $PY cannot import lm_eval, torch and transformers (pip install lm-eval)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FIX=tests/fixtures/eval/tasks

"$PY" - "$tmp/model" <<'EOF'
import shutil, sys, torch, transformers
out = sys.argv[1]
tok_dir = "tests/fixtures/tokenizer/smollm2"
tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
torch.manual_seed(1234)
cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                               initializer_range=0.2, tie_word_embeddings=False,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
model = transformers.LlamaForCausalLM(cfg).to(torch.float32)
model.save_pretrained(out)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{tok_dir}/{f}", out)
EOF

"$PY" tools/lm_eval_tasks.py run "$tmp/model" "$tmp/lm_eval.json" > "$tmp/lm_eval.log" 2>&1 ||
  { tail -30 "$tmp/lm_eval.log"; echo "FAIL: lm-eval did not run"; exit 1; }

n=0
for f in "$FIX"/*.jsonl "$FIX"/*.json "$FIX"/*.csv; do
  name=$(basename "$f")
  [[ "$name" == lm_eval_prompts.json ]] && continue
  task=$("$PY" -c "import sys; sys.path.insert(0, 'tools'); import lm_eval_tasks as t; print(t.task_of(sys.argv[1]))" "$f")
  "$BIN" eval "$tmp/model" --task "$task" --data "$f" --out "$tmp/runs/$name" -q --no-check-tensors > /dev/null
  n=$((n + 1))
done

"$PY" - "$tmp/lm_eval.json" "$tmp/runs" "$TOL" <<'EOF'
import json, os, sys
ref, runs, tol = json.load(open(sys.argv[1])), sys.argv[2], float(sys.argv[3])
fail = 0
records = 0
worst = 0.0
for name, want in sorted(ref.items()):
    got = [json.loads(l) for l in open(os.path.join(runs, name, "predictions.jsonl"))]
    if len(got) != len(want["records"]):
        print(f"FAIL {name}: medtune scored {len(got)} records, lm-eval {len(want['records'])}"); fail = 1; continue
    for i, (g, w) in enumerate(zip(got, want["records"])):
        records += 1
        ll = w["loglikelihoods"]
        mine = [float("-inf") if x is None else x for x in g["option_logprobs"]]
        if len(mine) != len(ll):
            print(f"FAIL {name}[{i}]: {len(mine)} choices, lm-eval {len(ll)}"); fail = 1; continue
        d = max(abs(a - b) for a, b in zip(mine, ll))
        worst = max(worst, d)
        if d > tol:
            print(f"FAIL {name}[{i}]: log-likelihoods differ by {d:.3g} > {tol}: medtune {mine} lm-eval {ll}"); fail = 1
        pred = "ABCDEFGHIJ".index(g["pred"]) if g["pred"] is not None else -1
        top = sorted(ll, reverse=True)
        if pred != w["pred"] and top[0] - top[1] > tol:
            print(f"FAIL {name}[{i}]: medtune predicts {pred}, lm-eval {w['pred']}"); fail = 1
        gold = "ABCDEFGHIJ".index(g["gold"])
        if (gold == w["pred"]) != bool(w["acc"]):
            print(f"FAIL {name}[{i}]: gold {gold} disagrees with lm-eval's target"); fail = 1
print(f"{len(ref)} files, {records} records: largest |delta log-likelihood| {worst:.2e} (tolerance {tol})")
sys.exit(fail)
EOF
echo "ok: medtune eval --task agrees with lm-eval --model hf on $n fixture files"
