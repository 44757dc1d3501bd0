// Attention on the CPU for one prompt: ops::attention_forward (OpenBLAS in query tiles, what fp32
// eval and training run) against ops::attention_forward_fixed_order (the per-query kernel that the
// int8 route and the server's batch-invariant backend run, ops.h), and the same over a
// half-precision cache (the int8 route's KV cache), alternating in every repeat so that load from
// other processes hits all alike; medians. Also checks the fixed order agrees with BLAS (NMSE).
//
// With --decode 1, a decode step instead: one query at position L - 1 against a half cache of L
// positions (the int8 route's generate and serve), microseconds per call, each repeat the median
// of 200 calls.
//
// With --training 1, training's attention instead: forward and backward over --batch rows of each
// length, at fp32 (ops::attention_forward / attention_backward) and at bf16
// (ops/attention_bf16.h: oneDNN where the CPU has native bf16, and the widened SGEMM), alternating
// in every repeat; ms per call and each one's speed over fp32. A training step's row shards run it
// on one thread each (--threads 1 shows one shard's time).
//
// Usage: bench_attention [--tokens 256,1024] [--heads 9] [--kv-heads 3] [--head-dim 64]
//                        [--repeats 7] [--threads 2] [--decode 0|1] [--training 0|1] [--batch 2]
// Defaults: SmolLM2-135M's attention (9 query heads, 3 key/value heads, head_dim 64).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "ops/attention_bf16.h"
#include "ops/backward.h"
#include "ops/ops.h"

namespace {

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// One decode step's attention at each cached length L: q (1, NH, HD) at position L - 1, k and v
// (L, NKV, HD) in half precision; microseconds per call.
int decode_steps(const std::vector<int64_t>& lengths, int64_t NH, int64_t NKV, int64_t HD,
                 int64_t repeats, int64_t threads) {
  using namespace medtune;
  constexpr int kCalls = 200;
  std::printf(
      "decode step, heads %lld/%lld, head_dim %lld, %lld threads, half cache; median of %lld "
      "repeats of the median of %d calls\n%8s %14s\n",
      static_cast<long long>(NH), static_cast<long long>(NKV), static_cast<long long>(HD),
      static_cast<long long>(threads), static_cast<long long>(repeats), kCalls, "cached",
      "us per call");
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> U(-2.0f, 2.0f);
  for (const int64_t L : lengths) {
    std::vector<float> q(static_cast<size_t>(NH * HD)), kv(static_cast<size_t>(L * NKV * HD));
    for (float& e : q) e = U(rng);
    for (float& e : kv) e = U(rng);
    std::vector<uint16_t> k16(kv.size()), v16(kv.size());
    ops::store_rows_f16(k16.data(), 0, kv.data(), 0, 1, static_cast<int64_t>(kv.size()));
    for (float& e : kv) e = U(rng);
    ops::store_rows_f16(v16.data(), 0, kv.data(), 0, 1, static_cast<int64_t>(kv.size()));
    std::vector<float> out(q.size());
    const ops::AttentionShape s{1, 1, L - 1, L, NH, NKV, HD};
    std::vector<double> per_repeat;
    for (int64_t r = 0; r < repeats; ++r) {
      std::vector<double> calls;
      for (int c = 0; c < kCalls; ++c) {
        const auto t0 = std::chrono::steady_clock::now();
        ops::attention_forward_fixed_order(out.data(), q.data(), k16.data(), v16.data(), nullptr,
                                           s);
        calls.push_back(bench::seconds_since(t0));
      }
      per_repeat.push_back(bench::median(calls));
    }
    std::printf("%8lld %14.2f\n", static_cast<long long>(L), bench::median(per_repeat) * 1e6);
  }
  return 0;
}

// Training's attention at each length T: forward and backward over B rows, fp32 and bf16 (both
// kernels where this CPU has native bf16), ms per call.
int training_calls(const std::vector<int64_t>& lengths, int64_t B, int64_t NH, int64_t NKV,
                   int64_t HD, int64_t repeats, int64_t threads) {
  using namespace medtune;
  const bool native = ops::bf16_kernel() == ops::Bf16Kernel::kOneDnn;
  std::printf(
      "training attention, %lld rows, heads %lld/%lld, head_dim %lld, %lld threads, median of %lld "
      "(ms per "
      "call; x = fp32's time over this one's)%s\n%8s %5s %10s %10s %8s %10s %8s\n",
      static_cast<long long>(B), static_cast<long long>(NH), static_cast<long long>(NKV),
      static_cast<long long>(HD), static_cast<long long>(threads), static_cast<long long>(repeats),
      native ? "" : "; no native bf16 here: the oneDNN column is not run", "tokens", "pass", "fp32",
      "bf16-onednn", "x", "bf16-widened", "x");
  std::mt19937 rng(3);
  std::normal_distribution<float> N01(0.0f, 1.0f);
  for (const int64_t T : lengths) {
    // q, dout, out, dq (B, T, NH, HD); k, v, dk, dv (B, T, NKV, HD)
    std::vector<float> q(static_cast<size_t>(B * T * NH * HD)), dout(q.size()), out(q.size()),
        dq(q.size());
    std::vector<float> k(static_cast<size_t>(B * T * NKV * HD)), v(k.size()), dk(k.size()),
        dv(k.size());
    for (auto* x : {&q, &dout, &k, &v})
      for (float& e : *x) e = N01(rng);
    const ops::AttentionShape s{B, T, 0, T, NH, NKV, HD};
    // [pass][kind]: pass 0 forward, 1 backward; kind 0 fp32, 1 bf16 oneDNN, 2 bf16 widened.
    std::vector<double> t[2][3];
    for (int64_t r = 0; r < repeats; ++r)
      for (int kind = 0; kind < 3; ++kind) {
        if (kind == 1 && !native) continue;
        const auto kernel = kind == 1 ? ops::Bf16Kernel::kOneDnn : ops::Bf16Kernel::kWidenedSgemm;
        auto t0 = std::chrono::steady_clock::now();
        if (kind == 0)
          ops::attention_forward(out.data(), q.data(), k.data(), v.data(), nullptr, s);
        else
          ops::attention_forward_bf16(out.data(), q.data(), k.data(), v.data(), nullptr, nullptr, s,
                                      kernel);
        t[0][kind].push_back(bench::seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        if (kind == 0)
          ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                  v.data(), nullptr, s);
        else
          ops::attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                       k.data(), v.data(), nullptr, nullptr, s, kernel);
        t[1][kind].push_back(bench::seconds_since(t0));
      }
    for (int pass = 0; pass < 2; ++pass) {
      const double f = bench::median(t[pass][0]) * 1e3, w = bench::median(t[pass][2]) * 1e3;
      const double o = native ? bench::median(t[pass][1]) * 1e3 : 0.0;
      std::printf("%8lld %5s %10.3f %10.3f %7.2fx %10.3f %7.2fx\n", static_cast<long long>(T),
                  pass == 0 ? "fwd" : "bwd", f, o, native ? f / o : 0.0, w, f / w);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace medtune;
  std::vector<int64_t> tokens = {256, 1024};
  int64_t NH = 9, NKV = 3, HD = 64, repeats = 7, threads = 2, decode = 0, training = 0, batch = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") tokens = parse_list(argv[i + 1]);
    else if (a == "--heads") NH = std::atoll(argv[i + 1]);
    else if (a == "--kv-heads") NKV = std::atoll(argv[i + 1]);
    else if (a == "--head-dim") HD = std::atoll(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoll(argv[i + 1]);
    else if (a == "--threads") threads = std::atoll(argv[i + 1]);
    else if (a == "--decode")
      decode = std::atoll(argv[i + 1]);
    else if (a == "--training")
      training = std::atoll(argv[i + 1]);
    else if (a == "--batch")
      batch = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_attention: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  omp_set_num_threads(static_cast<int>(threads));
  if (decode != 0) return decode_steps(tokens, NH, NKV, HD, repeats, threads);
  if (training != 0) return training_calls(tokens, batch, NH, NKV, HD, repeats, threads);
  std::printf("heads %lld/%lld, head_dim %lld, %lld threads, median of %lld (ms per layer's attention)\n",
              static_cast<long long>(NH), static_cast<long long>(NKV), static_cast<long long>(HD),
              static_cast<long long>(threads), static_cast<long long>(repeats));
  std::printf("%8s %12s %12s %8s %12s %8s %10s\n", "tokens", "blas", "fixed-order", "ratio", "fixed-f16",
              "ratio", "nmse");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> U(-2.0f, 2.0f);
  for (const int64_t T : tokens) {
    // q, out (T, NH, HD); k, v (T, NKV, HD): one row, no history.
    std::vector<float> q(static_cast<size_t>(T * NH * HD)), k(static_cast<size_t>(T * NKV * HD)), v(k.size());
    for (auto* x : {&q, &k, &v})
      for (float& e : *x) e = U(rng);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    ops::store_rows_f16(k16.data(), 0, k.data(), 0, 1, static_cast<int64_t>(k.size()));
    ops::store_rows_f16(v16.data(), 0, v.data(), 0, 1, static_cast<int64_t>(v.size()));
    std::vector<float> blas(q.size()), fixed(q.size()), half(q.size());
    const ops::AttentionShape s{1, T, 0, T, NH, NKV, HD};
    std::vector<double> t_blas, t_fixed, t_half;
    for (int64_t r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      ops::attention_forward(blas.data(), q.data(), k.data(), v.data(), nullptr, s);
      t_blas.push_back(bench::seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      ops::attention_forward_fixed_order(fixed.data(), q.data(), k.data(), v.data(), nullptr, s);
      t_fixed.push_back(bench::seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      ops::attention_forward_fixed_order(half.data(), q.data(), k16.data(), v16.data(), nullptr, s);
      t_half.push_back(bench::seconds_since(t0));
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      const double d = static_cast<double>(fixed[i]) - static_cast<double>(blas[i]);
      num += d * d;
      den += static_cast<double>(blas[i]) * static_cast<double>(blas[i]);
    }
    const double mb = bench::median(t_blas) * 1e3, mf = bench::median(t_fixed) * 1e3,
                 mh = bench::median(t_half) * 1e3;
    std::printf("%8lld %12.3f %12.3f %7.2fx %12.3f %7.2fx %10.2e\n", static_cast<long long>(T), mb, mf,
                mf / mb, mh, mh / mb, num / den);
  }
  return 0;
}
