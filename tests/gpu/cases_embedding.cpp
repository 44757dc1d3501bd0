// Embedding lookup and gradient. There is no CPU op of that name (the CPU model dequantizes the
// table's rows in model/llama.cpp), so the reference is the obvious loop, written here.
// Tolerance: bit-exact. The forward copies values; the backward adds dout rows into the table in
// the order of n, one fp32 addition per element and step, exactly as the loop below does.
#include <cmath>
#include <limits>

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

}  // namespace

void register_embedding_cases(Registry& r) {
  add_case(r, 1, 1, 1, 0, true);
  add_case(r, 7, 33, 100, 2, true);
  add_case(r, 257, 1000, 3001, 0, true);
  add_case(r, 512, 576, 49152, 0, false);  // SmolLM2-135M: C = 576, V = 49152
}

}  // namespace medtune::gpu_test
