// The GPU backend (backend/backend.h) over the kernels of src/gpu/: plain C++ (no vendor header),
// compiled in -DMEDTUNE_GPU=cuda|hip builds only (cmake/gpu.cmake), the same file for CUDA and HIP.
//
// Run on one NVIDIA H200 (session 31: every stage of scripts/gpu-check.sh, docs/gpu.md); compiled
// for gfx90a, never run on an AMD GPU.
//
// Weights stay resident in their stored dtype and are dequantized a chunk of rows at a time into a
// workspace just before each GEMM (never a full fp32 copy of a quantized matrix). The linear
// layers' GEMMs (linear_forward, linear_backward_input: the base weights, the lm_head) run at the
// backend's precision: fp32 through cuBLAS/hipBLAS SGEMM (no TF32), or bf16: the activations and
// the weight chunk rounded to bf16 (a BF16 checkpoint's weights read as stored, no conversion),
// products and sums in fp32 (GemmEx; up to 8 tokens, decode steps, gpu/gemv.cu instead: session
// 33, NEVER RUN on a GPU yet, reading stored types as they are; MEDTUNE_GPU_GEMV=off keeps
// GemmEx). Everything else, the adapters' GEMMs included, is fp32.
// Attention from 16 queries per row on: the GEMM attention (gpu/attention_gemm.cu, fp32 SGEMMs;
// written in session 32 and NEVER RUN on a GPU yet); forwards of up to 4 queries per row (decode
// steps): the split-key kernel (gpu/attention_split.cu, session 33, NEVER RUN on a GPU yet);
// the rest (calls too long for the GEMM's workspace bound, 5 to 15 queries, backwards of those):
// the tiled kernel (gpu/attention.cu). MEDTUNE_GPU_ATTENTION=tiled forces the tiled kernel
// everywhere.
// Every call is queued on one stream; host-side index lists are staged into device memory on it.
// MEDTUNE_GPU_PROFILE=1 times each op (gpu/op_profile.h) and prints the table at exit.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/gpu_factory.h"
#include "core/error.h"
#include "gpu/attention_plan.h"
#include "gpu/blas.h"
#include "gpu/op_profile.h"
#include "gpu/ops.h"
#include "gpu/runtime.h"

namespace medtune::backend {

namespace {

// Weight elements dequantized per GEMM (64 MiB of fp32): whole projections of a 7B model (4096 x
// 11008 = 45M) in one piece, a 128256-row lm_head in ~8.
constexpr int64_t kChunkElems = int64_t{1} << 24;
// Allocations are rounded up to this, so that buffers of nearly equal sizes are reused.
constexpr size_t kGranule = 256;

class GpuBackend final : public Backend {
 public:
  GpuBackend(int index, Precision precision) : index_(index), precision_(precision) {
    gpu::set_device(index);
    info_ = gpu::device_info(index);
    stream_ = std::make_unique<gpu::Stream>();
    blas_ = std::make_unique<gpu::Blas>(*stream_);
    prof_ = std::make_unique<gpu::OpProfile>(*stream_);
  }
  ~GpuBackend() override {
    if (!peak_text_.empty()) std::fputs(peak_text_.c_str(), stderr);
    // Wait for queued work before the buffers it uses are freed (member destructors below).
    try {
      stream_->synchronize();
    } catch (...) {  // the process is ending; nothing useful to do with a device error here
    }
  }

  Device device() const override { return {DeviceKind::kGpu, index_}; }
  Precision precision() const override { return precision_; }
  std::string describe() const override {
    return "gpu:" + std::to_string(index_) + " " + gpu::describe(info_) + ", " +
           precision_name(precision_) + " linear layers, " + gpu::blas_library() +
           (gemm_attention_ ? ", GEMM and split-key attention" : ", tiled attention");
  }

  // ---- memory: a cache of freed buffers by rounded size (all use is ordered on one stream, so
  // a buffer freed by one call can be handed to the next without waiting).
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
    gpu::DeviceBuffer buf;
    bool reused = false;
    const auto it = free_.lower_bound(rounded);
    // Reuse, wasting at most half; under a plan at most an eighth: the waste stays held for as
    // long as the buffer lives, where the plan counts what is asked for (a 256-row logits chunk
    // of 31 MiB freed by the loss head and reused for a 16 MiB (N, C) buffer put a Llama-2-7B
    // step 15 MiB over its plan). A step asks for the same sizes each time, so steady state
    // reuses exact fits either way.
    const size_t fit = planned_ > 0 ? rounded + rounded / 8 : 2 * rounded;
    if (it != free_.end() && it->first <= fit) {
      buf = std::move(it->second);
      free_.erase(it);
      reused = true;
    } else {
      trim_cache_for(rounded);
      try {
        buf = gpu::DeviceBuffer(rounded);
      } catch (const gpu::OutOfMemory&) {
        held_ -= cached_bytes();
        free_.clear();  // give the cached buffers back and try once more
        try {
          buf = gpu::DeviceBuffer(rounded);
        } catch (const gpu::OutOfMemory&) {
          throw out_of_memory(rounded, "a working buffer (activations, keys/values or workspace)");
        }
      }
    }
    void* p = buf.data();
    live_.emplace(p, std::move(buf));
    if (!reused) held_ += static_cast<int64_t>(rounded);  // a reused buffer is counted already
    if (peak_trace_ && held_ + resident_bytes_ > peak_) describe_peak();
    peak_ = std::max(peak_, held_ + resident_bytes_);
    return p;
  }
  void deallocate(void* p) override {
    if (p == nullptr) return;
    const auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: never happens through Array
    const size_t bytes = it->second.bytes();
    free_.emplace(bytes, std::move(it->second));
    live_.erase(it);
  }
  // Frees a buffer of allocate() at once instead of caching it. The device frees it after the
  // work queued on it (cudaFree/hipFree wait for the device).
  void release(void* p) {
    const auto it = live_.find(p);
    if (it == live_.end()) return;
    held_ -= static_cast<int64_t>(it->second.bytes());
    live_.erase(it);
  }
  // The _sync copy: callers free or refill `host` as soon as this returns (backend.h), which an
  // asynchronous copy leaves to the runtime's handling of pageable memory (CUDA stages it before
  // returning; HIP-CPU reads it when the stream gets there). CUDA waits for the stream before a
  // pageable copy anyway, so the wait costs nothing there.
  void to_device(void* dst, const void* host, size_t bytes) override {
    if (bytes > 0) gpu::copy_to_device_sync(dst, host, bytes, *stream_);
  }
  void to_host(void* host, const void* src, size_t bytes) override {
    if (bytes > 0) gpu::copy_to_host_sync(host, src, bytes, *stream_);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) gpu::copy_device_to_device(dst, src, bytes, *stream_);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes > 0) gpu::fill_bytes(dst, 0, bytes, *stream_);
  }
  void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                 int64_t cols) override {
    if (rows > 0 && cols > 0) gpu::copy_rows_2d(dst, dst_stride, src, src_stride, rows, cols, *stream_);
  }
  void synchronize() override { stream_->synchronize(); }

  const void* resident(const void* host, size_t bytes) override {
    if (bytes == 0) return nullptr;
    auto it = resident_.find(host);
    if (it != resident_.end() && it->second.bytes() == bytes) return it->second.data();
    gpu::DeviceBuffer buf;
    trim_cache_for(bytes);
    try {
      buf = gpu::DeviceBuffer(bytes);
    } catch (const gpu::OutOfMemory&) {
      held_ -= cached_bytes();
      free_.clear();  // give the cached buffers back and try once more, as allocate() does
      try {
        buf = gpu::DeviceBuffer(bytes);
      } catch (const gpu::OutOfMemory&) {
        throw out_of_memory(bytes, "a resident weight tensor");
      }
    }
    gpu::copy_to_device_sync(buf.data(), host, bytes, *stream_);
    resident_bytes_ += static_cast<int64_t>(bytes);
    if (it != resident_.end()) {
      resident_bytes_ -= static_cast<int64_t>(it->second.bytes());
      it->second = std::move(buf);
      return it->second.data();
    }
    peak_ = std::max(peak_, held_ + resident_bytes_);
    return resident_.emplace(host, std::move(buf)).first->second.data();
  }
  void forget(const void* host) override {
    const auto it = resident_.find(host);
    if (it == resident_.end()) return;
    stream_->synchronize();  // queued kernels may still read it
    resident_bytes_ -= static_cast<int64_t>(it->second.bytes());
    resident_.erase(it);
  }
  int64_t resident_bytes() const override { return resident_bytes_; }
  // Free device memory plus what this backend's buffer cache holds and could hand out again.
  int64_t free_memory() const override { return gpu::device_info(index_).free_bytes + cached_bytes(); }
  int64_t peak_bytes() const override { return peak_; }
  void plan_memory(int64_t bytes) override { planned_ = std::max(planned_, bytes); }

  // ---- ops
  void embedding(float* x, const ops::StoredMatrix& table, const int32_t* ids, int64_t N) override {
    const auto timed = prof_->time("embedding");
    require_dtype(table.dtype, "the embedding table");
    const auto* ids_d = stage(ids_stage_, ids, N);
    gpu::embedding_rows(table.dtype, matrix(table), ids_d, x, N, table.cols, table.rows, *stream_);
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                       float eps) override {
    const auto timed = prof_->time("rmsnorm_forward");
    gpu::rmsnorm_forward(y, rstd, x, vec(w, C), N, C, eps, *stream_);
  }
  void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) override {
    const auto timed = prof_->time("rope_forward");
    gpu::rope_forward(x, cos, sin, N, H, HD, *stream_);
  }
  void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) override {
    const auto timed = prof_->time("swiglu_forward");
    gpu::swiglu_forward(h, gate, up, n, *stream_);
  }
  void add_inplace(float* y, const float* x, int64_t n) override {
    const auto timed = prof_->time("add_inplace");
    gpu::add_inplace(y, x, n, *stream_);
  }
  void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const ops::DropoutSite& d) override {
    const auto timed = prof_->time("lora_dropout");
    const int64_t* rows_d = d.rows != nullptr ? stage(rows_stage_, d.rows, N) : nullptr;
    gpu::lora_dropout(xd, x, N, in, ops::dropout::stream_base(d), ops::dropout::threshold(d.p),
                      ops::dropout::keep_scale(d.p), rows_d, d.row0, *stream_);
  }
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const uint8_t* key_valid, const int64_t* seg_start,
                         const ops::AttentionShape& s) override {
    const gpu::AttentionGemmPlan plan =
        gpu::plan_attention_gemm(s.B, s.T, s.past + s.T, s.NH, s.NKV, /*backward=*/false);
    if (gemm_attention_ && plan.use) {
      const auto timed = prof_->time("attention_forward gemm");
      attn_work_.resize_for(*this, static_cast<size_t>(plan.workspace_bytes()));
      gpu::attention_forward_gemm(*blas_, attn_work_.p, static_cast<int64_t>(attn_work_.bytes), out, lse, q, k,
                                  v, key_valid, seg_start, s);
      return;
    }
    if (gemm_attention_ && s.T <= gpu::kSplitMaxQueries && seg_start == nullptr) {
      const auto timed = prof_->time("attention_forward split");
      attn_work_.resize_for(*this, static_cast<size_t>(gpu::split_attention_workspace_bytes(
                                       s.B, s.T, s.past + s.T, s.NH, s.HD)));
      gpu::attention_forward_split(attn_work_.p, static_cast<int64_t>(attn_work_.bytes), out, lse,
                                   q, k, v, key_valid, s, *stream_);
      return;
    }
    const auto timed = prof_->time("attention_forward");
    gpu::attention_forward(out, lse, q, k, v, key_valid, seg_start, s, *stream_);
  }
  void linear_forward(float* y, const float* x, const ops::StoredMatrix& w, const float* bias,
                      int64_t N) override {
    const auto timed = prof_->time("linear_forward", [&] { return weight_shape(w); });
    if (precision_ == Precision::kBf16) {
      const uint16_t* xb = to_bf16(act_bf16_, x, N * w.cols);  // (N, cols)
      if (stored_gemv(w, N)) {
        // Decode steps over a stored type: each weight decoded where it is used (gemv.cu).
        gpu::gemv_stored_bf16(y, w.rows, xb, w.dtype, matrix(w), N, w.rows, w.cols, *stream_);
      } else {
        linear_bf16(y, xb, w, N);
      }
    } else {
      const float* wd = nullptr;
      for (Chunk ch(*this, w); ch.next(wd);)
        // y[:, r0:r1) (N, r1 - r0) = x (N, cols) . W[r0:r1)^T
        gemm(Trans::kNo, Trans::kYes, N, ch.r1 - ch.r0, w.cols, 1.0f, x, w.cols, wd, w.cols, 0.0f,
             y + ch.r0, w.rows);
    }
    if (bias != nullptr) gpu::add_bias(y, vec(bias, w.rows), N, w.rows, *stream_);
  }
  // A decode step's q/k/v or gate/up at bf16: x rounded once, and the members over stored types
  // in one GEMV launch (gemv_stored_bf16_group; each element the bits of its own call). Anything
  // else: one member at a time, as the base class does.
  void linear_forward_group(const ops::LinearOut* outs, int n, const float* x,
                            int64_t N) override {
    bool grouped = precision_ == Precision::kBf16 && n > 0 && n <= gpu::kGemvMaxMembers;
    for (int i = 0; i < n && grouped; ++i)
      grouped = outs[i].w->cols == outs[0].w->cols && stored_gemv(*outs[i].w, N);
    if (!grouped) {
      Backend::linear_forward_group(outs, n, x, N);
      return;
    }
    const ops::StoredMatrix& w0 = *outs[0].w;
    const auto timed = prof_->time("linear_forward_group",
                                   [&] { return weight_shape(w0) + " x" + std::to_string(n); });
    const uint16_t* xb = to_bf16(act_bf16_, x, N * w0.cols);  // (N, cols)
    std::array<gpu::GemvMember, gpu::kGemvMaxMembers> members{};
    for (int i = 0; i < n; ++i) {
      const ops::StoredMatrix& w = *outs[i].w;
      members[static_cast<size_t>(i)] = {outs[i].y, w.rows, w.dtype, matrix(w), w.rows};
    }
    gpu::gemv_stored_bf16_group(members.data(), n, xb, N, w0.cols, *stream_);
    for (int i = 0; i < n; ++i)
      if (outs[i].bias != nullptr)
        gpu::add_bias(outs[i].y, vec(outs[i].bias, outs[i].w->rows), N, outs[i].w->rows, *stream_);
  }
  void linear_backward_input(float* dx, const float* dy, const ops::StoredMatrix& w, int64_t N,
                             bool accumulate) override {
    const auto timed = prof_->time("linear_backward_input", [&] { return weight_shape(w); });
    if (precision_ == Precision::kBf16) {
      const uint16_t* dyb = to_bf16(act_bf16_, dy, N * w.rows);  // (N, rows)
      const uint16_t* wb = nullptr;
      for (Chunk ch(*this, w); ch.next_bf16(wb);)
        gpu::gemm_bf16(*blas_, false, false, N, w.cols, ch.r1 - ch.r0, 1.0f, dyb + ch.r0, w.rows, wb, w.cols,
                       accumulate || ch.r0 > 0 ? 1.0f : 0.0f, dx, w.cols);
      return;
    }
    const float* wd = nullptr;
    for (Chunk ch(*this, w); ch.next(wd);) {
      // dx (N, cols) (+)= dy[:, r0:r1) (N, r1 - r0) . W[r0:r1) (r1 - r0, cols)
      const float beta = accumulate || ch.r0 > 0 ? 1.0f : 0.0f;
      gemm(Trans::kNo, Trans::kNo, N, w.cols, ch.r1 - ch.r0, 1.0f, dy + ch.r0, w.rows, wd, w.cols,
           beta, dx, w.cols);
    }
  }
  void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) override {
    const auto timed = prof_->time("undo_gguf_qk_permutation");
    gpu::undo_gguf_qk_permutation(x, N, H, HD, *stream_);
  }
  void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) override {
    const auto timed = prof_->time("redo_gguf_qk_permutation");
    gpu::redo_gguf_qk_permutation(x, N, H, HD, *stream_);
  }
  void rmsnorm_backward(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                        int64_t N, int64_t C) override {
    const auto timed = prof_->time("rmsnorm_backward");
    gpu::rmsnorm_backward(dx, nullptr, dy, x, vec(w, C), rstd, N, C, *stream_);
  }
  void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) override {
    const auto timed = prof_->time("rope_backward");
    gpu::rope_backward(dx, cos, sin, N, H, HD, *stream_);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                       int64_t n) override {
    const auto timed = prof_->time("swiglu_backward");
    gpu::swiglu_backward(dgate, dup, dh, gate, up, n, *stream_);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                          const float* lse, const float* q, const float* k, const float* v,
                          const uint8_t* key_valid, const int64_t* seg_start,
                          const ops::AttentionShape& s) override {
    if (out == nullptr || lse == nullptr)
      throw Internal("gpu attention_backward needs the forward's output and logsumexp");
    const gpu::AttentionGemmPlan plan =
        gpu::plan_attention_gemm(s.B, s.T, s.past + s.T, s.NH, s.NKV, /*backward=*/true);
    if (gemm_attention_ && plan.use) {
      const auto timed = prof_->time("attention_backward gemm");
      attn_work_.resize_for(*this, static_cast<size_t>(plan.workspace_bytes()));
      gpu::attention_backward_gemm(*blas_, attn_work_.p, static_cast<int64_t>(attn_work_.bytes), dq, dk, dv,
                                   dout, out, lse, q, k, v, key_valid, seg_start, s);
      return;
    }
    const auto timed = prof_->time("attention_backward");
    gpu::attention_backward(dq, dk, dv, dout, out, lse, q, k, v, key_valid, seg_start, s, *stream_);
  }
  ops::LossSum cross_entropy_loss_backward(float* dlogits, const float* logits, const int64_t* targets,
                                           int64_t N, int64_t V, float scale) override {
    const auto timed = prof_->time("cross_entropy_loss_backward");
    const ops::LossSum sum = losses(logits, targets, N, V);  // before dlogits may overwrite logits
    gpu::cross_entropy_backward(dlogits, logits, stage(targets_stage_, targets, N), N, V, scale, *stream_);
    return sum;
  }
  ops::LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N, int64_t V) override {
    const auto timed = prof_->time("cross_entropy_sum");
    return losses(logits, targets, N, V);
  }
  void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) override {
    const auto timed = prof_->time("gather_rows");
    if (M == 0) return;
    const int64_t* rows_d = stage(rows_stage_, rows, M);
    if (dst != src) {
      gpu::gather_rows(dst, src, rows_d, M, C, *stream_);
      return;
    }
    // In place: threads would read rows others are writing; go through a temporary.
    tmp_.resize_for(*this, static_cast<size_t>(M * C) * sizeof(float));
    auto* t = static_cast<float*>(tmp_.p);
    gpu::gather_rows(t, src, rows_d, M, C, *stream_);
    copy(dst, t, static_cast<size_t>(M * C) * sizeof(float));
  }
  void scatter_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) override {
    const auto timed = prof_->time("scatter_rows");
    if (M == 0) return;
    gpu::scatter_rows(dst, src, stage(rows_stage_, rows, M), M, C, *stream_);
  }
  void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) override {
    const auto timed = prof_->time("gemm");
    gpu::gemm(*blas_, ta == Trans::kYes, tb == Trans::kYes, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  double sum_squares(const float* x, int64_t n, double init) override {
    const auto timed = prof_->time("sum_squares");
    return gpu::sum_squares(x, n, init, *stream_);
  }
  void scale(float* x, int64_t n, float s) override {
    const auto timed = prof_->time("scale");
    gpu::scale_inplace(x, s, n, *stream_);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const ops::AdamWHyper& h, double lr,
                    int64_t step) override {
    const auto timed = prof_->time("adamw_update");
    gpu::adamw_update(p, g, m, v, n, gpu::AdamWScalars{lr, h.beta1, h.beta2, h.eps, h.weight_decay}, step, *stream_);
  }

 private:
  // A device buffer that only grows (staging of host index lists, temporaries).
  struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
    GpuBackend* owner = nullptr;
    void resize_for(GpuBackend& be, size_t n) {
      if (n <= bytes) return;
      // The outgrown buffer goes back to the device, not to the cache: the dequantization
      // workspace grows q/k/v/o -> MLP -> lm_head, and on the H200 the two buffers it left in
      // the cache (1.3 + 3.4 MiB for SmolLM2) put generate's peak 4.7 MiB above its plan
      // (model/inference_plan.h plans one workspace).
      if (p != nullptr) be.release(p);
      p = be.allocate(n);
      bytes = n;
      owner = &be;
    }
  };

  // Whether a bf16 product of N tokens with w takes the stored-type GEMV: decode steps over any
  // type but BF16 (whose rows gemv_bf16 reads as they are); the type must be one the GPU decodes.
  bool stored_gemv(const ops::StoredMatrix& w, int64_t N) const {
    if (!gemv_ || N > gpu::kGemvMaxTokens || w.dtype == DType::BF16 || w.cols % 8 != 0)
      return false;
    require_dtype(w.dtype, "a weight matrix");
    return true;
  }

  // y (N, rows) = x (N, cols, bf16) . W^T at bf16 through the rows as bf16 (Chunk): gemv_bf16 for
  // decode steps, GemmEx otherwise.
  void linear_bf16(float* y, const uint16_t* xb, const ops::StoredMatrix& w, int64_t N) {
    const uint16_t* wb = nullptr;
    for (Chunk ch(*this, w); ch.next_bf16(wb);) {
      if (gemv_ && N <= gpu::kGemvMaxTokens)  // decode steps: a read of the weights (gemv.cu)
        gpu::gemv_bf16(y + ch.r0, w.rows, xb, wb, N, ch.r1 - ch.r0, w.cols, *stream_);
      else
        gpu::gemm_bf16(*blas_, false, true, N, ch.r1 - ch.r0, w.cols, 1.0f, xb, w.cols, wb,
                       w.cols, 0.0f, y + ch.r0, w.rows);
    }
  }

  // x (n) rounded to bf16 into `s` (f32_to_bf16: round to nearest even, as the CPU's).
  const uint16_t* to_bf16(Scratch& s, const float* x, int64_t n) {
    s.resize_for(*this, static_cast<size_t>(n) * sizeof(uint16_t));
    auto* out = static_cast<uint16_t*>(s.p);
    gpu::f32_to_bf16(out, x, n, *stream_);
    return out;
  }

  template <typename T>
  const T* stage(Scratch& s, const T* host, int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    s.resize_for(*this, bytes);
    to_device(s.p, host, bytes);
    return static_cast<const T*>(s.p);
  }

  // Per-row cross-entropies on the device, summed on the host in double in row order (as the CPU
  // sums its rows); the count is that of the targets >= 0.
  ops::LossSum losses(const float* logits, const int64_t* targets, int64_t N, int64_t V) {
    ops::LossSum sum;
    if (N == 0) return sum;
    loss_rows_.resize_for(*this, static_cast<size_t>(N) * sizeof(float));
    auto* rows = static_cast<float*>(loss_rows_.p);
    gpu::cross_entropy_forward(rows, logits, stage(targets_stage_, targets, N), N, V, *stream_);
    std::vector<float> host(static_cast<size_t>(N));
    to_host(host.data(), rows, host.size() * sizeof(float));
    for (int64_t n = 0; n < N; ++n)
      if (targets[n] >= 0) {
        sum.sum += static_cast<double>(host[static_cast<size_t>(n)]);
        ++sum.count;
      }
    return sum;
  }

  // The device ran out of memory allocating `bytes` for `what`: a user's sizing problem, said
  // with the numbers and what shrinks them, instead of the runtime's bare error code.
  BadInput out_of_memory(size_t bytes, const std::string& what) const {
    const auto mib = [](double b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
      return std::string(buf);
    };
    const gpu::DeviceInfo now = gpu::device_info(index_);
    return BadInput("gpu:" + std::to_string(index_) + " is out of memory: " + mib(static_cast<double>(bytes)) +
                    " asked for " + what + ", " + mib(static_cast<double>(now.free_bytes)) + " free of " +
                    mib(static_cast<double>(now.total_bytes)) + "; this process holds " +
                    mib(static_cast<double>(resident_bytes_ + held_)) + " (resident weights " +
                    mib(static_cast<double>(resident_bytes_)) + ", working buffers " + mib(static_cast<double>(held_)) +
                    "). Lower the batch (micro_batch_size, sequence_len) or the context "
                    "(--ctx-size), turn on gradient_checkpointing, or quantize the base (adapter: qlora, "
                    "--base-quant nf4); `medtune train --dry-run` prints a training run's device plan");
  }

  // " 32000x4096 BF16": the profile's key of a linear op (gpu/op_profile.h).
  static std::string weight_shape(const ops::StoredMatrix& w) {
    return " " + std::to_string(w.rows) + "x" + std::to_string(w.cols) + " " + std::string(dtype_name(w.dtype));
  }

  // MEDTUNE_GPU_PEAK=1: what the backend holds at each new peak, by buffer size (live and
  // cached), the last one printed at exit: where a plan and a measured peak part (docs/gpu.md).
  void describe_peak() {
    std::map<size_t, std::pair<int, int>, std::greater<>> by_size;  // bytes -> live, cached
    for (const auto& [p, buf] : live_) ++by_size[buf.bytes()].first;
    for (const auto& [bytes, buf] : free_) ++by_size[bytes].second;
    const auto mib = [](double b) { return b / (1024.0 * 1024.0); };
    char line[160];
    std::snprintf(line, sizeof line,
                  "gpu:%d peak %.2f MiB: resident %.2f, buffers %.2f (cached %.2f)\n", index_,
                  mib(static_cast<double>(held_ + resident_bytes_)),
                  mib(static_cast<double>(resident_bytes_)), mib(static_cast<double>(held_)),
                  mib(static_cast<double>(cached_bytes())));
    peak_text_ = line;
    for (const auto& [bytes, n] : by_size) {
      std::snprintf(line, sizeof line, "  %12.3f MiB x %d live, %d cached\n",
                    mib(static_cast<double>(bytes)), n.first, n.second);
      peak_text_ += line;
    }
  }

  // Cached buffers go back to the device, largest first, while taking `bytes` more would hold
  // more than the largest plan (plan_memory). cudaFree/hipFree wait for the device: this runs
  // only where the plan is reached, not on every miss.
  void trim_cache_for(size_t bytes) {
    if (planned_ <= 0) return;
    while (!free_.empty() && held_ + resident_bytes_ + static_cast<int64_t>(bytes) > planned_) {
      const auto largest = std::prev(free_.end());
      held_ -= static_cast<int64_t>(largest->first);
      free_.erase(largest);
    }
  }

  int64_t cached_bytes() const {
    int64_t cached = 0;
    for (const auto& [bytes, buf] : free_) cached += static_cast<int64_t>(bytes);
    return cached;
  }

  void require_dtype(DType t, const char* what) const {
    if (!gpu::dequantize_supported(t))
      throw BadInput(std::string(what) + " is stored as " + std::string(dtype_name(t)) +
                     ", which the GPU backend cannot read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                     "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and NF4 are supported); "
                     "convert the model or use --device cpu");
  }
  const uint8_t* matrix(const ops::StoredMatrix& m) {
    return static_cast<const uint8_t*>(resident(m.data, static_cast<size_t>(m.rows * m.row_bytes())));
  }
  const float* vec(const float* host, int64_t n) {
    return static_cast<const float*>(resident(host, static_cast<size_t>(n) * sizeof(float)));
  }

  // The rows of a stored matrix as fp32 device memory, a chunk at a time: F32 in place (one
  // chunk), any other dtype dequantized into the workspace.
  class Chunk {
   public:
    Chunk(GpuBackend& be, const ops::StoredMatrix& w) : be_(be), w_(w) {
      be.require_dtype(w.dtype, "a weight matrix");
      dev_ = be.matrix(w);
      // F32 at fp32 is read in place, one chunk; anything that is expanded goes a chunk at a time.
      const bool in_place = w.dtype == DType::F32 && be.precision_ == Precision::kFp32;
      rows_per_ = in_place ? w.rows : std::max<int64_t>(1, kChunkElems / std::max<int64_t>(1, w.cols));
    }
    bool next(const float*& wd) {
      if (r1 >= w_.rows) return false;
      r0 = r1;
      r1 = std::min(w_.rows, r0 + rows_per_);
      if (w_.dtype == DType::F32) {
        wd = reinterpret_cast<const float*>(dev_) + r0 * w_.cols;
        return true;
      }
      const int64_t n = (r1 - r0) * w_.cols;
      be_.work_.resize_for(be_, static_cast<size_t>(std::min(w_.rows, rows_per_) * w_.cols) * sizeof(float));
      auto* out = static_cast<float*>(be_.work_.p);
      gpu::dequantize(w_.dtype, dev_ + r0 * w_.row_bytes(), out, n, *be_.stream_);
      wd = out;
      return true;
    }
    // The same rows as bf16: a BF16 matrix as stored, any other dtype dequantized (next) and
    // rounded.
    bool next_bf16(const uint16_t*& wb) {
      if (w_.dtype == DType::BF16) {
        if (r1 >= w_.rows) return false;
        r0 = r1;
        r1 = w_.rows;  // one chunk: nothing to expand
        wb = reinterpret_cast<const uint16_t*>(dev_);
        return true;
      }
      const float* wd = nullptr;
      if (!next(wd)) return false;
      wb = be_.to_bf16(be_.work_bf16_, wd, (r1 - r0) * w_.cols);
      return true;
    }
    int64_t r0 = 0, r1 = 0;

   private:
    GpuBackend& be_;
    const ops::StoredMatrix& w_;
    const uint8_t* dev_ = nullptr;
    int64_t rows_per_ = 0;
  };

  int index_;
  Precision precision_;
  gpu::DeviceInfo info_;
  std::unique_ptr<gpu::Stream> stream_;
  std::unique_ptr<gpu::Blas> blas_;
  std::unique_ptr<gpu::OpProfile> prof_;  // MEDTUNE_GPU_PROFILE (gpu/op_profile.h)
  // Declared after the stream: destroyed before it.
  std::unordered_map<void*, gpu::DeviceBuffer> live_;
  std::multimap<size_t, gpu::DeviceBuffer> free_;
  std::unordered_map<const void*, gpu::DeviceBuffer> resident_;
  int64_t resident_bytes_ = 0;
  int64_t held_ = 0;  // bytes of live and cached buffers (allocated from the device, not resident)
  int64_t peak_ = 0;  // most of held_ + resident_bytes_ at once
  int64_t planned_ = 0;  // the largest plan_memory() (0: none; the cache is not trimmed)
  bool peak_trace_ = !env_switch("MEDTUNE_GPU_PEAK", "0", "1");  // 1: describe_peak()
  std::string peak_text_;
  Scratch ids_stage_, rows_stage_, targets_stage_, loss_rows_, tmp_, work_, work_bf16_, act_bf16_;
  // The GEMM attention's scores, the split-key kernel's partials (gpu/attention_plan.h).
  Scratch attn_work_;
  // MEDTUNE_GPU_ATTENTION: "gemm" (default: the GEMM attention where its plan applies, the
  // split-key kernel for decode steps) or "tiled" (the tiled kernel for every call, as before
  // session 32).
  bool gemm_attention_ = env_switch("MEDTUNE_GPU_ATTENTION", "gemm", "tiled");
  // MEDTUNE_GPU_GEMV: "on" (default: gpu/gemv.cu for bf16 passes of up to 8 tokens) or "off"
  // (the BLAS's GemmEx for every pass, as before session 33).
  bool gemv_ = env_switch("MEDTUNE_GPU_GEMV", "on", "off");

  // A two-way switch from the environment: unset or `on` gives true, `off` false, anything else
  // is refused with the variable's name and both values.
  static bool env_switch(const char* name, const std::string& on, const std::string& off) {
    const char* e = std::getenv(name);
    const std::string v = e != nullptr ? e : "";
    if (v.empty() || v == on) return true;
    if (v == off) return false;
    throw BadInput(std::string(name) + "=" + v + ": expected " + on + " (the default) or " + off);
  }
};

}  // namespace

std::unique_ptr<Backend> make_gpu_backend(int index, Precision precision) {
  const int n = gpu::device_count();
  if (n == 0)
    throw BadInput("device gpu:" + std::to_string(index) + ": no GPU is visible (" + gpu::no_device_reason() +
                   "); use --device cpu");
  if (index < 0 || index >= n)
    throw BadInput("device gpu:" + std::to_string(index) + ": this machine has " + std::to_string(n) +
                   " GPU(s), gpu:0 to gpu:" + std::to_string(n - 1));
  return std::make_unique<GpuBackend>(index, precision);
}

const char* gpu_toolkit_name() { return gpu::backend_name(); }

}  // namespace medtune::backend
