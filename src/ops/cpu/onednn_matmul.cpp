#include "ops/cpu/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"

namespace medtune::ops::onednn {

namespace {

using dnnl::memory;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One shape's primitive and the scratchpad size it asks for. The scratchpad is the caller's
// (scratchpad_mode::user), so that two threads running equal shapes never share one. The memory
// objects are made once and pointed at each call's buffers: making four per call (a malloc and a
// free each) was ~3% of the time of the bf16 attention backward, whose products are small.
struct Prim {
  dnnl::matmul matmul;
  memory::desc a, b, c, scratch;
  memory ma, mb, mc, ms;
};

// M, N, K, lda, ldb, b_rows_are_n, ldc, accumulate, a_rows_are_k.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t, bool, bool>;

// Shapes change with the number of tokens, so a long eval meets many; oneDNN keeps its own cache
// of JIT code behind this one, so dropping ours now and then costs a descriptor, not a JIT.
constexpr size_t kMaxCachedShapes = 256;

Prim make_prim(const Key& k) {
  const auto [M, N, K, lda, ldb, b_rows_are_n, ldc, accumulate, a_rows_are_k] = k;
  Prim p;
  p.a = a_rows_are_k ? memory::desc({M, K}, memory::data_type::bf16, {1, lda})
                     : memory::desc({M, K}, memory::data_type::bf16, {lda, 1});
  p.b = b_rows_are_n ? memory::desc({K, N}, memory::data_type::bf16, {1, ldb})
                     : memory::desc({K, N}, memory::data_type::bf16, {ldb, 1});
  p.c = memory::desc({M, N}, memory::data_type::f32, {ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);  // C = A.B + C, in fp32
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, engine());
  p.scratch = pd.scratchpad_desc();
  p.matmul = dnnl::matmul(pd);
  p.ma = memory(p.a, engine(), DNNL_MEMORY_NONE);
  p.mb = memory(p.b, engine(), DNNL_MEMORY_NONE);
  p.mc = memory(p.c, engine(), DNNL_MEMORY_NONE);
  p.ms = memory(p.scratch, engine(), DNNL_MEMORY_NONE);
  return p;
}

}  // namespace

bool bf16_native() {
  static const bool native = [] {
    const CpuFeatures& f = cpu_features();
    return (f.avx512bf16 || f.amx_bf16) && active_isa() >= Isa::kAvx512Vnni;
  }();
  return native;
}

void matmul_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                 int64_t ldb, bool b_rows_are_n, float* C, int64_t ldc, bool accumulate,
                 bool a_rows_are_k) {
  if (!bf16_native()) throw Internal("onednn::matmul_bf16 called on a CPU without native bf16");
  if (M == 0 || N == 0) return;
  thread_local std::map<Key, Prim> cache;
  thread_local std::vector<char> scratch;
  thread_local std::unique_ptr<dnnl::stream> stream;
  try {
    if (!stream) stream = std::make_unique<dnnl::stream>(engine());
    const Key key{M, N, K, lda, ldb, b_rows_are_n, ldc, accumulate, a_rows_are_k};
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= kMaxCachedShapes) cache.clear();
      it = cache.emplace(key, make_prim(key)).first;
    }
    Prim& p = it->second;
    if (scratch.size() < p.scratch.get_size()) scratch.resize(p.scratch.get_size());
    // oneDNN takes non-const handles; it only reads A and B.
    p.ma.set_data_handle(const_cast<uint16_t*>(A));
    p.mb.set_data_handle(const_cast<uint16_t*>(B));
    p.mc.set_data_handle(C);
    p.ms.set_data_handle(scratch.data());
    p.matmul.execute(*stream, {{DNNL_ARG_SRC, p.ma},
                               {DNNL_ARG_WEIGHTS, p.mb},
                               {DNNL_ARG_DST, p.mc},
                               {DNNL_ARG_SCRATCHPAD, p.ms}});
    stream->wait();
  } catch (const dnnl::error& e) {
    throw Internal(std::string("oneDNN bf16 matmul (") + std::to_string(M) + "x" + std::to_string(N) + "x" +
                   std::to_string(K) + ") failed: " + e.what());
  }
}

std::string kernel_name() {
  if (!bf16_native()) return "";
  try {
    // A prompt-sized product against a transposed weight, as linear_forward_bf16 runs it.
    const memory::desc a({256, 576}, memory::data_type::bf16, {576, 1});
    const memory::desc b({576, 1536}, memory::data_type::bf16, {1, 576});
    const memory::desc c({256, 1536}, memory::data_type::f32, {1536, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
    const dnnl_version_t* v = dnnl_version();
    return std::string("oneDNN ") + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " " + pd.impl_info_str();
  } catch (const dnnl::error& e) {
    return std::string("oneDNN error: ") + e.what();
  }
}

}  // namespace medtune::ops::onednn
