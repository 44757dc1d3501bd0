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
