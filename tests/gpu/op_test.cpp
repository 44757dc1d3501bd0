// Checks and random inputs of the GPU op tests (op_test.h).
#include "op_test.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/nf4.h"
#include "core/quant.h"

namespace medtune::gpu_test {

namespace {
// printf with two doubles; the format is always a literal at the call site.
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
std::string fmt(const char* f, ...) {
  char buf[160];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof buf, f, args);
  va_end(args);
  return buf;
}
}  // namespace

void Checks::record(bool ok, const std::string& line) {
  if (!ok) ++failures_;
  lines_.push_back(std::string(ok ? "  ok    " : "  FAIL  ") + line);
}

void Checks::nan_agreement(const char* what, const std::vector<float>& gpu,
                           const std::vector<float>& ref) {
  size_t bad = 0, first = 0, nans = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    nans += std::isnan(ref[i]) ? 1 : 0;
    if (std::isnan(gpu[i]) != std::isnan(ref[i]) && bad++ == 0) first = i;
  }
  std::string line = std::string(what) + ": NaN agreement (" + std::to_string(nans) + " NaN in the reference)";
  if (bad > 0)
    line += ", " + std::to_string(bad) + " disagree, first at " + std::to_string(first) +
            fmt(" (gpu %g, ref %g)", static_cast<double>(gpu[first]), static_cast<double>(ref[first]));
  record(bad == 0 && gpu.size() == ref.size(), line);
}

void Checks::nmse(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref,
                  double tol) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i]) || std::isnan(gpu[i])) continue;  // nan_agreement's business
    const double d = static_cast<double>(gpu[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  const double e = den > 0 ? num / den : num;
  record(e <= tol, std::string(what) + fmt(": NMSE %.3g <= %.3g", e, tol));
}

void Checks::within(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref,
                    const std::vector<double>& bound) {
  double worst = 0;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i]) && std::isnan(gpu[i])) continue;
    const double d = std::fabs(static_cast<double>(gpu[i]) - static_cast<double>(ref[i]));
    const double ratio = bound[i] > 0 ? d / bound[i] : (d == 0 ? 0.0 : HUGE_VAL);
    if (!(ratio <= 1.0) && bad++ == 0) first = i;  // NaN ratio fails too
    if (ratio > worst || std::isnan(ratio)) worst = ratio;
  }
  std::string line = std::string(what) + fmt(": max |gpu - ref| / bound = %.3g <= %g", worst, 1.0);
  if (bad > 0)
    line += ", " + std::to_string(bad) + " outside, first at " + std::to_string(first) +
            fmt(" (gpu %.9g, ref %.9g)", static_cast<double>(gpu[first]), static_cast<double>(ref[first]));
  record(bad == 0, line);
}

void Checks::bit_exact(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&gpu[i], &ref[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  std::string line = std::string(what) + ": bit-exact over " + std::to_string(ref.size()) + " values";
  if (bad > 0)
    line += ", " + std::to_string(bad) + " differ, first at " + std::to_string(first) +
            fmt(" (gpu %.9g, ref %.9g)", static_cast<double>(gpu[first]), static_cast<double>(ref[first]));
  record(bad == 0 && gpu.size() == ref.size(), line);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> random_normals(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng() & 0xFF);
  return v;
}

namespace {

// Random f16 bits that are finite (exponent != 31), subnormals included.
uint16_t finite_f16(uint16_t bits) { return ((bits >> 10) & 0x1F) == 0x1F ? static_cast<uint16_t>(bits & 0xBFFF) : bits; }
uint16_t finite_bf16(uint16_t bits) { return ((bits >> 7) & 0xFF) == 0xFF ? static_cast<uint16_t>(bits & 0xBFFF) : bits; }

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

std::vector<uint8_t> random_stored(DType t, int64_t n, uint64_t seed) {
  std::vector<uint8_t> b = random_bytes(static_cast<size_t>(dtype_row_bytes(t, n)), seed);
  switch (t) {
    case DType::F16:
      for (size_t i = 0; i < b.size(); i += 2) put_u16(&b[i], finite_f16(get_u16(&b[i])));
      break;
    case DType::BF16:
      for (size_t i = 0; i < b.size(); i += 2) put_u16(&b[i], finite_bf16(get_u16(&b[i])));
      break;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::IQ4_XS:  // d first
      for (size_t i = 0; i < b.size(); i += static_cast<size_t>(dtype_block_bytes(t)))
        put_u16(&b[i], finite_f16(get_u16(&b[i])));
      break;
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:  // d, then m (Q4_1, Q5_1) or dmin (Q4_K, Q5_K)
      for (size_t i = 0; i < b.size(); i += static_cast<size_t>(dtype_block_bytes(t))) {
        put_u16(&b[i], finite_f16(get_u16(&b[i])));
        put_u16(&b[i + 2], finite_f16(get_u16(&b[i + 2])));
      }
      break;
    case DType::Q6_K:  // d is the block's last 2 bytes
      for (size_t i = 0; i < b.size(); i += 210) put_u16(&b[i + 208], finite_f16(get_u16(&b[i + 208])));
      break;
    case DType::Q2_K:  // d and dmin are the block's last 4 bytes
      for (size_t i = 0; i < b.size(); i += 84) {
        put_u16(&b[i + 80], finite_f16(get_u16(&b[i + 80])));
        put_u16(&b[i + 82], finite_f16(get_u16(&b[i + 82])));
      }
      break;
    case DType::Q3_K:  // d is the block's last 2 bytes
      for (size_t i = 0; i < b.size(); i += 110) put_u16(&b[i + 108], finite_f16(get_u16(&b[i + 108])));
      break;
    case DType::NF4:
      for (size_t i = 0; i < b.size(); i += static_cast<size_t>(nf4::kRowBlockBytes)) {
        const float absmax = static_cast<float>(b[i + 1] + 1) / 64.0f;  // positive, as bnb's
        std::memcpy(&b[i], &absmax, 4);
      }
      break;
    default: break;
  }
  return b;
}

void decode_row_ref(DType t, const uint8_t* src, float* dst, int64_t n) {
  if (t == DType::NF4)
    nf4::dequantize_blocks_scalar(src, dst, n);
  else
    dequantize_row(t, src, dst, n);
}

std::string shape(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [k, v] : dims) s += (s.empty() ? "" : ",") + std::string(k) + "=" + std::to_string(v);
  return s;
}

}  // namespace medtune::gpu_test
