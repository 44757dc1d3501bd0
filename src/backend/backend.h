// The backend under the model: where its buffers live and how its ops run.
//
// The decoder (model/layer.cpp, model/llama.cpp), the LoRA side path (model/lora_linear.cpp), the
// training pass, forward and backward (model/train_step.cpp), the scorer and generation are
// written ONCE against this interface; a backend is a device plus the kernels that run there (ggml's ggml_backend and
// CTranslate2's Device are the same idea). The CPU backend (backend/cpu_backend.cpp) forwards each
// call to the fp32 CPU ops (src/ops/) and OpenBLAS, keeping its own scheduling inside them, so that
// every CPU test exercises this code path with the numerics it had before; the GPU backend
// (src/gpu/gpu_backend.cpp, in -DMEDTUNE_GPU builds) runs the kernels of src/gpu/.
//
// Pointers: every activation argument (float*, and the int/uint8 index arrays marked "device") is
// memory of THIS backend (allocate(), Array<T>), and so are gradient accumulators. The ops that
// take frozen weights (StoredMatrix, norm and bias vectors) take their HOST storage (a checkpoint
// mapping, a std::vector) and read the backend's own resident copy (resident()): on the CPU that is
// the same memory, on a GPU a copy made once at load. gemm() takes device pointers only: callers
// pass adapter matrices through resident() themselves (model/lora_linear.cpp). Index lists marked
// "host" are uploaded by the backend itself.
//
// Calls may be asynchronous on a device: results are visible to the host after to_host() (which
// waits) or synchronize(). Shapes use the legend of ops/ops.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backend/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/adamw.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/ops.h"

namespace medtune::backend {

// A row-major matrix operand of gemm(): trans = use its transpose.
enum class Trans : bool { kNo = false, kYes = true };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // The arithmetic of linear_forward and linear_backward_input (device.h); every other op, the
  // general gemm (adapters) included, is fp32.
  virtual Precision precision() const = 0;
  // One line for logs and reports: "cpu (OpenBLAS 0.3.21, 2 threads)", "cuda:0 NVIDIA H200 ...".
  virtual std::string describe() const = 0;

  // ---- memory (bytes; contents of new memory are unspecified)
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  // Reads `host` before it returns: the caller may reuse or free it at once.
  virtual void to_device(void* dst, const void* host, size_t bytes) = 0;
  virtual void to_host(void* host, const void* src, size_t bytes) = 0;  // waits for the result
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  // dst[r, 0:cols) = src[r, 0:cols) for r < rows; strides and cols in floats.
  virtual void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                         int64_t rows, int64_t cols) = 0;
  virtual void synchronize() = 0;

  // This device's copy of `bytes` bytes of frozen host data (weights, norms, biases, adapter
  // matrices at inference). CPU: `host` itself. GPU: uploaded on first use and cached by address
  // until forget(host); the host data must not change meanwhile.
  virtual const void* resident(const void* host, size_t bytes) = 0;
  virtual void forget(const void* host) = 0;
  // Bytes this backend holds resident (0 on the CPU, which maps the checkpoint).
  virtual int64_t resident_bytes() const = 0;
  // Bytes free in the device's own memory now; 0 for the CPU (host memory: see train/memory_plan.h).
  virtual int64_t free_memory() const = 0;
  // The most device memory this backend has held at once (resident weights, live buffers and its
  // cache of freed ones), for benchmarks and flat-memory checks; 0 for the CPU.
  virtual int64_t peak_bytes() const = 0;
  // A plan's total (bytes, counted as peak_bytes counts them): the memory plans of training,
  // scoring, generate and serve (train/memory_plan.h, model/inference_plan.h) before their first
  // pass. A device backend keeps what it holds within the largest plan it was told: before it
  // takes a new buffer past it, it gives back the freed ones it keeps for reuse (largest first),
  // so that its peak is what the passes hold live, not that plus freed buffers of other sizes
  // (a forward's, then a loss head's, or a prompt's beside a decode step's). A bound on the cache
  // only: live buffers past it are still allocated. The CPU ignores it (its block cache has its
  // own bound, backend/host_block_cache.h).
  virtual void plan_memory(int64_t bytes) { (void)bytes; }

  // ---- ops (semantics, shapes and aliasing as the CPU ops named in each comment)
  // x (N, C) = rows ids[n] of `table` (V, C) in its stored dtype, dequantized. ids: host, checked
  // by the caller to lie in [0, V).
  virtual void embedding(float* x, const ops::StoredMatrix& table, const int32_t* ids, int64_t N) = 0;
  // ops::rmsnorm_forward; w: host (C).
  virtual void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N,
                               int64_t C, float eps) = 0;
  // ops::rope_forward; cos, sin: device (N, HD/2).
  virtual void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H,
                            int64_t HD) = 0;
  virtual void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  // ops::lora_dropout: xd (N, in) = x (N, in) under the mask of d, kept elements scaled by
  // 1/(1-p); xd may be x. d.rows: host (N), or null. Every backend draws the same mask bits.
  virtual void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const ops::DropoutSite& d) = 0;
  // ops::attention_forward; key_valid (B, Smax) and seg_start (B, T): device, or null.
  // lse (B, T, NH): each query row's logsumexp, kept for attention_backward, or null. Backends
  // whose backward recomputes the softmax (the CPU) leave it unwritten.
  virtual void attention_forward(float* out, float* lse, const float* q, const float* k,
                                 const float* v, const uint8_t* key_valid, const int64_t* seg_start,
                                 const ops::AttentionShape& s) = 0;
  // ---- half-precision KV caches (model/kv_cache.h), for backends whose kv_type() is F16
  // The element type of the KV caches this backend's models make: F32, or F16 where keys and
  // values are kept in half precision (the CPU's int8 route: half the bytes that each decode step
  // reads, as llama.cpp's default cache).
  virtual DType kv_type() const { return DType::F32; }
  // copy_rows into a half cache: ops::store_rows_f16. Strides and cols in elements.
  virtual void store_rows_f16(uint16_t* /*dst*/, int64_t /*dst_stride*/, const float* /*src*/,
                              int64_t /*src_stride*/, int64_t /*rows*/, int64_t /*cols*/) {
    throw Internal(describe() + ": no half-precision KV cache on this backend");
  }
  // attention_forward over a half cache (k, v: binary16 bits; no packing).
  virtual void attention_forward_f16(float* /*out*/, float* /*lse*/, const float* /*q*/,
                                     const uint16_t* /*k*/, const uint16_t* /*v*/,
                                     const uint8_t* /*key_valid*/, const int64_t* /*seg_start*/,
                                     const ops::AttentionShape& /*s*/) {
    throw Internal(describe() + ": no half-precision KV cache on this backend");
  }
  // ops::linear_forward: y (N, rows) = x (N, cols) . W^T + bias; W and bias: host.
  virtual void linear_forward(float* y, const float* x, const ops::StoredMatrix& w,
                              const float* bias, int64_t N) = 0;
  // linear_forward of each of n members that read the same x (q, k and v; gate and up), with the
  // same values as n calls; a backend may run them as one pass (the CPU's int8 route: x quantized
  // once, one threaded loop over every member's rows). Members' W and bias: host, equal cols.
  virtual void linear_forward_group(const ops::LinearOut* outs, int n, const float* x, int64_t N) {
    for (int i = 0; i < n; ++i) linear_forward(outs[i].y, x, *outs[i].w, outs[i].bias, N);
  }
  // h (N, F) = swiglu_forward of x·gateᵀ and x·upᵀ (gate and up: F rows, no bias) in one pass,
  // where this backend has one for this call (the CPU's int8 route at prompt sizes:
  // ops::linear_swiglu_int8, the values of linear_forward_group then swiglu_forward without the
  // products in memory): true. false, writing nothing, where it has none: the caller runs those
  // two.
  virtual bool linear_swiglu_forward(float* /*h*/, const float* /*x*/,
                                     const ops::StoredMatrix& /*gate*/,
                                     const ops::StoredMatrix& /*up*/, int64_t /*N*/) {
    return false;
  }
  // ops::linear_backward_input: dx (N, cols) (+)= dy (N, rows) . W; W: host.
  virtual void linear_backward_input(float* dx, const float* dy, const ops::StoredMatrix& w,
                                     int64_t N, bool accumulate) = 0;
  // ops::undo_gguf_qk_permutation / its inverse, in place: x (N, H, HD).
  virtual void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) = 0;
  virtual void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) = 0;
  // dst (M, C): dst[i] = src[rows[i]]; rows: host (M), in [0, rows of src). dst may be src only
  // to compact rows in place, with rows ascending (rows[i] >= i).
  virtual void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) = 0;
  // dst[rows[i]] = src[i] for i < M; rows: host (M), distinct; dst and src do not overlap.
  virtual void scatter_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) = 0;
  // ---- backward ops (ops/backward.h; base weights frozen, so no weight gradients here)
  // ops::rmsnorm_backward with dw = null; w: host (C).
  virtual void rmsnorm_backward(float* dx, const float* dy, const float* x, const float* w,
                                const float* rstd, int64_t N, int64_t C) = 0;
  virtual void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H,
                             int64_t HD) = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                               const float* up, int64_t n) = 0;
  // ops::attention_backward (training: past = 0). out and lse: the forward's output and logsumexp
  // (attention_forward), which a backend may use instead of recomputing the softmax statistics.
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const uint8_t* key_valid, const int64_t* seg_start,
                                  const ops::AttentionShape& s) = 0;
  // ops::cross_entropy_loss_backward / ops::cross_entropy_sum over logits (N, V) on this backend;
  // targets: host (N), -100 (any negative) = ignored. The sums come back to the host.
  virtual ops::LossSum cross_entropy_loss_backward(float* dlogits, const float* logits,
                                                   const int64_t* targets, int64_t N, int64_t V,
                                                   float scale) = 0;
  virtual ops::LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N,
                                         int64_t V) = 0;
  // Training's loss head as one op, where this backend has one (the CPU at bf16, both kernels:
  // ops::lm_head_loss_backward_bf16, no (n, V) logits in memory): dh (n, C) = the gradient of
  // scale·Σ cross-entropy(h·Wᵀ, targets) to h (n, C), and the losses' sum. W: the lm_head, host;
  // targets: host (n). nullopt, writing nothing, where it has none: the caller then runs
  // linear_forward, cross_entropy_loss_backward and linear_backward_input over the logits.
  virtual std::optional<ops::LossSum> lm_head_loss_backward(float* /*dh*/, const float* /*h*/,
                                                            const ops::StoredMatrix& /*w*/,
                                                            const int64_t* /*targets*/,
                                                            int64_t /*n*/, float /*scale*/) {
    return std::nullopt;
  }

  // C (M, N) = alpha op(A) op(B) + beta C, row-major fp32 (cblas_sgemm's contract: beta = 0 never
  // reads C). A, B, C: device, with leading dimensions lda, ldb, ldc in elements. Adapter matrices
  // reach it through resident().
  virtual void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) = 0;

  // ---- the optimizer step (ops/adamw.h) on trainable state in this backend's memory
  // init + the sum of x[i]^2 in double, returned to the host. CPU: ops::sum_squares (one running
  // sum in index order, so chaining calls gives train::global_grad_norm's bits). A GPU: double
  // partial sums added in a fixed tree (the same result on every run, not the CPU's last bits).
  virtual double sum_squares(const float* x, int64_t n, double init) = 0;
  // ops::scale: x[i] *= s.
  virtual void scale(float* x, int64_t n, float s) = 0;
  // ops::adamw_update<float>: p, m, v updated in place from g; bit-identical on every backend.
  virtual void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const ops::AdamWHyper& h,
                            double lr, int64_t step) = 0;
};

// The CPU backend, shared by every caller (it holds no per-call state: each op's scratch is the
// calling thread's, so row shards may call it from several threads at once).
Backend& cpu();
// The CPU backend on the int8 route (precision int8: ops::linear_forward_int8); every other op
// as cpu().
Backend& cpu_int8();
// The CPU backend at precision bf16 (ops::linear_forward_bf16 and linear_backward_input_bf16:
// oneDNN on CPUs with native bf16, widened SGEMM elsewhere); every other op as cpu().
Backend& cpu_bf16();

// The twin of a CPU backend (cpu() or cpu_int8()) whose linear_forward and gemm are batch-invariant:
// row n of their result is bit for bit the same whatever else is in the batch (ops/linear.h), so
// that the server's requests get the same logits alone or batched (serve/engine.h). Slower for
// long prompts than OpenBLAS. The int8 route's products are batch-invariant as they are (the GEMM
// and the row kernels give a token the same bits, ops/linear.h) and are kept for the dtypes they
// cover. BadInput for the CPU at bf16, which has no batch-invariant kernels. A GPU
// backend is returned as it is: its GEMMs are NOT known to be batch-invariant (cuBLAS may pick
// another algorithm per shape).
Backend& batch_invariant(Backend& be);

// The backend for `d` computing at `p`: the CPU one, or the GPU backend of this build for device
// d.index, created on first use and kept for the life of the process (one per device and
// precision). BadInput when this build has no GPU backend (naming how to build one), the device
// does not exist, or a GPU is asked for int8.
Backend& for_device(const Device& d, Precision p = Precision::kFp32);

// Whether this build has a GPU backend compiled in, and its name ("cuda", "hip") or "".
bool gpu_compiled();
const char* gpu_backend_name();

}  // namespace medtune::backend
