#!/usr/bin/env bash
# medtune eval against transformers on real MedQA questions (lm_eval prompts, SmolLM2-135M GGUF).
#
#   bash tests/e2e/eval_parity.sh MEDTUNE_BIN [PARITY_BIN]      (from the repo root, as CTest runs it)
#
# Scores the first N MedQA dev questions (MEDTUNE_EVAL_PARITY_N, default 30, at most the number in
# the reference) with --scoring letter and --scoring text and compares predictions.jsonl with
# tests/fixtures/eval_parity/smollm2_lm_eval_reference.json (tools/eval_reference.py: transformers,
# float64): same ids, |delta log-prob| <= 1e-3 for every option, and the same pred / pred_norm
# except where the reference's top two are within 1e-6 (an exact tie either side may break).
# Needs MEDTUNE_SMOLLM2_GGUF and MEDTUNE_MEDQA_DEV; exits 77 (skip) without them, or without
# python3 (used, standard library only, to read the JSON). PARITY_BIN is not used.
set -euo pipefail

BIN=${1:?usage: eval_parity.sh MEDTUNE_BIN [PARITY_BIN]}
REF=${MEDTUNE_EVAL_PARITY_REF:-tests/fixtures/eval_parity/smollm2_lm_eval_reference.json}
N=${MEDTUNE_EVAL_PARITY_N:-30}
TOL=${MEDTUNE_EVAL_PARITY_TOL:-1e-3}

if [[ -z "${MEDTUNE_SMOLLM2_GGUF:-}" || ! -f "${MEDTUNE_SMOLLM2_GGUF}" ]]; then
  echo "skip: MEDTUNE_SMOLLM2_GGUF is unset or missing"; exit 77
fi
if [[ -z "${MEDTUNE_MEDQA_DEV:-}" || ! -f "${MEDTUNE_MEDQA_DEV}" ]]; then
  echo "skip: MEDTUNE_MEDQA_DEV is unset or missing"; exit 77
fi
if ! command -v python3 >/dev/null; then
  echo "skip: python3 (standard library only) is needed to read the JSON"; exit 77
fi
[[ -f "$REF" ]] || { echo "FAIL: $REF is missing"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The reference was made on a particular dev.jsonl: a different file would fail for the wrong reason.
python3 - "$REF" "$MEDTUNE_MEDQA_DEV" <<'EOF' || exit $?
import hashlib, json, sys
ref = json.load(open(sys.argv[1]))
h = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
if h != ref["data_sha256"]:
    print(f"skip: {sys.argv[2]} (sha256 {h[:12]}) is not the file the reference was made from "
          f"({ref['data_sha256'][:12]})")
    sys.exit(77)
EOF

N=$(python3 -c 'import json,sys; print(min(int(sys.argv[2]), json.load(open(sys.argv[1]))["n"]))' "$REF" "$N")
echo "eval_parity: $N questions"
start=$SECONDS
"$BIN" eval "$MEDTUNE_SMOLLM2_GGUF" --data "$MEDTUNE_MEDQA_DEV" --limit "$N" --out "$tmp/letter" -q >/dev/null
"$BIN" eval "$MEDTUNE_SMOLLM2_GGUF" --data "$MEDTUNE_MEDQA_DEV" --limit "$N" --scoring text --out "$tmp/text" -q >/dev/null
echo "eval_parity: medtune scored in $((SECONDS - start)) s"

python3 - "$REF" "$tmp/letter/predictions.jsonl" "$tmp/text/predictions.jsonl" "$N" "$TOL" <<'EOF'
import json, math, sys
ref_path, letter_path, text_path, n, tol = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
ref = json.load(open(ref_path))
qs = ref["questions"][:n]
eps = ref.get("tie_eps", 1e-6)

def load(path):
    return [json.loads(l) for l in open(path) if l.strip()]

def lp(x):
    return -math.inf if x is None else float(x)

failures = []

def check(kind, rows, ref_key, preds):
    ids = [r["id"] for r in rows]
    want = [q["id"] for q in qs]
    if ids != want:
        failures.append(f"{kind}: ids differ: medtune {ids[:3]}... vs reference {want[:3]}...")
        return
    worst, worst_id = 0.0, None
    counts = {}
    for q, r in zip(qs, rows):
        a, b = q[ref_key], r["option_logprobs"]
        if len(a) != len(b):
            failures.append(f"{kind}: {q['id']}: {len(b)} options, reference {len(a)}")
            continue
        for x, y in zip(a, b):
            d = abs(x - lp(y))
            if not d <= worst:
                worst, worst_id = d, q["id"]
        for mk, rk, gk in preds:
            c = counts.setdefault(mk, [0, 0])
            if r.get(mk) == q[rk]:
                c[0] += 1
            elif q[gk] <= eps:
                c[1] += 1
            else:
                failures.append(f"{kind}: {q['id']}: {mk} {r.get(mk)} but reference {q[rk]} "
                                f"(reference top-two gap {q[gk]:.3g})")
    if not worst <= tol:
        failures.append(f"{kind}: max |delta log-prob| {worst:.3e} at {worst_id} > {tol:g}")
    agree = ", ".join(f"{k} agree {c[0]}/{len(qs)} (+{c[1]} exact ties)" for k, c in counts.items())
    print(f"eval_parity {kind}: max |delta| {worst:.3e} (at {worst_id}); {agree}")

check("letter", load(letter_path), "letter_logprobs", [("pred", "pred", "letter_top2_gap")])
check("text", load(text_path), "text_logliks",
      [("pred", "pred_text", "text_top2_gap"), ("pred_norm", "pred_norm", "norm_top2_gap")])
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
EOF
echo "eval_parity: ok"
