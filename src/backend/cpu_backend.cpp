// The CPU backend: each op is the fp32 CPU op of src/ops/ (threads, OpenBLAS, dequantizing tiles)
// or an OpenBLAS call, so code written against backend.h computes on the CPU exactly what it did
// when it called those functions directly. Memory is host memory; weights are read in place. At
// precision int8 or bf16 only the linear layers change (ops/linear.h).
#include <cblas.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "backend/backend.h"
#include "backend/host_block_cache.h"
#include "core/error.h"
#include "core/int8_gemm.h"
#include "core/quant.h"
#include "core/quant_int8.h"
#include "ops/attention_bf16.h"
#include "ops/backward.h"
#include "ops/lm_head_loss.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace medtune::backend {

namespace {


CBLAS_TRANSPOSE blas_trans(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

int blas_int(int64_t v, const char* what) {
  if (v < 0 || v > INT32_MAX) throw Internal(std::string("cpu gemm: ") + what + " does not fit OpenBLAS's int");
  return static_cast<int>(v);
}

class CpuBackend final : public Backend {
 public:
  // batch_invariant: linear_forward and gemm give each row of their result bit for bit the same
  // whatever the number of rows (ops::linear_forward_batch_invariant), and attention each query
  // (fixed_order_attention), for the server's batches.
  explicit CpuBackend(Precision p, bool batch_invariant = false) : precision_(p), invariant_(batch_invariant) {}
  Device device() const override { return {}; }
  Precision precision() const override { return precision_; }

  std::string describe() const override {
    int threads = 1;
#if defined(_OPENMP)
    threads = omp_get_max_threads();
#endif
    std::string kernels = invariant_ ? "batch-invariant kernels" : "OpenBLAS";
    if (precision_ == Precision::kBf16) kernels = ops::bf16_kernel_name(ops::bf16_kernel());
    if (precision_ == Precision::kInt8)
      kernels = std::string(isa_name(int8::kernel_isa())) + " int8 kernels" +
                (int8::gemm_available()
                     ? std::string(" + ") + isa_name(int8::gemm_isa()) + " GEMM from " +
                           std::to_string(ops::int8_gemm_min_tokens(DType::Q8_0)) +
                           " tokens (Q4_0, Q4_1: " +
                           std::to_string(ops::int8_gemm_min_tokens(DType::Q4_1)) + ")"
                     : "") +
                " + fixed-order attention over a half KV cache";
    return std::string("cpu (") + precision_name(precision_) + ", " + kernels + ", " + std::to_string(threads) +
           " threads)";
  }

  // Host memory, freed large blocks kept for the next step's same request (host_block_cache.h).
  void* allocate(size_t bytes) override { return bytes == 0 ? nullptr : host_blocks().allocate(bytes); }
  void deallocate(void* p) override { host_blocks().deallocate(p); }
  void to_device(void* dst, const void* host, size_t bytes) override { copy(dst, host, bytes); }
  void to_host(void* host, const void* src, size_t bytes) override { copy(host, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                 int64_t cols) override {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(cols) * sizeof(float));
  }
  void synchronize() override {}

  const void* resident(const void* host, size_t) override { return host; }
  void forget(const void*) override {}
  int64_t resident_bytes() const override { return 0; }
  int64_t free_memory() const override { return 0; }
  int64_t peak_bytes() const override { return 0; }

  void embedding(float* x, const ops::StoredMatrix& table, const int32_t* ids, int64_t N) override {
    for (int64_t n = 0; n < N; ++n) dequantize_row(table.dtype, table.row(ids[n]), x + n * table.cols, table.cols);
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                       float eps) override {
    ops::rmsnorm_forward(y, rstd, x, w, N, C, eps);
  }
  void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) override {
    ops::rope_forward(x, cos, sin, N, H, HD);
  }
  void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) override {
    ops::swiglu_forward(h, gate, up, n);
  }
  void add_inplace(float* y, const float* x, int64_t n) override { ops::add_inplace(y, x, n); }
  void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const ops::DropoutSite& d) override {
    ops::lora_dropout(xd, x, N, in, d);
  }
  void attention_forward(float* out, float* /*lse: the CPU backward recomputes it*/, const float* q,
                         const float* k, const float* v, const uint8_t* key_valid,
                         const int64_t* seg_start, const ops::AttentionShape& s) override {
    // bf16 rounds attention's operands for whole prompts and training batches; a call with a key
    // history (generation after its prompt: a few queries against the cache) keeps fp32's
    // per-query kernel: the bf16 op would round the whole cache again for every token, a second
    // pass over it for two small products (reasoned, not measured).
    if (precision_ == Precision::kBf16 && s.past == 0)
      return ops::attention_forward_bf16(out, q, k, v, key_valid, seg_start, s);
    if (!fixed_order_attention()) return ops::attention_forward(out, q, k, v, key_valid, seg_start, s);
    if (seg_start != nullptr) throw Internal("cpu attention_forward: packed rows on a fixed-order backend");
    ops::attention_forward_fixed_order(out, q, k, v, key_valid, s);
  }
  // The int8 route keeps its caches in half precision: each decode step reads every key and value
  // once, its largest read after the weights. Its activations are already rounded to within 1/254
  // of their block's largest value, a half to within 2^-11 of itself (docs/decisions/
  // cpu-dispatch.md, "A half-precision KV cache at int8").
  DType kv_type() const override { return precision_ == Precision::kInt8 ? DType::F16 : DType::F32; }
  void store_rows_f16(uint16_t* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                      int64_t rows, int64_t cols) override {
    ops::store_rows_f16(dst, dst_stride, src, src_stride, rows, cols);
  }
  void attention_forward_f16(float* out, float* /*lse*/, const float* q, const uint16_t* k,
                             const uint16_t* v, const uint8_t* key_valid, const int64_t* seg_start,
                             const ops::AttentionShape& s) override {
    // Only the fixed-order kernel reads half keys and values; the fp32 paths' caches are F32.
    if (!fixed_order_attention() || seg_start != nullptr)
      throw Internal(
          "cpu attention_forward_f16: a half cache needs the fixed-order attention, without packing");
    ops::attention_forward_fixed_order(out, q, k, v, key_valid, s);
  }
  void linear_forward(float* y, const float* x, const ops::StoredMatrix& w, const float* bias,
                      int64_t N) override {
    if (precision_ == Precision::kInt8 && ops::int8_path(w.dtype))
      ops::linear_forward_int8(y, x, w, bias, N);  // batch-invariant at every N (ops/linear.h)
    else if (precision_ == Precision::kBf16) ops::linear_forward_bf16(y, x, w, bias, N);
    else if (invariant_) ops::linear_forward_batch_invariant(y, x, w, bias, N);
    else ops::linear_forward(y, x, w, bias, N);
  }
  void linear_forward_group(const ops::LinearOut* outs, int n, const float* x, int64_t N) override {
    // The int8 route runs its members in one pass, any member it does not cover one call each;
    // bf16 rounds x once for all of them; fp32 one call each (its fused decode loop gained nothing
    // measurable from a group).
    if (precision_ == Precision::kBf16) return ops::linear_forward_bf16_group(outs, n, x, N);
    if (precision_ != Precision::kInt8) return Backend::linear_forward_group(outs, n, x, N);
    std::array<ops::LinearOut, 8> fused{};
    int nf = 0;
    for (int i = 0; i < n; ++i) {
      if (ops::int8_path(outs[i].w->dtype) && nf < static_cast<int>(fused.size())) fused[static_cast<size_t>(nf++)] = outs[i];
      else linear_forward(outs[i].y, x, *outs[i].w, outs[i].bias, N);
    }
    ops::linear_forward_int8_group(fused.data(), nf, x, N);
  }
  bool linear_swiglu_forward(float* h, const float* x, const ops::StoredMatrix& gate,
                             const ops::StoredMatrix& up, int64_t N) override {
    if (precision_ != Precision::kInt8 || !ops::int8_path(gate.dtype) || !ops::int8_path(up.dtype))
      return false;
    return ops::linear_swiglu_int8(h, x, gate, up, N);
  }
  void linear_backward_input(float* dx, const float* dy, const ops::StoredMatrix& w, int64_t N,
                             bool accumulate) override {
    // int8 is for inference (training refuses it, train_config.cpp), so its backward is fp32.
    if (precision_ == Precision::kBf16) ops::linear_backward_input_bf16(dx, dy, w, N, accumulate);
    else ops::linear_backward_input(dx, dy, w, N, accumulate);
  }
  void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) override {
    ops::undo_gguf_qk_permutation(x, N, H, HD);
  }
  void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) override {
    ops::redo_gguf_qk_permutation(x, N, H, HD);
  }
  void rmsnorm_backward(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                        int64_t N, int64_t C) override {
    ops::rmsnorm_backward(dx, nullptr, dy, x, w, rstd, N, C);
  }
  void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) override {
    ops::rope_backward(dx, cos, sin, N, H, HD);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                       int64_t n) override {
    ops::swiglu_backward(dgate, dup, dh, gate, up, n);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* /*out*/,
                          const float* /*lse*/, const float* q, const float* k, const float* v,
                          const uint8_t* key_valid, const int64_t* seg_start,
                          const ops::AttentionShape& s) override {
    if (precision_ == Precision::kBf16)
      return ops::attention_backward_bf16(dq, dk, dv, dout, q, k, v, key_valid, seg_start, s);
    ops::attention_backward(dq, dk, dv, dout, q, k, v, key_valid, seg_start, s);
  }
  ops::LossSum cross_entropy_loss_backward(float* dlogits, const float* logits, const int64_t* targets,
                                           int64_t N, int64_t V, float scale) override {
    return ops::cross_entropy_loss_backward(dlogits, logits, targets, N, V, scale);
  }
  std::optional<ops::LossSum> lm_head_loss_backward(float* dh, const float* h,
                                                    const ops::StoredMatrix& w,
                                                    const int64_t* targets, int64_t n,
                                                    float scale) override {
    if (precision_ != Precision::kBf16) return std::nullopt;  // fp32 keeps its exact sequence
    return ops::lm_head_loss_backward_bf16(dh, h, w, targets, n, scale);
  }
  ops::LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N, int64_t V) override {
    return ops::cross_entropy_sum(logits, targets, N, V);
  }
  void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) override {
    for (int64_t i = 0; i < M; ++i)
      if (dst + i * C != src + rows[i] * C)
        std::memmove(dst + i * C, src + rows[i] * C, static_cast<size_t>(C) * sizeof(float));
  }
  void scatter_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) override {
    for (int64_t i = 0; i < M; ++i)
      std::memcpy(dst + rows[i] * C, src + i * C, static_cast<size_t>(C) * sizeof(float));
  }
  void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) override {
    if (invariant_)
      return ops::gemm_batch_invariant(ta == Trans::kYes, tb == Trans::kYes, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                       ldc);
    cblas_sgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), blas_int(M, "M"), blas_int(N, "N"),
                blas_int(K, "K"), alpha, A, blas_int(lda, "lda"), B, blas_int(ldb, "ldb"), beta, C,
                blas_int(ldc, "ldc"));
  }
  double sum_squares(const float* x, int64_t n, double init) override { return ops::sum_squares(x, n, init); }
  void scale(float* x, int64_t n, float s) override { ops::scale(x, n, s); }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const ops::AdamWHyper& h, double lr,
                    int64_t step) override {
    ops::adamw_update<float>(p, g, m, v, n, h, lr, step);
  }

 private:
  Precision precision_;
  bool invariant_;

  // Attention whose every query has one order whatever the call's shape (ops.h): on the
  // batch-invariant backend, where a token must not depend on the batch or on where its prompt
  // was cut, and at int8, so that `eval --precision int8` (a question's rows in one call) and an
  // int8 server (the same text in chunks of 128 after a cache) give the same bits. At int8 the
  // linear layers are already per-token invariant (ops/linear.h), and int8's rounding amplifies
  // any other difference (docs/decisions/cpu-dispatch.md). Neither ever packs (training is fp32 or
  // bf16).
  bool fixed_order_attention() const { return invariant_ || precision_ == Precision::kInt8; }
};

}  // namespace

Backend& cpu() {
  static CpuBackend backend(Precision::kFp32);
  return backend;
}

Backend& cpu_int8() {
  static CpuBackend backend(Precision::kInt8);
  return backend;
}

Backend& cpu_bf16() {
  static CpuBackend backend(Precision::kBf16);
  return backend;
}

Backend& batch_invariant(Backend& be) {
  if (!be.device().is_cpu()) return be;
  if (be.precision() == Precision::kBf16)
    throw BadInput("precision bf16 on the CPU has no batch-invariant kernels (oneDNN's results may depend on the "
                   "batch): serve it with --parallel 1, or serve several slots at precision fp32 or int8");
  static CpuBackend fp32(Precision::kFp32, true), int8(Precision::kInt8, true);
  return be.precision() == Precision::kInt8 ? static_cast<Backend&>(int8) : static_cast<Backend&>(fp32);
}

}  // namespace medtune::backend
