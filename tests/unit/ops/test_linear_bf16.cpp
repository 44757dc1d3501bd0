// ops::linear_forward_bf16 and linear_backward_input_bf16 (`precision: bf16`), both kernels, against
// a double-precision product of the bf16-rounded operands.
//
// Tolerance, derived: both operands are rounded to bf16 first (8 significant bits), so each product
// of two of them has at most 16 significant bits and is exact in fp32; what is left is a sum of n
// fp32 terms (n = K, plus one for a bias or an accumulated dx) in some order. Any order of n
// fp32 additions is within gamma(n) = n u / (1 - n u) (u = 2^-24) of the exact sum, relative to the
// sum of the terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 4.2), so
// each element is checked against |got - exact| <= gamma(n) * sum |terms| (+ 1e-30 for the zero
// sums), which no order of fp32 sums can break and a missed rounding (an operand used at fp32:
// an error ~2^-9 per term) breaks at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/nf4.h"
#include "core/quant_write.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/linear.h"
#include "support/buffers.h"

namespace medtune::ops {
namespace {

double gamma(int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
}

std::vector<float> normal(int64_t n, uint64_t seed) {
  return testing::random_normal(static_cast<size_t>(n), seed);
}

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// A stored weight and its dequantized values.
struct Weight {
  DType dtype;
  int64_t R, K;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // (R, K)
  StoredMatrix m() const { return {dtype, R, K, bytes.data()}; }
};

Weight make_weight(DType t, int64_t R, int64_t K, uint64_t seed) {
  Weight w{t, R, K, {}, {}};
  std::vector<float> f = normal(R * K, seed);
  for (float& v : f) v *= 0.05f;
  if (t == DType::Q4_1) {
    // Random blocks with finite f16 scale d and min m (the block's first two halves) ~[2^-12, 2^-4].
    std::mt19937_64 rng(seed);
    w.bytes.resize(static_cast<size_t>(dtype_row_bytes(t, K) * R));
    for (uint8_t& b : w.bytes) b = static_cast<uint8_t>(rng());
    for (size_t b = 0; b < w.bytes.size(); b += static_cast<size_t>(dtype_block_bytes(t)))
      for (int k = 0; k < 2; ++k) {
        const uint16_t h = static_cast<uint16_t>(0x1000 + rng() % 0x2000);
        std::memcpy(w.bytes.data() + b + 2 * k, &h, 2);
      }
  } else if (t == DType::NF4) {
    std::vector<uint8_t> packed(static_cast<size_t>(R * K / 2));
    std::vector<float> absmax(static_cast<size_t>(R * K / nf4::kBlock));
    nf4::quantize(f.data(), R * K, packed.data(), absmax.data());
    w.bytes = nf4::row_blocks(packed.data(), absmax.data(), R, K);
  } else {
    w.bytes = encode_f32(t, f.data(), R, K);
  }
  w.deq.resize(static_cast<size_t>(R * K));
  dequantize_rows(w.deq.data(), w.m(), 0, R);
  return w;
}

struct Exact {
  std::vector<double> value, magnitude;  // sum of the rounded terms, and of their magnitudes
};

// y (N, R) = bf16(x) (N, K) . bf16(W)^T + bias, in double.
Exact forward_exact(const std::vector<float>& x, const Weight& w, const float* bias, int64_t N) {
  Exact e{std::vector<double>(static_cast<size_t>(N * w.R)), std::vector<double>(static_cast<size_t>(N * w.R))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < w.R; ++r) {
      double s = bias ? static_cast<double>(bias[r]) : 0.0, m = std::fabs(s);
      for (int64_t k = 0; k < w.K; ++k) {
        const double t = static_cast<double>(bf16_round(x[static_cast<size_t>(n * w.K + k)])) *
                         static_cast<double>(bf16_round(w.deq[static_cast<size_t>(r * w.K + k)]));
        s += t;
        m += std::fabs(t);
      }
      e.value[static_cast<size_t>(n * w.R + r)] = s;
      e.magnitude[static_cast<size_t>(n * w.R + r)] = m;
    }
  return e;
}

// dx (N, K) = bf16(dy) (N, R) . bf16(W) (+ dx0), in double.
Exact backward_exact(const std::vector<float>& dy, const Weight& w, const std::vector<float>* dx0, int64_t N) {
  Exact e{std::vector<double>(static_cast<size_t>(N * w.K)), std::vector<double>(static_cast<size_t>(N * w.K))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < w.K; ++k) {
      const size_t i = static_cast<size_t>(n * w.K + k);
      double s = dx0 ? static_cast<double>((*dx0)[i]) : 0.0, m = std::fabs(s);
      for (int64_t r = 0; r < w.R; ++r) {
        const double t = static_cast<double>(bf16_round(dy[static_cast<size_t>(n * w.R + r)])) *
                         static_cast<double>(bf16_round(w.deq[static_cast<size_t>(r * w.K + k)]));
        s += t;
        m += std::fabs(t);
      }
      e.value[i] = s;
      e.magnitude[i] = m;
    }
  return e;
}

// The number of elements outside gamma(n) * magnitude, and the worst ratio error / bound.
struct Check {
  int64_t bad = 0;
  double worst = 0;
};
Check check(const float* got, const Exact& e, int64_t n_terms) {
  Check c;
  for (size_t i = 0; i < e.value.size(); ++i) {
    const double bound = gamma(n_terms) * e.magnitude[i] + 1e-30;
    const double err = std::fabs(static_cast<double>(got[i]) - e.value[i]);
    c.bad += !(err <= bound);
    c.worst = std::max(c.worst, err / bound);
  }
  return c;
}

std::vector<Bf16Kernel> kernels_here() {
  std::vector<Bf16Kernel> k{Bf16Kernel::kWidenedSgemm};
  if (bf16_kernel() == Bf16Kernel::kOneDnn) k.push_back(Bf16Kernel::kOneDnn);
  return k;
}

TEST(LinearBf16, KernelFollowsTheCpuAndOneDnnPicksANativeBf16Kernel) {
  // oneDNN exactly where the CPU multiplies bf16 natively and MEDTUNE_ISA allows AVX-512; and
  // there oneDNN must have chosen a kernel of a bf16 ISA (avx512_core_bf16 or amx), not its
  // reference or emulated implementation, which would compute the same values far slower.
  const CpuFeatures& f = cpu_features();
  const bool native = (f.avx512bf16 || f.amx_bf16) && active_isa() >= Isa::kAvx512Vnni;
  EXPECT_EQ(bf16_kernel() == Bf16Kernel::kOneDnn, native);
  const std::string name = onednn::kernel_name();
  if (native) {
    EXPECT_TRUE(name.find("bf16") != std::string::npos || name.find("amx") != std::string::npos) << name;
  } else {
    EXPECT_EQ(name, "");
  }
  std::cout << "[ bf16     ] kernels executed: widened-sgemm"
            << (native ? ", " + name : std::string(" (onednn not executed: no native bf16 here)")) << "\n";
}

TEST(LinearBf16, ForwardWithinFp32SumBoundOfRoundedOperands) {
  // SmolLM2-like widths, every stored type; the 600 x 4096 Q8_0 weight spans two 2M-element chunks
  // (512 rows each), so y's columns are written by two products.
  struct Case {
    DType t;
    int64_t R, K;
  };
  for (const Case& cs : {Case{DType::F32, 130, 576}, Case{DType::BF16, 70, 576}, Case{DType::Q4_1, 64, 576},
                         Case{DType::Q8_0, 600, 4096}, Case{DType::NF4, 96, 512}, Case{DType::F16, 40, 8192}}) {
    const Weight w = make_weight(cs.t, cs.R, cs.K, 11);
    const std::vector<float> bias = normal(cs.R, 12);
    for (int64_t N : {1, 3, 5, 67}) {  // 1 and 3: the decode path (rows decoded in registers)
      const std::vector<float> x = normal(N * cs.K, 13 + static_cast<uint64_t>(N));
      const Exact e = forward_exact(x, w, bias.data(), N);
      for (Bf16Kernel k : kernels_here()) {
        testing::Guarded y(static_cast<size_t>(N * cs.R));
        linear_forward_bf16(y.data(), x.data(), w.m(), bias.data(), N, k);
        ASSERT_TRUE(y.intact());
        const Check c = check(y.data(), e, cs.K + 1);
        EXPECT_EQ(c.bad, 0) << dtype_name(cs.t) << " N=" << N << " kernel " << bf16_kernel_name(k)
                            << ": worst error / bound " << c.worst;
      }
    }
  }
}

TEST(LinearBf16, BackwardWithinFp32SumBoundOfRoundedOperands) {
  struct Case {
    DType t;
    int64_t R, K;
  };
  // 4096 x 1024 Q4_1: 2 chunks of 2048 rows, so the chunks' sums accumulate into dx.
  for (const Case& cs : {Case{DType::F32, 130, 576}, Case{DType::Q4_1, 4096, 1024}, Case{DType::NF4, 96, 512}}) {
    const Weight w = make_weight(cs.t, cs.R, cs.K, 21);
    for (int64_t N : {1, 9, 40}) {
      const std::vector<float> dy = normal(N * cs.R, 22 + static_cast<uint64_t>(N));
      const std::vector<float> dx0 = normal(N * cs.K, 23);
      for (bool accumulate : {false, true}) {
        const Exact e = backward_exact(dy, w, accumulate ? &dx0 : nullptr, N);
        for (Bf16Kernel k : kernels_here()) {
          std::vector<float> dx = dx0;
          linear_backward_input_bf16(dx.data(), dy.data(), w.m(), N, accumulate, k);
          const Check c = check(dx.data(), e, cs.R + (accumulate ? 1 : 0));
          EXPECT_EQ(c.bad, 0) << dtype_name(cs.t) << " N=" << N << " accumulate=" << accumulate << " kernel "
                              << bf16_kernel_name(k) << ": worst error / bound " << c.worst;
        }
      }
    }
  }
}

// A kept bf16 copy (StoredMatrix::bf16, model::keep_bf16_copies) holds the values the kernels
// round the stored rows to, and products read from it have the bits of those that round the rows
// again: forward, and backward with and without accumulation, on every kernel here; the 600 x
// 4096 Q8_0 weight is two chunks (the copy read at the second chunk's rows).
TEST(LinearBf16, AKeptBf16CopyGivesTheSameBits) {
  struct Case {
    DType t;
    int64_t R, K;
  };
  for (const Case& cs : {Case{DType::F32, 130, 576}, Case{DType::Q4_1, 64, 576},
                         Case{DType::Q8_0, 600, 4096}, Case{DType::NF4, 96, 512},
                         Case{DType::F16, 40, 8192}}) {
    const Weight w = make_weight(cs.t, cs.R, cs.K, 31);
    std::vector<uint16_t> copy(static_cast<size_t>(cs.R * cs.K));
    round_rows_to_bf16(w.m(), copy.data());
    for (size_t i = 0; i < copy.size(); ++i)
      ASSERT_EQ(copy[i], f32_to_bf16(w.deq[i])) << dtype_name(cs.t) << " element " << i;
    StoredMatrix kept = w.m();
    kept.bf16 = copy.data();
    for (int64_t N : {5, 67}) {
      const std::vector<float> x = normal(N * cs.K, 32), dy = normal(N * cs.R, 33);
      const std::vector<float> dx0 = normal(N * cs.K, 34);
      for (Bf16Kernel k : kernels_here()) {
        std::vector<float> y_a(static_cast<size_t>(N * cs.R)), y_b(y_a.size());
        linear_forward_bf16(y_a.data(), x.data(), w.m(), nullptr, N, k);
        linear_forward_bf16(y_b.data(), x.data(), kept, nullptr, N, k);
        EXPECT_EQ(std::memcmp(y_a.data(), y_b.data(), y_a.size() * 4), 0)
            << dtype_name(cs.t) << " forward N=" << N << " " << bf16_kernel_name(k);
        for (bool accumulate : {false, true}) {
          std::vector<float> dx_a = dx0, dx_b = dx0;
          linear_backward_input_bf16(dx_a.data(), dy.data(), w.m(), N, accumulate, k);
          linear_backward_input_bf16(dx_b.data(), dy.data(), kept, N, accumulate, k);
          EXPECT_EQ(std::memcmp(dx_a.data(), dx_b.data(), dx_a.size() * 4), 0)
              << dtype_name(cs.t) << " backward N=" << N << " accumulate " << accumulate << " "
              << bf16_kernel_name(k);
        }
      }
    }
  }
}

TEST(LinearBf16, DiffersFromFp32ByTheRounding) {
  // The bf16 path must not silently be the fp32 one: on random data the two differ by about the
  // inputs' rounding (2^-9 relative per term), far above fp32's sum error.
  const Weight w = make_weight(DType::F32, 64, 576, 31);
  const std::vector<float> x = normal(8 * 576, 32);
  std::vector<float> y32(8 * 64), y16(8 * 64);
  linear_forward(y32.data(), x.data(), w.m(), nullptr, 8);
  for (Bf16Kernel k : kernels_here()) {
    linear_forward_bf16(y16.data(), x.data(), w.m(), nullptr, 8, k);
    EXPECT_GT(testing::max_rel(y16, y32), 1e-4) << bf16_kernel_name(k);
    EXPECT_LT(testing::max_rel(y16, y32), 3e-2) << bf16_kernel_name(k);
  }
}

}  // namespace
}  // namespace medtune::ops
