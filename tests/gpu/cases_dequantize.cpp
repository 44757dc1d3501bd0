// Dequantization against medtune::dequantize_row (ggml's reference, bit-exact) and
// nf4::dequantize_blocks (bitsandbytes, bit-exact). Tolerance: bit-exact, for the reason given in
// gpu/decode.h and core/quant.cpp: every product is exact in fp32 and at most one rounding
// follows, so order and contraction cannot change a bit.
// Inputs are random bytes with the scales made finite (random_stored, op_test.h): a NaN scale would
// give NaN outputs whose payload bits the vendors do not promise to keep (NVIDIA returns a
// canonical NaN).
#include "core/dtype.h"
#include "core/error.h"
#include "gpu/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

void add_case(Registry& r, DType t, int64_t n, bool quick) {
  r.add("dequantize/" + std::string(dtype_name(t)) + "," + shape({{"n", n}}), quick,
        [=](Checks& c, const gpu::Stream& s) {
          const std::vector<uint8_t> src = random_stored(t, n, 71 + static_cast<uint64_t>(t));
          std::vector<float> ref(static_cast<size_t>(n));
          decode_row_ref(t, src.data(), ref.data(), n);
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
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,
                  DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL,
                  DType::IQ4_XS}) {
    const int64_t blk = dtype_block_elems(t);  // 32, or 256 for the k-quants
    add_case(r, t, blk, true);
    add_case(r, t, blk * 37, true);
    add_case(r, t, 4096 * 1024, false);  // 1024 rows of a 4096-wide weight
  }
  add_case(r, DType::NF4, 64, true);
  add_case(r, DType::NF4, 64 * 37, true);
  add_case(r, DType::NF4, 4096 * 1024, false);
  r.add("dequantize/unsupported_type_throws", true, [](Checks& c, const gpu::Stream& s) {
    bool threw = false;
    try {
      gpu::dequantize(DType::F64, nullptr, nullptr, 256, s);
    } catch (const Internal&) {
      threw = true;
    }
    c.record(threw && !gpu::dequantize_supported(DType::F64), "F64 (not a weight type) throws Internal");
  });
}

}  // namespace medtune::gpu_test
