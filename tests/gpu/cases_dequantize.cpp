// Dequantization against medtune::dequantize_row (ggml's reference, bit-exact) and
// nf4::dequantize_blocks (bitsandbytes, bit-exact). Tolerance: bit-exact, for the reason given in
// gpu/dequantize.cu and core/quant.cpp: every product is exact in fp32 and at most one rounding
// follows, so order and contraction cannot change a bit.
// Inputs are random bytes with the scales made finite: a NaN scale would give NaN outputs whose
// payload bits the vendors do not promise to keep (NVIDIA returns a canonical NaN).
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/nf4.h"
#include "core/quant.h"
#include "gpu/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

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

// n elements of type t: random bytes, then every scale field (and, for F16/BF16, every value)
// made finite.
std::vector<uint8_t> make_blocks(DType t, int64_t n, uint64_t seed) {
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
      for (size_t i = 0; i < b.size(); i += static_cast<size_t>(dtype_block_bytes(t)))
        put_u16(&b[i], finite_f16(get_u16(&b[i])));
      break;
    case DType::Q4_1:
      for (size_t i = 0; i < b.size(); i += 20) {
        put_u16(&b[i], finite_f16(get_u16(&b[i])));
        put_u16(&b[i + 2], finite_f16(get_u16(&b[i + 2])));
      }
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

void add_case(Registry& r, DType t, int64_t n, bool quick) {
  r.add("dequantize/" + std::string(dtype_name(t)) + "," + shape({{"n", n}}), quick,
        [=](Checks& c, const gpu::Stream& s) {
          const std::vector<uint8_t> src = make_blocks(t, n, 71 + static_cast<uint64_t>(t));
          std::vector<float> ref(static_cast<size_t>(n));
          if (t == DType::NF4)
            nf4::dequantize_blocks_scalar(src.data(), ref.data(), n);
          else
            dequantize_row(t, src.data(), ref.data(), n);
          GuardedDevice<uint8_t> d_src(src, s);
          GuardedDevice<float> d_out(ref.size(), s);
          gpu::dequantize(t, d_src.data(), d_out.data(), n, s);
          const std::vector<float> out = d_out.download(s);
          c.guards("out", d_out, s);
          c.nan_agreement("out", out, ref);
          c.bit_exact("out", out, ref);
        });
}

}  // namespace

void register_dequantize_cases(Registry& r) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    add_case(r, t, 1, true);
    add_case(r, t, 1001, true);
  }
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    add_case(r, t, 32, true);
    add_case(r, t, 32 * 37, true);
    add_case(r, t, 4096 * 1024, false);  // 1024 rows of a 4096-wide weight
  }
  add_case(r, DType::NF4, 64, true);
  add_case(r, DType::NF4, 64 * 37, true);
  add_case(r, DType::NF4, 4096 * 1024, false);
  r.add("dequantize/unsupported_type_throws", true, [](Checks& c, const gpu::Stream& s) {
    bool threw = false;
    try {
      gpu::dequantize(DType::Q6_K, nullptr, nullptr, 256, s);
    } catch (const Internal&) {
      threw = true;
    }
    c.record(threw && !gpu::dequantize_supported(DType::Q6_K), "Q6_K (not yet on the GPU) throws Internal");
  });
}

}  // namespace medtune::gpu_test
