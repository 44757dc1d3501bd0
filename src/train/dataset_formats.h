// axolotl's dataset types (alpaca, completion, input_output, chat_template): JSONL records into
// Examples with a per-token loss mask, following axolotl's prompt strategies token for token
// (tools/make_axolotl_mask_fixtures.py runs axolotl itself on fixtures; test_dataset_formats
// compares). Where each rule comes from is cited at the function that applies it; the axolotl
// source read is commit 067b021c of github.com/axolotl-ai-cloud/axolotl (v0.19-era).
//
// As in data.h, the tokenizer and the chat template are passed in as functions (TextCodec),
// which apps/medtune/cmd_train.cpp binds to the model's.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/data.h"
#include "train/train_config.h"

namespace medtune::train {

struct TextCodec {
  // encode(text, add_special): ids, with the tokenizer's post-processor tokens (BOS) when
  // add_special, as a Hugging Face tokenizer(text, add_special_tokens=...) call.
  std::function<std::vector<int32_t>(const std::string&, bool add_special)> encode;
  int32_t bos_id = -1, eos_id = -1;  // -1: the tokenizer has none
  ApplyTemplate apply;               // empty when the model has no chat template
};

// What the axolotl types read from the whole config besides the dataset entry.
struct FormatOptions {
  bool train_on_inputs = false;
  int64_t sequence_len = 512;
};

// One record (a parsed JSONL line, `source` = "<file>:<line>") of an axolotl-type dataset into
// its examples: one, except that completion cuts a long text into pieces of sequence_len tokens
// as axolotl does. BadInput naming source and the field when the record is malformed or has
// nothing to train on.
std::vector<Example> record_examples(const nlohmann::json& record, const std::string& source,
                                     const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec);

// A whole axolotl-type JSONL file: each line's examples, each cut to sequence_len (truncate_left).
// A bad line (invalid JSON, a missing or mistyped field, an unknown role, nothing to train on) is a
// BadInput naming file, line and field, or with skip_invalid is counted in `skipped` (the first
// message kept in first_skipped) and left out. BadInput when no example remains.
struct DatasetLoad {
  std::vector<Example> examples;
  int64_t skipped = 0;
  std::string first_skipped;  // the message of the first skipped record
  int64_t truncated = 0;      // examples cut to fit sequence_len
};
DatasetLoad read_axolotl_dataset(const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec,
                                 bool skip_invalid);

// Whether `type` is one of the axolotl types record_examples reads.
bool is_axolotl_type(DatasetType type);

// Each type's rendering, for the tests.
std::vector<Example> alpaca_examples(const nlohmann::json& record, const std::string& source,
                                     const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec);
std::vector<Example> completion_examples(const nlohmann::json& record, const std::string& source,
                                         const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec);
std::vector<Example> input_output_examples(const nlohmann::json& record, const std::string& source,
                                           const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec);
std::vector<Example> chat_template_examples(const nlohmann::json& record, const std::string& source,
                                            const DatasetSpec& spec, const FormatOptions& opt, const TextCodec& codec);

// An Example's tokens and axolotl's labels for them (-100 where untrained), as axolotl writes a
// tokenized row: what the fixtures hold.
struct LabelledTokens {
  std::vector<int32_t> input_ids;
  std::vector<int64_t> labels;
};
LabelledTokens labelled_tokens(const Example& ex);

}  // namespace medtune::train
