// libFuzzer target: read_axolotl_dataset on arbitrary bytes (a JSONL dataset of one of axolotl's
// types, train/dataset_formats.h), read as each type (alpaca, completion, input_output,
// chat_template) with sequence_len 16 and 512 and skip_invalid false and true, must either return
// examples or throw BadInput. Anything else (a crash, a sanitizer report, nlohmann's exceptions,
// std::out_of_range, Internal, an allocation past -malloc_limit_mb) is a bug. A returned load must
// also hold what data.h and dataset_formats.h promise: at least one example; nothing skipped
// without skip_invalid, and first_skipped set exactly when something was; every example's
// answer_mask empty or one 0/1 entry per answer token, with a trained token that is predicted
// (not the sequence's first); every example within sequence_len + 1 tokens (truncate_left); and
// whatever the strict read accepts, the skipping read accepts the same.
// The tokenizer is a byte codec that needs no model: each byte is its id, "</s>" is EOS (257),
// BOS (256) leads when special tokens are asked for; the chat template renders each message as
// "<|role|>content</s>\n" and the generation prompt as "<|assistant|>", so a conversation's
// rendering starts with its prefixes' renderings, as every real template's does. Which
// train_on_inputs, train_on_eos and roles_to_train a run uses is a hash of the input.
// Seed corpus: fuzz/corpus/axolotl_dataset/. How to build and run: fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "memfd_file.h"
#include "train/data.h"
#include "train/dataset_formats.h"
#include "train/train_config.h"

namespace {

constexpr const char* kName = "fuzz_axolotl_dataset";
constexpr int32_t kBos = 256, kEos = 257;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "%s: %s\n", kName, what);
  std::abort();
}

medtune::train::TextCodec byte_codec() {
  medtune::train::TextCodec codec;
  codec.encode = [](const std::string& text, bool add_special) {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(kBos);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 4, "</s>") == 0) {
        ids.push_back(kEos);
        i += 3;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  };
  codec.bos_id = kBos;
  codec.eos_id = kEos;
  codec.apply = [](const std::vector<medtune::tokenizer::ChatMessage>& messages, bool add_generation_prompt) {
    std::string s;
    for (const auto& m : messages) s += "<|" + m.role + "|>" + m.content + "</s>\n";
    if (add_generation_prompt) s += "<|assistant|>";
    return s;
  };
  return codec;
}

std::optional<medtune::train::DatasetLoad> read(const medtune::train::DatasetSpec& spec,
                                                const medtune::train::FormatOptions& opt,
                                                const medtune::train::TextCodec& codec, bool skip_invalid) {
  medtune::train::DatasetLoad load;
  try {
    load = medtune::train::read_axolotl_dataset(spec, opt, codec, skip_invalid);
  } catch (const medtune::BadInput&) {
    return std::nullopt;  // expected for malformed input
  } catch (const std::exception& e) {
    medtune::fuzz::unexpected_exception(kName, e.what());
  }
  if (load.examples.empty()) broken("a returned load has no examples");
  if (!skip_invalid && load.skipped != 0) broken("records skipped without skip_invalid");
  if ((load.skipped > 0) != !load.first_skipped.empty()) broken("first_skipped does not match skipped");
  if (load.truncated < 0 || load.truncated > static_cast<int64_t>(load.examples.size()))
    broken("truncated is not a count of examples");
  for (const medtune::train::Example& ex : load.examples) {
    if (!ex.answer_mask.empty() && ex.answer_mask.size() != ex.answer.size())
      broken("answer_mask has neither zero nor answer.size() entries");
    bool predicted = false;
    for (size_t i = 0; i < ex.answer.size(); ++i) {
      if (!ex.answer_mask.empty() && ex.answer_mask[i] > 1) broken("answer_mask holds a value other than 0/1");
      if (ex.answer_trained(i) && ex.context.size() + i >= 1) predicted = true;
    }
    if (!predicted || ex.trained_tokens() < 1) broken("an example has no trained token that is predicted");
    if (ex.length() > opt.sequence_len + 1) broken("an example is longer than sequence_len + 1 tokens");
  }
  return load;
}

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static medtune::fuzz::MemfdFile input;
  static const medtune::train::TextCodec codec = byte_codec();
  const std::string& path = input.write(data, size);
  const uint64_t h = fnv1a(data, size);
  static const char* const kEosModes[] = {"turn", "all", "last", "none"};
  static const std::vector<std::string> kRoles[] = {{"assistant"}, {"user", "gpt"}, {}, {"human", "system", "tool"}};
  for (const auto type : {medtune::train::DatasetType::kAlpaca, medtune::train::DatasetType::kCompletion,
                          medtune::train::DatasetType::kInputOutput, medtune::train::DatasetType::kChatTemplate}) {
    medtune::train::DatasetSpec spec{path, type};
    spec.train_on_eos = kEosModes[h & 3];
    spec.roles_to_train = kRoles[(h >> 2) & 3];
    for (const int64_t sequence_len : {int64_t{16}, int64_t{512}}) {
      const medtune::train::FormatOptions opt{((h >> 4) & 1) != 0, sequence_len};
      const auto strict = read(spec, opt, codec, false);
      const auto lenient = read(spec, opt, codec, true);
      // Whatever the strict read accepts, the lenient one accepts identically (nothing to skip).
      if (strict) {
        if (!lenient) broken("skip_invalid rejects a file the strict read accepts");
        if (lenient->examples.size() != strict->examples.size() || lenient->skipped != 0)
          broken("skip_invalid reads a valid file differently");
      }
    }
  }
  return 0;
}
