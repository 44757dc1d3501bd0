// The decode steps' bf16 product (gpu/gemv.cu: gemv_bf16, gemv_stored_bf16) against a plain loop
// in double.
//
// Tolerance: the GEMM cases' (cases_gemm.cpp): an fp32 sum of K = cols products in any order errs
// by at most (K + 1)·u·Σ_k|x_k·w_k| to first order; here the products of two bf16 values are
// exact in fp32 (8-bit significands: 16 bits of product), so K·u would do, and the bound keeps the
// GEMM's (K + 2)·u, doubled for second-order terms, plus u·|ref| for the reference's rounding.
// The inputs are bf16 values (random normals rounded), so the reference sees what the GPU sees.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "gpu/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

std::vector<uint16_t> bf16_normals(size_t n, uint64_t seed, float stddev) {
  const std::vector<float> f = random_normals(n, seed, stddev);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(f[i]);
  return out;
}

// y (N, y_stride): columns [0, rows) = x·Wᵀ; `offset` elements shift x and W off their 16-byte
// alignment (the kernel's element-by-element path, as do cols not a multiple of 8).
void add_case(Registry& r, int64_t N, int64_t rows, int64_t cols, int64_t y_stride, int64_t offset,
              bool quick) {
  const std::string name =
      "gemv/bf16/" + shape({{"N", N}, {"rows", rows}, {"cols", cols}, {"y_stride", y_stride}}) +
      (offset != 0 ? ",unaligned" : "");
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    const std::vector<uint16_t> x = bf16_normals(static_cast<size_t>(N * cols + offset), 51, 1.0f);
    const std::vector<uint16_t> w =
        bf16_normals(static_cast<size_t>(rows * cols + offset), 52, 0.05f);
    std::vector<float> ref(static_cast<size_t>(N * rows));
    std::vector<double> bound(ref.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < rows; ++j) {
        double acc = 0.0, mag = 0.0;
        for (int64_t k = 0; k < cols; ++k) {
          const double p =
              static_cast<double>(bf16_to_f32(x[static_cast<size_t>(offset + n * cols + k)])) *
              static_cast<double>(bf16_to_f32(w[static_cast<size_t>(offset + j * cols + k)]));
          acc += p;
          mag += std::fabs(p);
        }
        const size_t o = static_cast<size_t>(n * rows + j);
        ref[o] = static_cast<float>(acc);
        bound[o] = 2 * (static_cast<double>(cols + 2) * kU * mag + kU * std::fabs(acc));
      }
    GuardedDevice<uint16_t> d_x(x, s), d_w(w, s);
    GuardedDevice<float> d_y(static_cast<size_t>(N * y_stride), s);  // NaN bytes: never read
    gpu::gemv_bf16(d_y.data(), y_stride, d_x.data() + offset, d_w.data() + offset, N, rows, cols,
                   s);
    const std::vector<float> all = d_y.download(s);
    std::vector<float> got(ref.size());
    size_t padding_written = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < y_stride; ++j) {
        const float v = all[static_cast<size_t>(n * y_stride + j)];
        if (j < rows)
          got[static_cast<size_t>(n * rows + j)] = v;
        else
          padding_written += std::isnan(v) ? 0 : 1;
      }
    c.guards("y", d_y, s);
    c.record(padding_written == 0,
             "y's columns past rows untouched (" + std::to_string(padding_written) + " written)");
    c.nan_agreement("y", got, ref);
    c.within("y", got, ref, bound);
    // Deterministic: a second run gives the same bits.
    GuardedDevice<float> d_y2(static_cast<size_t>(N * y_stride), s);
    gpu::gemv_bf16(d_y2.data(), y_stride, d_x.data() + offset, d_w.data() + offset, N, rows, cols,
                   s);
    c.bit_exact("y run twice", d_y2.download(s), all);
    bool refused = false;
    try {
      gpu::gemv_bf16(d_y2.data(), y_stride, d_x.data(), d_w.data(), gpu::kGemvMaxTokens + 1, rows,
                     cols, s);
    } catch (const Internal&) {
      refused = true;
    }
    c.record(refused, "N > kGemvMaxTokens is refused");
  });
}

// The same product over W as stored (gemv_stored_bf16): the reference decodes each row as the
// CPU does (decode_row_ref: the dequantize cases' reference, bit-exact on the GPU), rounds each
// weight to bf16 (core/half.h) and sums in double; the bound is the one above.
void add_stored_case(Registry& r, DType t, int64_t N, int64_t rows, int64_t cols, bool quick) {
  const std::string name = "gemv/stored_" + std::string(dtype_name(t)) + "/" +
                           shape({{"N", N}, {"rows", rows}, {"cols", cols}});
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    const std::vector<uint16_t> x = bf16_normals(static_cast<size_t>(N * cols), 53, 1.0f);
    // F32: normals (random_stored's random bit patterns include values whose products overflow).
    std::vector<uint8_t> w = random_stored(t, rows * cols, 54);
    if (t == DType::F32) {
      const std::vector<float> f = random_normals(static_cast<size_t>(rows * cols), 54, 0.05f);
      std::memcpy(w.data(), f.data(), w.size());
    }
    const int64_t row_bytes = dtype_row_bytes(t, cols);
    std::vector<float> wrow(static_cast<size_t>(cols)), ref(static_cast<size_t>(N * rows));
    std::vector<double> bound(ref.size());
    for (int64_t j = 0; j < rows; ++j) {
      decode_row_ref(t, w.data() + j * row_bytes, wrow.data(), cols);
      for (float& v : wrow) v = bf16_to_f32(f32_to_bf16(v));
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0.0, mag = 0.0;
        for (int64_t k = 0; k < cols; ++k) {
          const double p = static_cast<double>(bf16_to_f32(x[static_cast<size_t>(n * cols + k)])) *
                           static_cast<double>(wrow[static_cast<size_t>(k)]);
          acc += p;
          mag += std::fabs(p);
        }
        const size_t o = static_cast<size_t>(n * rows + j);
        ref[o] = static_cast<float>(acc);
        bound[o] = 2 * (static_cast<double>(cols + 2) * kU * mag + kU * std::fabs(acc));
      }
    }
    GuardedDevice<uint16_t> d_x(x, s);
    GuardedDevice<uint8_t> d_w(w, s);
    GuardedDevice<float> d_y(ref.size(), s);  // NaN bytes: never read
    gpu::gemv_stored_bf16(d_y.data(), rows, d_x.data(), t, d_w.data(), N, rows, cols, s);
    const std::vector<float> got = d_y.download(s);
    c.guards("y", d_y, s);
    c.nan_agreement("y", got, ref);
    c.within("y", got, ref, bound);
    bool refused = false;
    try {  // x off its 16-byte alignment
      gpu::gemv_stored_bf16(d_y.data(), rows, d_x.data() + 1, t, d_w.data(), N, rows, cols - 8, s);
    } catch (const Internal&) {
      refused = true;
    }
    c.record(refused, "an unaligned x is refused");
  });
}

// Several members in one call (gemv_stored_bf16_group: q, k and v; gate and up): every output
// element the bits of gemv_stored_bf16 for that member alone, columns past each member's rows
// untouched, members of different types (one launch per run of one type) and an empty member.
// The single calls are checked against the double reference by the cases above.
void add_group_case(Registry& r, const std::vector<DType>& types, const std::vector<int64_t>& rows,
                    int64_t N, int64_t cols) {
  std::string name = "gemv/group/";
  for (size_t i = 0; i < types.size(); ++i)
    name += (i > 0 ? "+" : "") + std::string(dtype_name(types[i])) + "x" + std::to_string(rows[i]);
  name += "," + shape({{"N", N}, {"cols", cols}});
  r.add(name, true, [=](Checks& c, const gpu::Stream& s) {
    const int n = static_cast<int>(types.size());
    const std::vector<uint16_t> x = bf16_normals(static_cast<size_t>(N * cols), 55, 1.0f);
    GuardedDevice<uint16_t> d_x(x, s);
    std::vector<GuardedDevice<uint8_t>> d_w;
    std::vector<GuardedDevice<float>> d_group, d_alone;
    std::vector<gpu::GemvMember> members;
    for (int i = 0; i < n; ++i) {
      const DType t = types[static_cast<size_t>(i)];
      const int64_t m = rows[static_cast<size_t>(i)], stride = m + 3;  // 3 padding columns
      d_w.emplace_back(random_stored(t, m * cols, 56 + static_cast<uint64_t>(i)), s);
      d_group.emplace_back(static_cast<size_t>(N * stride), s);  // NaN bytes: never read
      d_alone.emplace_back(static_cast<size_t>(N * stride), s);
    }
    for (int i = 0; i < n; ++i) {
      const int64_t m = rows[static_cast<size_t>(i)];
      members.push_back({d_group[static_cast<size_t>(i)].data(), m + 3,
                         types[static_cast<size_t>(i)], d_w[static_cast<size_t>(i)].data(), m});
      gpu::gemv_stored_bf16(d_alone[static_cast<size_t>(i)].data(), m + 3, d_x.data(),
                            types[static_cast<size_t>(i)], d_w[static_cast<size_t>(i)].data(), N, m,
                            cols, s);
    }
    gpu::gemv_stored_bf16_group(members.data(), n, d_x.data(), N, cols, s);
    for (int i = 0; i < n; ++i) {
      const std::string member = "member " + std::to_string(i);
      const std::vector<float> got = d_group[static_cast<size_t>(i)].download(s);
      const std::vector<float> alone = d_alone[static_cast<size_t>(i)].download(s);
      c.bit_exact((member + " against its own call").c_str(), got, alone);
      size_t written = 0;  // the padding columns (NaN bytes) and, for an empty member, everything
      for (int64_t k = 0; k < N; ++k)
        for (int64_t j = rows[static_cast<size_t>(i)]; j < rows[static_cast<size_t>(i)] + 3; ++j)
          written +=
              std::isnan(got[static_cast<size_t>(k * (rows[static_cast<size_t>(i)] + 3) + j)]) ? 0
                                                                                               : 1;
      c.record(written == 0, member + ": columns past its rows untouched (" +
                                 std::to_string(written) + " written)");
      c.guards((member + " y").c_str(), d_group[static_cast<size_t>(i)], s);
    }
    bool refused = false;
    try {
      std::vector<gpu::GemvMember> too_many(gpu::kGemvMaxMembers + 1, members[0]);
      gpu::gemv_stored_bf16_group(too_many.data(), gpu::kGemvMaxMembers + 1, d_x.data(), N, cols,
                                  s);
    } catch (const Internal&) {
      refused = true;
    }
    c.record(refused, "more than kGemvMaxMembers members are refused");
  });
}

}  // namespace

void register_gemv_cases(Registry& r) {
  //              N  rows   cols  y_stride offset
  add_case(r, 1, 1, 8, 1, 0, true);
  add_case(r, 1, 37, 40, 37, 0, true);           // rows not a multiple of the warps per block
  add_case(r, 3, 33, 36, 40, 0, true);           // cols not a multiple of 8; padded y rows
  add_case(r, 8, 70, 264, 70, 0, true);          // the most tokens; a lane's last chunk partial
  add_case(r, 2, 19, 64, 19, 1, true);           // unaligned x and W
  add_case(r, 1, 4096, 4096, 4096, 0, false);    // Llama-2-7B q/k/v/o, one token
  add_case(r, 4, 11008, 4096, 11008, 0, false);  // its gate/up, four tokens
  add_case(r, 1, 4096, 14336, 4096, 0, false);   // Llama-3-8B down_proj
  // Stored types: every type the device decodes, odd row counts, 1 to 8 tokens; rows of 256
  // (the k-quants' super-block) and 512 elements.
  const DType kStored[] = {DType::F32,  DType::F16,  DType::Q8_0, DType::Q4_0,
                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,
                           DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                           DType::IQ4_NL, DType::IQ4_XS, DType::NF4};
  for (const DType t : kStored) {
    add_stored_case(r, t, 1, 37, 256, true);
    add_stored_case(r, t, 8, 5, 512, true);
  }
  // q, k and v of one type (GQA: k and v narrower); Q4_K_M's mix (v at Q6_K: two launches);
  // gate and up at 4 tokens; an empty member between two.
  add_group_case(r, {DType::Q8_0, DType::Q8_0, DType::Q8_0}, {37, 12, 12}, 1, 256);
  add_group_case(r, {DType::Q4_K, DType::Q4_K, DType::Q6_K}, {20, 9, 9}, 3, 512);
  add_group_case(r, {DType::Q5_0, DType::Q5_0, DType::Q8_0}, {20, 9, 9}, 2, 256);  // a small Q4_K_M
  add_group_case(r, {DType::NF4, DType::NF4}, {33, 33}, 4, 256);
  add_group_case(r, {DType::F16, DType::F16, DType::F16}, {5, 0, 7}, 8, 256);
  add_stored_case(r, DType::Q4_K, 1, 4096, 4096, false);  // a 7B projection at Q4_K_M
  add_stored_case(r, DType::NF4, 1, 4096, 4096, false);   // QLoRA's base
}

}  // namespace medtune::gpu_test
