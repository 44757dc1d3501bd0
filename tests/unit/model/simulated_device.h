// A backend that behaves like a device with its own memory, computed by the CPU backend: what
// checks, on a machine without a GPU, that the model code keeps to the backend's memory rules
// (backend/backend.h) as the GPU backend needs them.
//  - Its memory is separate: allocate() hands out fresh host blocks, poisoned with NaN bytes
//    (a read of anything never written shows up as NaN in the outputs), and every op checks that
//    each activation pointer lies inside one of its live blocks, and each weight pointer outside
//    them (weights are passed as host storage).
//  - Weights reach the ops only through resident(): it copies them into its own memory, as a GPU
//    upload does, and the ops compute on that copy, so a weight read around resident() would read
//    the host copy and a stale one after forget() would be caught by the address checks.
// Any violation throws std::logic_error naming the op and the argument.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/backend.h"

namespace medtune::testing {

class SimulatedDevice final : public backend::Backend {
 public:
  ~SimulatedDevice() override {
    for (auto& [host, copy] : resident_) std::free(copy.p);
  }
  backend::Device device() const override { return {backend::DeviceKind::kGpu, 7}; }
  backend::Precision precision() const override { return backend::Precision::kFp32; }
  std::string describe() const override { return "simulated device (CPU arithmetic)"; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = std::malloc(bytes);
    std::memset(p, 0xFF, bytes);  // NaN in every float
    blocks_[reinterpret_cast<uintptr_t>(p)] = bytes;
    ++allocations_;
    live_bytes_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, live_bytes_);
    return p;
  }
  void deallocate(void* p) override {
    if (p == nullptr) return;
    const auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
    if (it == blocks_.end()) fail("deallocate", "a pointer it did not allocate");
    live_bytes_ -= static_cast<int64_t>(it->second);
    blocks_.erase(it);
    std::free(p);
  }
  void to_device(void* dst, const void* host, size_t bytes) override {
    dev("to_device", "dst", dst, bytes);
    host_only("to_device", "host", host);
    cpu().copy(dst, host, bytes);
  }
  void to_host(void* host, const void* src, size_t bytes) override {
    dev("to_host", "src", src, bytes);
    host_only("to_host", "host", host);
    cpu().copy(host, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    dev("copy", "dst", dst, bytes);
    dev("copy", "src", src, bytes);
    cpu().copy(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    dev("zero", "dst", dst, bytes);
    cpu().zero(dst, bytes);
  }
  void copy_rows(float* dst, int64_t ds, const float* src, int64_t ss, int64_t rows, int64_t cols) override {
    if (rows == 0) return;
    dev("copy_rows", "dst", dst, f((rows - 1) * ds + cols));
    dev("copy_rows", "src", src, f((rows - 1) * ss + cols));
    cpu().copy_rows(dst, ds, src, ss, rows, cols);
  }
  void synchronize() override {}

  const void* resident(const void* host, size_t bytes) override {
    host_only("resident", "host", host);
    auto it = resident_.find(host);
    if (it != resident_.end() && it->second.bytes == bytes) return it->second.p;
    if (it != resident_.end()) forget(host);
    void* p = allocate(bytes);
    std::memcpy(p, host, bytes);
    resident_[host] = {p, bytes};
    return p;
  }
  void forget(const void* host) override {
    const auto it = resident_.find(host);
    if (it == resident_.end()) return;
    deallocate(it->second.p);
    resident_.erase(it);
  }
  // A device of capacity() bytes (1 TiB unless set_capacity): what its blocks do not hold.
  int64_t free_memory() const override { return capacity_ - live_bytes_; }
  void set_capacity(int64_t bytes) { capacity_ = bytes; }
  // The most bytes its blocks (resident copies included) held at once: exact, as it has no cache.
  int64_t peak_bytes() const override { return peak_; }
  int64_t resident_bytes() const override {
    int64_t n = 0;
    for (const auto& [host, copy] : resident_) n += static_cast<int64_t>(copy.bytes);
    return n;
  }

  void embedding(float* x, const ops::StoredMatrix& table, const int32_t* ids, int64_t N) override {
    dev("embedding", "x", x, f(N * table.cols));
    host_only("embedding", "ids", ids);
    cpu().embedding(x, on_device(table), ids, N);
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                       float eps) override {
    dev("rmsnorm_forward", "y", y, f(N * C));
    if (rstd != nullptr) dev("rmsnorm_forward", "rstd", rstd, f(N));
    dev("rmsnorm_forward", "x", x, f(N * C));
    cpu().rmsnorm_forward(y, rstd, x, vec(w, C), N, C, eps);
  }
  void rope_forward(float* x, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) override {
    dev("rope_forward", "x", x, f(N * H * HD));
    dev("rope_forward", "cos", cos, f(N * HD / 2));
    dev("rope_forward", "sin", sin, f(N * HD / 2));
    cpu().rope_forward(x, cos, sin, N, H, HD);
  }
  void swiglu_forward(float* h, const float* gate, const float* up, int64_t n) override {
    dev("swiglu_forward", "h", h, f(n));
    dev("swiglu_forward", "gate", gate, f(n));
    dev("swiglu_forward", "up", up, f(n));
    cpu().swiglu_forward(h, gate, up, n);
  }
  void add_inplace(float* y, const float* x, int64_t n) override {
    dev("add_inplace", "y", y, f(n));
    dev("add_inplace", "x", x, f(n));
    cpu().add_inplace(y, x, n);
  }
  void lora_dropout(float* xd, const float* x, int64_t N, int64_t in, const ops::DropoutSite& d) override {
    if (d.rows != nullptr) host_only("lora_dropout", "rows", d.rows);
    dev("lora_dropout", "xd", xd, f(N * in));
    dev("lora_dropout", "x", x, f(N * in));
    cpu().lora_dropout(xd, x, N, in, d);
  }
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const uint8_t* key_valid, const int64_t* seg_start,
                         const ops::AttentionShape& s) override {
    dev("attention_forward", "out", out, f(s.B * s.T * s.NH * s.HD));
    if (lse != nullptr) dev("attention_forward", "lse", lse, f(s.B * s.T * s.NH));
    dev("attention_forward", "q", q, f(s.B * s.T * s.NH * s.HD));
    dev("attention_forward", "k", k, f(s.B * s.Smax * s.NKV * s.HD));
    dev("attention_forward", "v", v, f(s.B * s.Smax * s.NKV * s.HD));
    if (key_valid != nullptr) dev("attention_forward", "key_valid", key_valid, static_cast<size_t>(s.B * s.Smax));
    if (seg_start != nullptr) dev("attention_forward", "seg_start", seg_start, static_cast<size_t>(s.B * s.T) * 8);
    cpu().attention_forward(out, lse, q, k, v, key_valid, seg_start, s);
  }
  void linear_forward(float* y, const float* x, const ops::StoredMatrix& w, const float* bias,
                      int64_t N) override {
    dev("linear_forward", "y", y, f(N * w.rows));
    dev("linear_forward", "x", x, f(N * w.cols));
    cpu().linear_forward(y, x, on_device(w), bias != nullptr ? vec(bias, w.rows) : nullptr, N);
  }
  void linear_backward_input(float* dx, const float* dy, const ops::StoredMatrix& w, int64_t N,
                             bool accumulate) override {
    dev("linear_backward_input", "dx", dx, f(N * w.cols));
    dev("linear_backward_input", "dy", dy, f(N * w.rows));
    cpu().linear_backward_input(dx, dy, on_device(w), N, accumulate);
  }
  void undo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) override {
    dev("undo_gguf_qk_permutation", "x", x, f(N * H * HD));
    cpu().undo_gguf_qk_permutation(x, N, H, HD);
  }
  void redo_gguf_qk_permutation(float* x, int64_t N, int64_t H, int64_t HD) override {
    dev("redo_gguf_qk_permutation", "x", x, f(N * H * HD));
    cpu().redo_gguf_qk_permutation(x, N, H, HD);
  }
  void rmsnorm_backward(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                        int64_t N, int64_t C) override {
    dev("rmsnorm_backward", "dx", dx, f(N * C));
    dev("rmsnorm_backward", "dy", dy, f(N * C));
    dev("rmsnorm_backward", "x", x, f(N * C));
    dev("rmsnorm_backward", "rstd", rstd, f(N));
    cpu().rmsnorm_backward(dx, dy, x, vec(w, C), rstd, N, C);
  }
  void rope_backward(float* dx, const float* cos, const float* sin, int64_t N, int64_t H, int64_t HD) override {
    dev("rope_backward", "dx", dx, f(N * H * HD));
    dev("rope_backward", "cos", cos, f(N * HD / 2));
    dev("rope_backward", "sin", sin, f(N * HD / 2));
    cpu().rope_backward(dx, cos, sin, N, H, HD);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                       int64_t n) override {
    for (const auto& [name, p] : {std::pair<const char*, const float*>{"dgate", dgate}, {"dup", dup}, {"dh", dh},
                                  {"gate", gate}, {"up", up}})
      dev("swiglu_backward", name, p, f(n));
    cpu().swiglu_backward(dgate, dup, dh, gate, up, n);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                          const float* lse, const float* q, const float* k, const float* v,
                          const uint8_t* key_valid, const int64_t* seg_start,
                          const ops::AttentionShape& s) override {
    const size_t qb = f(s.B * s.T * s.NH * s.HD), kb = f(s.B * s.Smax * s.NKV * s.HD);
    dev("attention_backward", "dq", dq, qb);
    dev("attention_backward", "dk", dk, kb);
    dev("attention_backward", "dv", dv, kb);
    dev("attention_backward", "dout", dout, qb);
    // A GPU backward reads the forward's output and logsumexp: they must be there.
    dev("attention_backward", "out", out, qb);
    dev("attention_backward", "lse", lse, f(s.B * s.T * s.NH));
    dev("attention_backward", "q", q, qb);
    dev("attention_backward", "k", k, kb);
    dev("attention_backward", "v", v, kb);
    if (key_valid != nullptr) dev("attention_backward", "key_valid", key_valid, static_cast<size_t>(s.B * s.Smax));
    if (seg_start != nullptr) dev("attention_backward", "seg_start", seg_start, static_cast<size_t>(s.B * s.T) * 8);
    cpu().attention_backward(dq, dk, dv, dout, out, lse, q, k, v, key_valid, seg_start, s);
  }
  ops::LossSum cross_entropy_loss_backward(float* dlogits, const float* logits, const int64_t* targets,
                                           int64_t N, int64_t V, float scale) override {
    dev("cross_entropy_loss_backward", "dlogits", dlogits, f(N * V));
    dev("cross_entropy_loss_backward", "logits", logits, f(N * V));
    host_only("cross_entropy_loss_backward", "targets", targets);
    return cpu().cross_entropy_loss_backward(dlogits, logits, targets, N, V, scale);
  }
  ops::LossSum cross_entropy_sum(const float* logits, const int64_t* targets, int64_t N, int64_t V) override {
    dev("cross_entropy_sum", "logits", logits, f(N * V));
    host_only("cross_entropy_sum", "targets", targets);
    return cpu().cross_entropy_sum(logits, targets, N, V);
  }
  void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) override {
    host_only("gather_rows", "rows", rows);
    dev("gather_rows", "dst", dst, f(M * C));
    for (int64_t i = 0; i < M; ++i) dev("gather_rows", "src row", src + rows[i] * C, f(C));
    cpu().gather_rows(dst, src, rows, M, C);
  }
  void scatter_rows(float* dst, const float* src, const int64_t* rows, int64_t M, int64_t C) override {
    host_only("scatter_rows", "rows", rows);
    dev("scatter_rows", "src", src, f(M * C));
    for (int64_t i = 0; i < M; ++i) dev("scatter_rows", "dst row", dst + rows[i] * C, f(C));
    cpu().scatter_rows(dst, src, rows, M, C);
  }
  void gemm(backend::Trans ta, backend::Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override {
    // Row-major extents: op(A) is (M, K), so A is (M, lda) or (K, lda) when transposed.
    const int64_t a_rows = ta == backend::Trans::kYes ? K : M;
    const int64_t b_rows = tb == backend::Trans::kYes ? N : K;
    const int64_t a_cols = ta == backend::Trans::kYes ? M : K;
    const int64_t b_cols = tb == backend::Trans::kYes ? K : N;
    dev("gemm", "A", A, f((a_rows - 1) * lda + a_cols));
    dev("gemm", "B", B, f((b_rows - 1) * ldb + b_cols));
    dev("gemm", "C", C, f((M - 1) * ldc + N));
    cpu().gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  double sum_squares(const float* x, int64_t n, double init) override {
    dev("sum_squares", "x", x, f(n));
    return cpu().sum_squares(x, n, init);
  }
  void scale(float* x, int64_t n, float s) override {
    dev("scale", "x", x, f(n));
    cpu().scale(x, n, s);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const ops::AdamWHyper& h, double lr,
                    int64_t step) override {
    for (const auto& [name, ptr] : {std::pair<const char*, const float*>{"p", p}, {"g", g}, {"m", m}, {"v", v}})
      dev("adamw_update", name, ptr, f(n));
    cpu().adamw_update(p, g, m, v, n, h, lr, step);
  }

  int64_t live_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t live_bytes() const { return live_bytes_; }
  int64_t allocations() const { return allocations_; }

 private:
  struct Copy {
    void* p = nullptr;
    size_t bytes = 0;
  };
  static backend::Backend& cpu() { return backend::cpu(); }
  static size_t f(int64_t floats) { return static_cast<size_t>(floats) * sizeof(float); }
  [[noreturn]] static void fail(const std::string& op, const std::string& what) {
    throw std::logic_error("simulated device: " + op + ": " + what);
  }
  bool inside(const void* p, size_t bytes) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
  }
  void dev(const char* op, const char* arg, const void* p, size_t bytes) const {
    if (!inside(p, bytes))
      fail(op, std::string(arg) + " is not device memory of this backend (or overruns its block)");
  }
  void host_only(const char* op, const char* arg, const void* p) const {
    if (inside(p, 1)) fail(op, std::string(arg) + " must be host memory, got device memory");
  }
  const float* vec(const float* host, int64_t n) {
    return static_cast<const float*>(resident(host, f(n)));
  }
  ops::StoredMatrix on_device(ops::StoredMatrix w) {
    w.data = static_cast<const uint8_t*>(resident(w.data, static_cast<size_t>(w.rows * w.row_bytes())));
    return w;
  }

  std::map<uintptr_t, size_t> blocks_;  // live allocations: address -> bytes
  std::map<const void*, Copy> resident_;
  int64_t allocations_ = 0;
  int64_t live_bytes_ = 0, peak_ = 0, capacity_ = int64_t{1} << 40;
};

}  // namespace medtune::testing
