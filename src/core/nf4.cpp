// NF4 quantization / dequantization bit-exact with bitsandbytes 0.50.2 on the CPU (see nf4.h).
//
// Where each rounding decision comes from (bitsandbytes/backends/default/ops.py and
// csrc/cpu_ops.cpp of that release; torch's ATen for the mean):
//   - quantize_4bit runs bnb's "default" (pure torch) kernel on the CPU: absmax = max |x| per
//     block of 64; scaled = clamp(x * (1 / max(absmax, 1e-38)), -1, 1) in fp32 (a reciprocal,
//     then a multiply: not a division); a short last block instead divides by its own
//     max(absmax, 1e-38), and stores that clamped absmax; an odd element count is padded with
//     one 0. The code is torch.bucketize(scaled, midpoints), midpoints = fp32((c[i] + c[i+1]) / 2):
//     the number of midpoints below the value, so an exact tie goes to the LOWER code.
//   - the nested absmax uses bnb's C++ CPU quantize_blockwise: a 65536-entry lookup table over
//     [-1, 1] (entry i: value -1 + 2i/65535, mapped to the dynamic-map code whose fp32 midpoint
//     interval holds it, ties to the lower code), indexed by trunc(((v + 1) * 0.5) * 65535 + 0.5)
//     with v = clamp(x * (1 / absmax), -1, 1). The table's resolution (3e-5) is coarser than the
//     dynamic map near zero, so small values do not always get their nearest code: bnb's result,
//     reproduced. A block whose absmax is 0 gets code 0 everywhere.
//   - offset = torch.mean(absmax): ATen's cascade sum (8 fp32 lanes on AVX2, 4 interleaved
//     accumulators, levels of 2^max(4, ceil(log2 n)/4)), then one division by n.
//   - dequantization multiplies once in fp32; the nested absmax is a product, rounded, plus the
//     offset, rounded: two roundings, so that sum must not be contracted into an FMA.
#include "core/nf4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

#include "core/cpu_features.h"
#include "core/nf4_kernels.h"

namespace medtune::nf4 {

const std::array<float, 16> kCode = {
    -0x1.0p+0f,       -0x1.647362p-1f,  -0x1.0cd66p-1f,   -0x1.94654p-2f,
    -0x1.23449ap-2f,  -0x1.7a6a7ep-3f,  -0x1.74f0e2p-4f,  0x0.0p+0f,
    0x1.45f5fep-4f,   0x1.4995c6p-3f,   0x1.f809bap-3f,   0x1.5a0674p-2f,
    0x1.c3497p-2f,    0x1.200f56p-1f,   0x1.722766p-1f,   0x1.0p+0f};

const std::array<float, 256>& dynamic_map() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), as fp32 hex literals
  // (tests/fixtures/nf4/dynamic_map.f32 holds bnb's own output; test_nf4 compares).
  static const std::array<float, 256> map = {
      -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.ee0000p-1f, -0x1.e6ccccp-1f,
      -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.ca0000p-1f,
      -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
      -0x1.a60000p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
      -0x1.893334p-1f, -0x1.820000p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
      -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5e0000p-1f, -0x1.56ccccp-1f,
      -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3a0000p-1f,
      -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
      -0x1.160000p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
      -0x1.f26664p-2f, -0x1.e40000p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
      -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9c0000p-2f, -0x1.8d9998p-2f,
      -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.540000p-2f,
      -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
      -0x1.0c0000p-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
      -0x1.a4ccccp-3f, -0x1.880000p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
      -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.f00000p-4f, -0x1.b66668p-4f,
      -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
      -0x1.65c290p-4f, -0x1.5a3d70p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
      -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
      -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
      -0x1.b70a3ep-5f, -0x1.a00000p-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
      -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c290p-5f,
      -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
      -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c290p-7f,
      -0x1.3e76c8p-7f, -0x1.2c0830p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
      -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
      -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
      -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
      -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d500p-11f, -0x1.3dd982p-11f,
      -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
      -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
      -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0.0p+0f,
      0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
      0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
      0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
      0x1.78d500p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
      0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
      0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
      0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
      0x1.19999ap-7f, 0x1.2c0830p-7f, 0x1.3e76c8p-7f, 0x1.75c290p-7f,
      0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
      0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c290p-5f,
      0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
      0x1.88f5c2p-5f, 0x1.a00000p-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
      0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
      0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
      0x1.4eb854p-4f, 0x1.5a3d70p-4f, 0x1.65c290p-4f, 0x1.7147aep-4f,
      0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
      0x1.f00000p-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
      0x1.6b3334p-3f, 0x1.880000p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
      0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0c0000p-2f, 0x1.1a6668p-2f,
      0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.540000p-2f,
      0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
      0x1.9c0000p-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
      0x1.d59998p-2f, 0x1.e40000p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
      0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.160000p-1f, 0x1.1d3334p-1f,
      0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3a0000p-1f,
      0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
      0x1.5e0000p-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
      0x1.7accccp-1f, 0x1.820000p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
      0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a60000p-1f, 0x1.ad3334p-1f,
      0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.ca0000p-1f,
      0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
      0x1.ee0000p-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1.000000p+0f,
  };
  return map;
}

namespace {

// a + b with a, b already rounded: keeps GCC from contracting "x * y + z" into one FMA (bnb
// rounds the product first), which -march=native plus -ffp-contract=fast would otherwise allow.
inline float add_rounded(float a, float b) {
  volatile float va = a;
  return va + b;
}

inline float clamp_pm1(float v) {  // torch.clamp(v, -1, 1): NaN stays NaN
  if (v < -1.0f) return -1.0f;
  if (v > 1.0f) return 1.0f;
  return v;
}

struct Midpoints {
  float m[15];
  Midpoints() {
    for (int i = 0; i < 15; ++i) m[i] = (kCode[i] + kCode[i + 1]) / 2.0f;
  }
};

// torch.bucketize(v, midpoints, right=False): the first i with midpoint[i] >= v (15 if none,
// which is also where a NaN lands).
inline uint8_t nf4_code_of(float v, const Midpoints& mp) {
  uint8_t i = 0;
  while (i < 15 && !(mp.m[i] >= v)) ++i;
  return i;
}

float abs_max(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > m || std::isnan(a)) m = a;  // torch.max propagates NaN
    if (std::isnan(m)) break;
  }
  return m;
}

}  // namespace

void quantize(const float* x, int64_t n, uint8_t* packed, float* absmax) {
  static const Midpoints mp;
  const int64_t full = n - n % kBlock;
  auto put = [packed](int64_t i, uint8_t c) {
    if (i % 2 == 0) packed[i / 2] = static_cast<uint8_t>(c << 4);
    else packed[i / 2] = static_cast<uint8_t>(packed[i / 2] | c);
  };
  for (int64_t b = 0; b < full / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    const float am = abs_max(xb, kBlock);
    absmax[b] = am;
    const float recip = 1.0f / std::max(am, 1e-38f);  // torch: 1.0 / absmax.clamp(min=1e-38)
    for (int64_t j = 0; j < kBlock; ++j) put(b * kBlock + j, nf4_code_of(clamp_pm1(xb[j] * recip), mp));
  }
  if (full < n) {
    float am = abs_max(x + full, n - full);
    am = std::isnan(am) ? am : std::max(am, 1e-38f);  // stored clamped, as bnb does here
    absmax[full / kBlock] = am;
    for (int64_t i = full; i < n; ++i) put(i, nf4_code_of(clamp_pm1(x[i] / am), mp));
  }
  if (n % 2 == 1) put(n, nf4_code_of(0.0f, mp));  // bnb pads an odd count with one 0
}

// ---------------------------------------------------------------- 8-bit blockwise (nested)

namespace {
constexpr int kLutSize = 65536;

std::vector<uint8_t> build_lut(const std::array<float, 256>& code) {
  float mid[255];
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (code[static_cast<size_t>(i)] + code[static_cast<size_t>(i) + 1]);
  std::vector<uint8_t> lut(kLutSize);
  int c = 0;
  for (int i = 0; i < kLutSize; ++i) {
    const float val = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutSize - 1);
    while (c < 255 && mid[c] < val) ++c;
    lut[static_cast<size_t>(i)] = static_cast<uint8_t>(c);
  }
  return lut;
}

inline int lut_index(float v) {
  v = std::clamp(v, -1.0f, 1.0f);
  const float t = (v + 1.0f) * 0.5f * static_cast<float>(kLutSize - 1);
  return static_cast<int>(static_cast<uint16_t>(add_rounded(t, 0.5f)));
}
}  // namespace

void quantize_blockwise_8bit(const float* x, int64_t n, int64_t blocksize,
                             const std::array<float, 256>& code, uint8_t* q, float* absmax) {
  const std::vector<uint8_t> lut = build_lut(code);
  for (int64_t b = 0, start = 0; start < n; ++b, start += blocksize) {
    const int64_t end = std::min(n, start + blocksize);
    float am = 0.0f;
    for (int64_t i = start; i < end; ++i) {
      const float a = std::fabs(x[i]);
      if (!std::isnan(a)) am = std::max(am, a);  // bnb: NaN lanes count as 0
    }
    absmax[b] = am;
    if (am == 0.0f) {
      std::fill(q + start, q + end, uint8_t{0});
      continue;
    }
    const float inv = 1.0f / am;
    for (int64_t i = start; i < end; ++i) q[i] = lut[static_cast<size_t>(lut_index(x[i] * inv))];
  }
}

// ---------------------------------------------------------------- torch.mean (fp32, AVX2 order)

float torch_mean(const float* x, int64_t n) {
  constexpr int kLanes = 8, kIlp = 4, kLevels = 4;
  using Row = std::array<std::array<float, kLanes>, kIlp>;  // 4 vectors of 8 lanes
  const int64_t vec_size = n / kLanes, rows = vec_size / kIlp;
  // multi_row_sum over `rows` rows of 4 vectors, cascading into 4 levels.
  int64_t log2n = 1;
  if (rows > 2) {
    log2n = 0;
    while ((int64_t{1} << log2n) < rows) ++log2n;
  }
  const int64_t level_power = std::max<int64_t>(4, log2n / kLevels);
  const int64_t level_step = int64_t{1} << level_power, level_mask = level_step - 1;
  Row acc[kLevels] = {};
  auto add_row = [](Row& a, const Row& b) {
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < kLanes; ++l) a[static_cast<size_t>(k)][static_cast<size_t>(l)] += b[static_cast<size_t>(k)][static_cast<size_t>(l)];
  };
  auto load_row = [x](int64_t r) {
    Row v;
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < kLanes; ++l) v[static_cast<size_t>(k)][static_cast<size_t>(l)] = x[(r * kIlp + k) * kLanes + l];
    return v;
  };
  int64_t i = 0;
  while (i + level_step <= rows) {
    for (int64_t j = 0; j < level_step; ++j, ++i) add_row(acc[0], load_row(i));
    for (int j = 1; j < kLevels; ++j) {
      add_row(acc[j], acc[j - 1]);
      acc[j - 1] = Row{};
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i) add_row(acc[0], load_row(i));
  for (int j = 1; j < kLevels; ++j) add_row(acc[0], acc[j]);
  // row_sum: leftover vectors into partial 0, then partials 1..3 into 0.
  std::array<float, kLanes>& p = acc[0][0];
  for (int64_t v = rows * kIlp; v < vec_size; ++v)
    for (int l = 0; l < kLanes; ++l) p[static_cast<size_t>(l)] += x[v * kLanes + l];
  for (int k = 1; k < kIlp; ++k)
    for (int l = 0; l < kLanes; ++l) p[static_cast<size_t>(l)] += acc[0][static_cast<size_t>(k)][static_cast<size_t>(l)];
  // vectorized_inner_sum: scalar tail first, then the lanes in order.
  float s = 0.0f;
  for (int64_t k = vec_size * kLanes; k < n; ++k) s += x[k];
  for (int l = 0; l < kLanes; ++l) s += p[static_cast<size_t>(l)];
  return s / static_cast<float>(n);
}

NestedAbsmax quantize_absmax(const float* absmax, int64_t nblocks) {
  NestedAbsmax s;
  s.offset = torch_mean(absmax, nblocks);
  std::vector<float> centered(static_cast<size_t>(nblocks));
  for (int64_t b = 0; b < nblocks; ++b) centered[static_cast<size_t>(b)] = absmax[b] - s.offset;
  s.q.resize(static_cast<size_t>(nblocks));
  s.absmax2.resize(static_cast<size_t>((nblocks + kNestedBlock - 1) / kNestedBlock));
  quantize_blockwise_8bit(centered.data(), nblocks, kNestedBlock, dynamic_map(), s.q.data(),
                          s.absmax2.data());
  return s;
}

void dequantize_absmax(const uint8_t* q, const float* absmax2, float offset, int64_t nblocks,
                       const float* code256, int64_t nested_blocksize, float* absmax) {
  for (int64_t b = 0; b < nblocks; ++b)
    absmax[b] = add_rounded(code256[q[b]] * absmax2[b / nested_blocksize], offset);
}

void dequantize_absmax(const uint8_t* q, const float* absmax2, float offset, int64_t nblocks,
                       float* absmax) {
  dequantize_absmax(q, absmax2, offset, nblocks, dynamic_map().data(), kNestedBlock, absmax);
}

void dequantize_absmax(const NestedAbsmax& s, float* absmax) {
  dequantize_absmax(s.q.data(), s.absmax2.data(), s.offset, static_cast<int64_t>(s.q.size()), absmax);
}

// ---------------------------------------------------------------- dequantization

void dequantize_scalar(const uint8_t* packed, const float* absmax, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = packed[i / 2];
    const int c = (i % 2 == 0) ? (byte >> 4) : (byte & 0x0F);
    out[i] = kCode[static_cast<size_t>(c)] * absmax[i / kBlock];
  }
}

void dequantize_blocks_scalar(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kRowBlockBytes, out += kBlock) {
    float am;
    std::memcpy(&am, blocks, 4);
    dequantize_scalar(blocks + 4, &am, out, kBlock);
  }
}

namespace {
// The AVX2 kernels (nf4_avx2.cpp) run when this CPU has AVX2 + FMA and MEDTUNE_ISA allows them.
bool use_avx2() {
  static const bool yes = active_isa() >= Isa::kAvx2;
  return yes;
}
}  // namespace

void dequantize_blocks(const uint8_t* blocks, float* out, int64_t n) {
  if (use_avx2()) nf4_detail::dequantize_blocks_avx2(blocks, out, n, kCode.data());
  else dequantize_blocks_scalar(blocks, out, n);
}

void dequantize(const uint8_t* packed, const float* absmax, float* out, int64_t n) {
  if (!use_avx2()) return dequantize_scalar(packed, absmax, out, n);
  const int64_t full = n / kBlock;
  nf4_detail::dequantize_full_blocks_avx2(packed, absmax, out, full, kCode.data());
  const int64_t done = full * kBlock;
  // a short last block: scalar (bytes past n / 2 may not exist)
  for (int64_t i = done; i < n; ++i) {
    const uint8_t byte = packed[i / 2];
    const int c = (i % 2 == 0) ? (byte >> 4) : (byte & 0x0F);
    out[i] = kCode[static_cast<size_t>(c)] * absmax[i / kBlock];
  }
}

float dot_blocks(const uint8_t* blocks, const float* x, int64_t n) {
  if (use_avx2()) return nf4_detail::dot_blocks_avx2(blocks, x, n, kCode.data());
  float tmp[kBlock];
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kBlock; ++b, blocks += kRowBlockBytes, x += kBlock) {
    dequantize_blocks_scalar(blocks, tmp, kBlock);
    for (int j = 0; j < kBlock; ++j) acc += tmp[j] * x[j];
  }
  return acc;
}

std::vector<uint8_t> row_blocks(const uint8_t* packed, const float* absmax, int64_t rows,
                                int64_t cols) {
  if (cols % kBlock != 0)
    throw Internal("nf4::row_blocks: cols = " + std::to_string(cols) + " is not a multiple of 64");
  const int64_t nb = rows * cols / kBlock;
  std::vector<uint8_t> out(static_cast<size_t>(nb * kRowBlockBytes));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = out.data() + b * kRowBlockBytes;
    std::memcpy(o, &absmax[b], 4);
    std::memcpy(o + 4, packed + b * kBlock / 2, kBlock / 2);
  }
  return out;
}

bool has_simd() { return use_avx2(); }

}  // namespace medtune::nf4
