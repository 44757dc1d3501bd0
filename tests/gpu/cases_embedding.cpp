// Embedding lookup and gradient. There is no CPU op of that name (the CPU model dequantizes the
// table's rows in model/llama.cpp), so the reference is the obvious loop, written here.
// Tolerance: bit-exact. The forward copies values; the backward adds dout rows into the table in
// the order of n, one fp32 addition per element and step, exactly as the loop below does.
// embedding_rows (a stored table of any type gpu::dequantize supports, int32 ids): the reference
// is the CPU model's own lookup, dequantize_row of the row (nf4::dequantize_blocks_scalar for NF4;
// decode_row_ref in op_test.h); bit-exact for the reasons in gpu/decode.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "gpu/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

// ids: mostly in range with repeats (the backward must sum them), plus `bad` out-of-range ones.
std::vector<int64_t> make_ids(int64_t N, int64_t V, int64_t bad, uint64_t seed) {
  const std::vector<uint8_t> r = random_bytes(static_cast<size_t>(N) * 4, seed);
  std::vector<int64_t> ids(static_cast<size_t>(N));
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t x = static_cast<uint32_t>(r[4 * i]) | static_cast<uint32_t>(r[4 * i + 1]) << 8 |
                       static_cast<uint32_t>(r[4 * i + 2]) << 16;
    ids[i] = static_cast<int64_t>(x % static_cast<uint32_t>(i % 3 == 0 ? (V < 5 ? V : 5) : V));
  }
  for (int64_t k = 0; k < bad && k < N; ++k) ids[static_cast<size_t>(k * 2 % N)] = (k % 2 == 0) ? V : -1;
  return ids;
}

void add_case(Registry& r, int64_t N, int64_t C, int64_t V, int64_t bad, bool quick) {
  const std::string dims = shape({{"N", N}, {"C", C}, {"V", V}});
  r.add("embedding_forward/" + dims + (bad > 0 ? ",bad_ids" : ""), quick,
        [=](Checks& c, const gpu::Stream& s) {
          const std::vector<float> table = random_normals(static_cast<size_t>(V * C), 11);
          const std::vector<int64_t> ids = make_ids(N, V, bad, 12);
          std::vector<float> ref(static_cast<size_t>(N * C));
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < C; ++k) {
              const int64_t id = ids[static_cast<size_t>(n)];
              ref[static_cast<size_t>(n * C + k)] = (id >= 0 && id < V)
                  ? table[static_cast<size_t>(id * C + k)] : std::numeric_limits<float>::quiet_NaN();
            }
          GuardedDevice<float> d_table(table, s), d_out(ref.size(), s);
          GuardedDevice<int64_t> d_ids(ids, s);
          gpu::embedding_forward(d_out.data(), d_table.data(), d_ids.data(), N, C, V, s);
          const std::vector<float> out = d_out.download(s);
          c.guards("out", d_out, s);
          c.nan_agreement("out", out, ref);
          // NaN rows (bad ids) compare equal as patterns only if both are the canonical quiet
          // NaN; compare the finite rows bitwise and the NaN rows through nan_agreement above.
          std::vector<float> a = out, b = ref;
          for (size_t i = 0; i < a.size(); ++i)
            if (std::isnan(b[i]) && std::isnan(a[i])) a[i] = b[i] = 0.0f;
          c.bit_exact("out", a, b);
        });
  r.add("embedding_backward/" + dims + (bad > 0 ? ",bad_ids" : ""), quick,
        [=](Checks& c, const gpu::Stream& s) {
          const std::vector<float> dout = random_normals(static_cast<size_t>(N * C), 13);
          std::vector<float> dtable = random_normals(static_cast<size_t>(V * C), 14, 0.1f);
          const std::vector<int64_t> ids = make_ids(N, V, bad, 15);
          GuardedDevice<float> d_dtable(dtable, s), d_dout(dout, s);
          GuardedDevice<int64_t> d_ids(ids, s);
          gpu::embedding_backward(d_dtable.data(), d_dout.data(), d_ids.data(), N, C, V, s);
          for (int64_t n = 0; n < N; ++n) {  // the reference: accumulate in the order of n
            const int64_t id = ids[static_cast<size_t>(n)];
            if (id < 0 || id >= V) continue;
            for (int64_t k = 0; k < C; ++k)
              dtable[static_cast<size_t>(id * C + k)] += dout[static_cast<size_t>(n * C + k)];
          }
          const std::vector<float> out = d_dtable.download(s);
          c.guards("dtable", d_dtable, s);
          c.bit_exact("dtable", out, dtable);
        });
}

// embedding_rows: out (N, C) = decoded rows ids[n] of a (V, C) table of type t. Only the rows the
// ids name are uploaded; the rest of the table keeps the NaN bytes (0xFF) it was filled with, so
// a kernel reading the wrong row produces NaNs where the reference has numbers, and one reading
// past either end of the table (a bad id not caught) reads guard bytes (0xA5...: finite values)
// where the reference has NaN. The realistic case has a 128256-row vocabulary: at C = 4096 an F32
// table is 2.1 GB, so row offsets pass 2^31 bytes.
void add_rows_case(Registry& r, DType t, int64_t N, int64_t C, int64_t V, int64_t bad, bool quick) {
  const std::string name = "embedding_rows/" + std::string(dtype_name(t)) + "," +
                           shape({{"N", N}, {"C", C}, {"V", V}}) + (bad > 0 ? ",bad_ids" : "");
  r.add(name, quick, [=](Checks& c, const gpu::Stream& s) {
    std::vector<int64_t> ids64 = make_ids(N, V, bad, 16);
    if (N >= 4 && bad == 0) {  // the table's first and last rows are always among them
      ids64[1] = 0;
      ids64[3] = V - 1;
    }
    const std::vector<int32_t> ids(ids64.begin(), ids64.end());
    const int64_t rb = dtype_row_bytes(t, C);
    GuardedDevice<uint8_t> d_table(static_cast<size_t>(V * rb), s);  // NaN bytes everywhere
    std::vector<int64_t> used(ids64);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::vector<std::vector<uint8_t>> row_bytes(used.size());
    for (size_t k = 0; k < used.size(); ++k) {
      const int64_t id = used[k];
      if (id < 0 || id >= V) continue;
      row_bytes[k] = random_stored(t, C, 1000 + static_cast<uint64_t>(id));
      if (t == DType::F32)  // finite values: NaN payloads are the dequantize cases' business
        for (size_t b = 3; b < row_bytes[k].size(); b += 4)
          if ((row_bytes[k][b] & 0x7F) == 0x7F) row_bytes[k][b] &= 0xBF;
      gpu::copy_to_device_sync(d_table.data() + id * rb, row_bytes[k].data(),
                               static_cast<size_t>(rb), s);
    }
    std::vector<float> ref(static_cast<size_t>(N * C));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = ids64[static_cast<size_t>(n)];
      float* dst = ref.data() + n * C;
      if (id < 0 || id >= V) {
        std::fill(dst, dst + C, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      const auto k = static_cast<size_t>(std::lower_bound(used.begin(), used.end(), id) -
                                         used.begin());
      decode_row_ref(t, row_bytes[k].data(), dst, C);
    }
    GuardedDevice<int32_t> d_ids(ids, s);
    GuardedDevice<float> d_out(ref.size(), s);
    gpu::embedding_rows(t, d_table.data(), d_ids.data(), d_out.data(), N, C, V, s);
    std::vector<float> out = d_out.download(s);
    c.guards("out", d_out, s);
    c.guards("table (read only)", d_table, s);
    c.nan_agreement("out", out, ref);
    // The bad ids' NaN rows are compared through nan_agreement only (the NaN's payload is not
    // the point); every decoded value bitwise.
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = ids64[static_cast<size_t>(n)];
      if (id >= 0 && id < V) continue;
      for (size_t k = static_cast<size_t>(n * C); k < static_cast<size_t>((n + 1) * C); ++k)
        if (std::isnan(out[k])) out[k] = ref[k] = 0.0f;
    }
    c.bit_exact("out", out, ref);
  });
}

}  // namespace

void register_embedding_cases(Registry& r) {
  add_case(r, 1, 1, 1, 0, true);
  add_case(r, 7, 33, 100, 2, true);
  add_case(r, 257, 1000, 3001, 0, true);
  add_case(r, 512, 576, 49152, 0, false);  // SmolLM2-135M: C = 576, V = 49152
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::NF4}) {
    const int64_t blk = dtype_block_elems(t);  // 1, 32, 64 or 256
    add_rows_case(r, t, 1, blk, 1, 0, true);
    add_rows_case(r, t, 7, blk == 1 ? 33 : 3 * blk, 37, 2, true);
    add_rows_case(r, t, 512, 4096, 128256, 0, false);  // Llama-3-8B: C = 4096, V = 128256
  }
  r.add("embedding_rows/unsupported_type_or_width_throws", true, [](Checks& c, const gpu::Stream& s) {
    const auto throws = [&](DType t, int64_t C) {
      try {
        gpu::embedding_rows(t, nullptr, nullptr, nullptr, 1, C, 1, s);
      } catch (const Internal&) {
        return true;
      }
      return false;
    };
    c.record(throws(DType::F64, 256), "an F64 table (not a weight type) throws Internal");
    c.record(throws(DType::Q8_0, 48), "Q8_0 rows of 48 (not whole blocks of 32) throw Internal");
    c.record(throws(DType::Q4_K, 128), "Q4_K rows of 128 (not whole super-blocks of 256) throw Internal");
  });
}

}  // namespace medtune::gpu_test
