// Elementwise ops and row moves of the forward pass (gpu/elementwise.cu): add_inplace,
// scale_inplace, add_bias, gather_rows, scatter_rows, undo_/redo_gguf_qk_permutation, lora_dropout.
// Tolerance: bit-exact. Each output element is one fp32 addition (add_inplace, add_bias), one fp32
// product (scale_inplace) or a copy (the rest): one correctly rounded operation or none, so there
// is no order to differ and nothing to contract into an FMA.
// lora_dropout adds integer arithmetic (the mask) and one fp32 product per kept element.
// References: add_inplace, the q/k permutations and lora_dropout against the CPU ops
// (ops::add_inplace, ops::undo_gguf_qk_permutation, ops::redo_gguf_qk_permutation,
// ops::lora_dropout); the others against the plain loops written here.
#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "gpu/ops.h"
#include "ops/dropout.h"
#include "ops/ops.h"
#include "op_test.h"

namespace medtune::gpu_test {

namespace {

// Row indices in [0, S): random with repeats (gather), or distinct (scatter: the first M of a
// random permutation).
std::vector<int64_t> random_rows(int64_t M, int64_t S, bool distinct, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> rows(static_cast<size_t>(M));
  if (distinct) {
    std::vector<int64_t> all(static_cast<size_t>(S));
    std::iota(all.begin(), all.end(), int64_t{0});
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + M, rows.begin());
  } else {
    for (int64_t& r : rows) r = static_cast<int64_t>(rng() % static_cast<uint64_t>(S));
    if (M >= 2) rows[1] = S - 1;  // the last row of src is always read
  }
  return rows;
}

void add_inplace_case(Registry& r, int64_t n, bool aliased, bool quick) {
  r.add("elementwise/add_inplace/" + shape({{"n", n}}) + (aliased ? ",x=y" : ""), quick,
        [=](Checks& c, const gpu::Stream& s) {
          std::vector<float> y = random_normals(static_cast<size_t>(n), 101);
          const std::vector<float> x = aliased ? y : random_normals(static_cast<size_t>(n), 102);
          GuardedDevice<float> d_y(y, s), d_x(x, s);
          gpu::add_inplace(d_y.data(), aliased ? d_y.data() : d_x.data(), n, s);
          ops::add_inplace(y.data(), x.data(), n);
          const std::vector<float> got = d_y.download(s);
          c.guards("y", d_y, s);
          c.nan_agreement("y", got, y);
          c.bit_exact("y", got, y);
        });
}

void scale_inplace_case(Registry& r, int64_t n, bool quick) {
  r.add("elementwise/scale_inplace/" + shape({{"n", n}}), quick,
        [=](Checks& c, const gpu::Stream& s) {
          std::vector<float> y = random_normals(static_cast<size_t>(n), 103);
          const float f = 0.1f;  // not a power of two: every product rounds
          GuardedDevice<float> d_y(y, s);
          gpu::scale_inplace(d_y.data(), f, n, s);
          for (float& v : y) v *= f;
          const std::vector<float> got = d_y.download(s);
          c.guards("y", d_y, s);
          c.nan_agreement("y", got, y);
          c.bit_exact("y", got, y);
        });
}

void add_bias_case(Registry& r, int64_t N, int64_t cols, bool quick) {
  r.add("elementwise/add_bias/" + shape({{"N", N}, {"cols", cols}}), quick,
        [=](Checks& c, const gpu::Stream& s) {
          std::vector<float> y = random_normals(static_cast<size_t>(N * cols), 104);
          const std::vector<float> bias = random_normals(static_cast<size_t>(cols), 105, 0.1f);
          GuardedDevice<float> d_y(y, s), d_bias(bias, s);
          gpu::add_bias(d_y.data(), d_bias.data(), N, cols, s);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t j = 0; j < cols; ++j)
              y[static_cast<size_t>(n * cols + j)] += bias[static_cast<size_t>(j)];
          const std::vector<float> got = d_y.download(s);
          c.guards("y", d_y, s);
          c.nan_agreement("y", got, y);
          c.bit_exact("y", got, y);
        });
}

// gather: dst (M, C) from src (S, C); dst starts as NaN bytes, so a row never written fails.
void gather_case(Registry& r, int64_t M, int64_t C, int64_t S, bool quick) {
  r.add("elementwise/gather_rows/" + shape({{"M", M}, {"C", C}, {"S", S}}), quick,
        [=](Checks& c, const gpu::Stream& s) {
          const std::vector<float> src = random_normals(static_cast<size_t>(S * C), 106);
          const std::vector<int64_t> rows = random_rows(M, S, false, 107);
          std::vector<float> ref(static_cast<size_t>(M * C));
          for (int64_t i = 0; i < M; ++i) {
            const int64_t row = rows[static_cast<size_t>(i)];
            for (int64_t k = 0; k < C; ++k)
              ref[static_cast<size_t>(i * C + k)] = src[static_cast<size_t>(row * C + k)];
          }
          GuardedDevice<float> d_src(src, s), d_dst(ref.size(), s);
          GuardedDevice<int64_t> d_rows(rows, s);
          gpu::gather_rows(d_dst.data(), d_src.data(), d_rows.data(), M, C, s);
          const std::vector<float> got = d_dst.download(s);
          c.guards("dst", d_dst, s);
          c.nan_agreement("dst", got, ref);
          c.bit_exact("dst", got, ref);
        });
}

// scatter: src (M, C) into M distinct rows of dst (S, C); the other rows must keep their values.
void scatter_case(Registry& r, int64_t M, int64_t C, int64_t S, bool quick) {
  r.add("elementwise/scatter_rows/" + shape({{"M", M}, {"C", C}, {"S", S}}), quick,
        [=](Checks& c, const gpu::Stream& s) {
          const std::vector<float> src = random_normals(static_cast<size_t>(M * C), 108);
          std::vector<float> dst = random_normals(static_cast<size_t>(S * C), 109);
          const std::vector<int64_t> rows = random_rows(M, S, true, 110);
          GuardedDevice<float> d_src(src, s), d_dst(dst, s);
          GuardedDevice<int64_t> d_rows(rows, s);
          gpu::scatter_rows(d_dst.data(), d_src.data(), d_rows.data(), M, C, s);
          for (int64_t i = 0; i < M; ++i) {
            const int64_t row = rows[static_cast<size_t>(i)];
            for (int64_t k = 0; k < C; ++k)
              dst[static_cast<size_t>(row * C + k)] = src[static_cast<size_t>(i * C + k)];
          }
          const std::vector<float> got = d_dst.download(s);
          c.guards("dst", d_dst, s);
          c.nan_agreement("dst", got, dst);
          c.bit_exact("dst", got, dst);
        });
}

void undo_qk_case(Registry& r, int64_t N, int64_t H, int64_t HD, bool quick) {
  for (const bool inverse : {false, true})
    r.add(std::string("elementwise/") + (inverse ? "redo" : "undo") + "_gguf_qk_permutation/" +
              shape({{"N", N}, {"H", H}, {"HD", HD}}),
          quick, [=](Checks& c, const gpu::Stream& s) {
            std::vector<float> x = random_normals(static_cast<size_t>(N * H * HD), 111);
            GuardedDevice<float> d_x(x, s);
            if (inverse) {
              gpu::redo_gguf_qk_permutation(d_x.data(), N, H, HD, s);
              ops::redo_gguf_qk_permutation(x.data(), N, H, HD);
            } else {
              gpu::undo_gguf_qk_permutation(d_x.data(), N, H, HD, s);
              ops::undo_gguf_qk_permutation(x.data(), N, H, HD);
            }
            const std::vector<float> got = d_x.download(s);
            c.guards("x", d_x, s);
            c.nan_agreement("x", got, x);
            c.bit_exact("x", got, x);
          });
}

// x (N, in) through the mask of one site, against ops::lora_dropout: with a row list (a pass over
// some rows of the batch, repeats allowed), a row offset (a row shard), in place or not.
void dropout_case(Registry& r, int64_t N, int64_t in, float p, bool with_rows, int64_t row0, bool in_place,
                  bool quick) {
  r.add("elementwise/lora_dropout/" + shape({{"N", N}, {"in", in}, {"row0", row0}}) + ",p=" + std::to_string(p) +
            (with_rows ? ",rows" : "") + (in_place ? ",xd=x" : ""),
        quick, [=](Checks& c, const gpu::Stream& s) {
          const std::vector<float> x = random_normals(static_cast<size_t>(N * in), 111);
          const std::vector<int64_t> rows = random_rows(N, 3 * N + 2, false, 112);
          ops::DropoutSite d;
          d.p = p;
          d.seed = 0x1234abcdull;
          d.site = 5;
          d.row0 = row0;
          if (with_rows) d.rows = rows.data();
          std::vector<float> want(x.size());
          ops::lora_dropout(want.data(), x.data(), N, in, d);
          GuardedDevice<float> d_x(x, s), d_xd(x.size(), s);
          GuardedDevice<int64_t> d_rows(rows, s);
          float* out = in_place ? d_x.data() : d_xd.data();
          gpu::lora_dropout(out, d_x.data(), N, in, ops::dropout::stream_base(d), ops::dropout::threshold(p),
                            ops::dropout::keep_scale(p), with_rows ? d_rows.data() : nullptr, row0, s);
          const std::vector<float> got = in_place ? d_x.download(s) : d_xd.download(s);
          c.guards("xd", in_place ? d_x : d_xd, s);
          c.nan_agreement("xd", got, want);
          c.bit_exact("xd", got, want);
          // The mask must drop something and keep something at these sizes (a kernel that ignored
          // the threshold, or dropped everything, would also differ bit-wise; this names why).
          const auto zeros = std::count(got.begin(), got.end(), 0.0f);
          if (N * in >= 1000) c.record(zeros > 0 && zeros < static_cast<long>(got.size()), "some dropped, some kept");
        });
}

}  // namespace

void register_elementwise_cases(Registry& r) {
  for (bool aliased : {false, true}) {
    add_inplace_case(r, 1, aliased, true);
    add_inplace_case(r, 1001, aliased, true);
  }
  add_inplace_case(r, 512 * 4096, false, false);  // the residual add of 512 tokens at C = 4096
  scale_inplace_case(r, 1, true);
  scale_inplace_case(r, 1001, true);
  scale_inplace_case(r, 512 * 4096, false);
  add_bias_case(r, 1, 1, true);
  add_bias_case(r, 7, 33, true);
  add_bias_case(r, 512, 3584, false);  // Qwen2-7B's q_proj bias over 512 tokens
  gather_case(r, 1, 1, 1, true);
  gather_case(r, 7, 33, 50, true);
  gather_case(r, 1000, 4096, 2048, false);  // loss rows of a 2048-token batch at C = 4096
  scatter_case(r, 1, 1, 1, true);
  scatter_case(r, 7, 33, 50, true);
  scatter_case(r, 1000, 4096, 2048, false);
  undo_qk_case(r, 1, 1, 2, true);
  undo_qk_case(r, 7, 3, 10, true);
  undo_qk_case(r, 3, 5, 256, true);      // the largest head_dim
  undo_qk_case(r, 512, 32, 128, false);  // Llama-3-8B q: 32 heads of 128
  undo_qk_case(r, 512, 8, 128, false);   // and k: 8 kv heads
  dropout_case(r, 1, 1, 0.5f, false, 0, false, true);
  dropout_case(r, 7, 33, 0.1f, true, 5, false, true);
  dropout_case(r, 7, 33, 0.1f, false, 0, true, true);      // in place, as the backward pass does
  dropout_case(r, 512, 4096, 0.05f, false, 512, false, false);  // a 7B projection input, second shard
  r.add("elementwise/undo_gguf_qk_permutation/bad_head_dim_throws", true,
        [](Checks& c, const gpu::Stream& s) {
          const auto throws = [&](int64_t HD) {
            try {
              gpu::undo_gguf_qk_permutation(nullptr, 1, 1, HD, s);
            } catch (const Internal&) {
              return true;
            }
            return false;
          };
          c.record(throws(7) && throws(258) && throws(0), "head_dim 7, 258 and 0 throw Internal");
        });
}

}  // namespace medtune::gpu_test
