// Test helpers: seeded random buffers, guarded output buffers, and error metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace medtune::testing {

inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// n draws of N(0, stddev^2) from mt19937_64(seed).
inline std::vector<float> random_normal(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// An output buffer with sentinel words on both sides; intact() says whether an op wrote outside.
class Guarded {
 public:
  explicit Guarded(size_t n) : buf_(n + 2 * kGuard, kSentinel), n_(n) {}
  float* data() { return buf_.data() + kGuard; }
  const float* data() const { return buf_.data() + kGuard; }
  size_t size() const { return n_; }
  bool intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (buf_[i] != kSentinel || buf_[kGuard + n_ + i] != kSentinel) return false;
    return true;
  }

 private:
  static constexpr size_t kGuard = 16;
  static constexpr float kSentinel = -12345.678f;
  std::vector<float> buf_;
  size_t n_;
};

// Normalized mean squared error sum((a-b)^2) / sum(b^2), b the reference.
inline double nmse(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den > 0 ? num / den : num;
}

// Largest elementwise error relative to the reference's largest magnitude: max |a - b| / max |b|
// (b the reference; max |a - b| itself when b is all zeros).
template <typename A, typename B>
double max_rel(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

inline bool any_nan(const float* a, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::isnan(a[i])) return true;
  return false;
}

}  // namespace medtune::testing
