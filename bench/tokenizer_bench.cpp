// tokenizer_bench: single-thread encode throughput of medtune's tokenizer on MedQA dev prompts
// (lm-eval medqa_4options format). bench/tokenizer_vs_hf.py runs it beside HF tokenizers.
//
//   tokenizer_bench <tokenizer.json | model.gguf> <medqa dev.jsonl> [repeats=5]
//
// Prints one JSON line: bytes, prompts, tokens, cold pass seconds (empty word cache) and the
// median of `repeats` warm passes, with MB/s and tokens/s of the median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> render_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const auto& o = j.at("options");
    out.push_back("Question: " + j.at("question").get<std::string>() + "\nA. " + o.at("A").get<std::string>() +
                  "\nB. " + o.at("B").get<std::string>() + "\nC. " + o.at("C").get<std::string>() +
                  "\nD. " + o.at("D").get<std::string>() + "\nAnswer:");
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <tokenizer.json | model.gguf> <dev.jsonl> [repeats]\n", argv[0]);
    return 2;
  }
  try {
    using medtune::tokenizer::Tokenizer;
    const std::string model = argv[1];
    const int repeats = argc > 3 ? std::max(1, std::stoi(argv[3])) : 5;
    const auto prompts = render_prompts(argv[2]);
    size_t bytes = 0;
    for (const auto& p : prompts) bytes += p.size();

    std::unique_ptr<Tokenizer> tok;
    if (ends_with(model, ".gguf")) {
      const auto gguf = medtune::io::GgufFile::open(model);
      tok = Tokenizer::from_gguf(gguf);
    } else {
      tok = Tokenizer::from_tokenizer_json(model);
    }
    auto pass = [&](size_t& tokens) {
      tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& p : prompts) tokens += tok->encode(p, false).size();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    size_t tokens = 0;
    const double cold = pass(tokens);
    std::vector<double> warm;
    for (int r = 0; r < repeats; ++r) warm.push_back(pass(tokens));
    std::sort(warm.begin(), warm.end());
    const double median = warm[warm.size() / 2];
    nlohmann::json out = {{"impl", "medtune"}, {"prompts", prompts.size()}, {"bytes", bytes},
                          {"tokens", tokens}, {"cold_s", cold}, {"median_s", median},
                          {"mb_per_s", static_cast<double>(bytes) / 1e6 / median},
                          {"tokens_per_s", static_cast<double>(tokens) / median}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 2;
  }
}
