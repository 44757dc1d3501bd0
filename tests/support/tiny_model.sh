# Sourced by the e2e scripts (tests/e2e/*.sh), from the repository root:
#   make_tiny_model TINY_BIN OUT_DIR SEED
# A tiny random Llama (hidden 32, 2 layers; tests/support/make_tiny_llama.cpp) as a Hugging Face
# directory with the committed SmolLM2 tokenizer (49,152 ids), so that end-to-end tests train,
# tokenize and export a real-tokenizer model in seconds.
make_tiny_model() {
  local tiny=$1 out=$2 seed=$3
  "$tiny" "$out" 49152 "$seed" >/dev/null
  cp tests/fixtures/tokenizer/smollm2/tokenizer.json tests/fixtures/tokenizer/smollm2/tokenizer_config.json "$out/"
}

#   add_smollm2_chat_template MODEL_DIR
# Gives MODEL_DIR's tokenizer_config.json SmolLM2-Instruct's chat template (the committed one has
# none), for tests that render conversations.
add_smollm2_chat_template() {
  python3 - "$1/tokenizer_config.json" tests/fixtures/chat_templates/smollm2-instruct.jinja <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = open(sys.argv[2]).read()
json.dump(cfg, open(sys.argv[1], "w"))
PY
}
