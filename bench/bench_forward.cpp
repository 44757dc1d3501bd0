// Forward-pass speed on a real model: prompt processing (one forward over a P-token prompt,
// logits of the last position only, as llama.cpp computes them) and batch-1 decode with the
// KV cache. Prints one JSON object with medians over repeats.
//
//   bench_forward MODEL [--prompt-tokens 512] [--decode-tokens 64] [--repeats 5] [--threads N]
//                 [--device cpu|gpu|gpu:N] [--precision fp32|bf16|auto] [--batch-invariant 1]
// --batch-invariant 1: the server's kernels at --parallel > 1 (backend::batch_invariant).
// --kv-cache f32|f16: the KV cache's element type (default: the backend's, kv_type(): f16 at int8);
// f16 needs a backend with the fixed-order attention (int8, --batch-invariant 1).
// --score-batch B > 0: also scoring throughput, B rows of P tokens in one forward with the logits of
// each row's last position (letter scoring's work: medtune runs the lm_head on the scored rows
// only; transformers' forward, the HF anchor's --score, computes every position's).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench_main.h"
#include "bench_timing.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/sampler.h"

using medtune::bench::median;
using medtune::bench::seconds_since;

namespace {

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: bench_forward MODEL [--prompt-tokens P] [--decode-tokens D] [--repeats R] [--threads N] "
                 "[--device D] [--precision P] [--batch-invariant 1] [--score-batch B] "
                 "[--kv-cache f32|f16]\n";
    return 2;
  }
  std::string path = argv[1];
  int64_t P = 512, D = 64, R = 5, score_batch = 0;
  int threads = 0;
  std::string device = "cpu", precision = "auto", kv = "";
  bool invariant = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device" || k == "--precision" || k == "--kv-cache") {
      (k == "--device" ? device : k == "--precision" ? precision : kv) = argv[i + 1];
      continue;
    }
    const long v = std::atol(argv[i + 1]);
    if (k == "--prompt-tokens") P = v;
    else if (k == "--decode-tokens") D = v;
    else if (k == "--repeats") R = v;
    else if (k == "--threads") threads = static_cast<int>(v);
    else if (k == "--batch-invariant") invariant = v != 0;
    else if (k == "--score-batch") score_batch = v;
  }
  if (threads > 0) omp_set_num_threads(threads);

  const medtune::backend::Device dev = medtune::backend::parse_device(device, "--device");
  medtune::backend::Backend& device_be =
      medtune::backend::for_device(dev, medtune::backend::parse_precision(precision, dev, "--precision"));
  medtune::backend::Backend& be = invariant ? medtune::backend::batch_invariant(device_be) : device_be;
  medtune::model::LlamaModel model(medtune::io::open_checkpoint(path), medtune::model::WeightQuant::kNone, be);
  const auto& c = model.config();
  if (!kv.empty() && kv != "f32" && kv != "f16") {
    std::cerr << "bench_forward: --kv-cache must be f32 or f16\n";
    return 2;
  }
  const medtune::DType kv_type = kv.empty()      ? be.kv_type()
                                 : kv == "f16" ? medtune::DType::F16
                                               : medtune::DType::F32;
  // A deterministic pseudo-random prompt: the cost of a forward does not depend on the ids.
  std::vector<int32_t> prompt(static_cast<size_t>(P));
  uint64_t s = 12345;
  for (auto& id : prompt) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(c.vocab_size));
  }

  std::vector<double> pp, tg;
  std::vector<float> logits;
  for (int64_t r = 0; r < R + 1; ++r) {  // the first round warms caches and page-ins: not counted
    medtune::model::KvCache cache = model.make_cache(1, P + D, kv_type);
    auto t0 = std::chrono::steady_clock::now();
    model.forward(medtune::model::Batch{1, P, prompt, {}}, cache, logits, {P - 1});
    const double t_pp = seconds_since(t0);
    int32_t next = medtune::model::argmax(logits.data(), c.vocab_size);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < D; ++i) {
      model.forward(medtune::model::Batch{1, 1, {next}, {}}, cache, logits, {0});
      next = medtune::model::argmax(logits.data(), c.vocab_size);
    }
    const double t_tg = seconds_since(t0);
    if (r == 0) continue;
    pp.push_back(static_cast<double>(P) / t_pp);
    tg.push_back(static_cast<double>(D) / t_tg);
  }
  std::vector<double> sc;  // scoring: B x P tokens per second
  if (score_batch > 0) {
    const int64_t B = score_batch;
    std::vector<int32_t> ids;  // (B, P): the prompt, each row rotated so the rows differ
    std::vector<int64_t> last_rows;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < P; ++t) ids.push_back(prompt[static_cast<size_t>((t + b * 7) % P)]);
      last_rows.push_back(b * P + P - 1);
    }
    for (int64_t r = 0; r < R + 1; ++r) {
      medtune::model::KvCache cache = model.make_cache(B, P, kv_type);
      const auto t0 = std::chrono::steady_clock::now();
      model.forward(medtune::model::Batch{B, P, ids, {}}, cache, logits, last_rows);
      const double t = seconds_since(t0);
      if (r > 0) sc.push_back(static_cast<double>(B * P) / t);
    }
  }
  nlohmann::json j;
  j["engine"] = "medtune";
  j["model"] = path;
  j["device"] = be.describe();
  j["threads"] = omp_get_max_threads();
  j["kv_cache"] = kv_type == medtune::DType::F16 ? "f16" : "f32";
  j["prompt_tokens"] = P;
  j["decode_tokens"] = D;
  j["repeats"] = R;
  j["prompt_tokens_per_s_median"] = median(pp);
  j["decode_tokens_per_s_median"] = median(tg);
  j["prompt_tokens_per_s"] = pp;
  j["decode_tokens_per_s"] = tg;
  if (score_batch > 0) {
    j["score_batch"] = score_batch;
    j["score_tokens_per_s_median"] = median(sc);
    j["score_tokens_per_s"] = sc;
    j["device_peak_mib"] = static_cast<double>(be.peak_bytes()) / (1024.0 * 1024.0);
  }
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return medtune::bench::main_reporting_errors("bench_forward", argc, argv, run);
}
