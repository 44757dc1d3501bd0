// A typed buffer in one backend's memory (backend.h), move-only, RAII. Contents are unspecified
// after allocation and after fit() grows it, as the model's activations are written before they
// are read; zero() when zeros are needed.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace medtune::backend {

template <typename T>
class Array {
 public:
  Array() = default;
  Array(Backend& be, size_t n) { fit(be, n); }
  ~Array() { release(); }
  Array(Array&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_), cap_(o.cap_) { o.reset_fields(); }
  Array& operator=(Array&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      p_ = o.p_;
      n_ = o.n_;
      cap_ = o.cap_;
      o.reset_fields();
    }
    return *this;
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  // n elements on `be`, reusing the allocation when it is large enough and on the same backend
  // (no copy of old contents either way).
  void fit(Backend& be, size_t n) {
    if (be_ != &be || cap_ < n) {
      release();
      be_ = &be;
      if (n > 0) p_ = static_cast<T*>(be.allocate(n * sizeof(T)));
      cap_ = n;
    }
    n_ = n;
  }
  void zero() {
    if (n_ > 0) be_->zero(p_, bytes());
  }
  // Copies host data in: the array becomes host.size() elements on `be`.
  void upload(Backend& be, const std::vector<T>& host) {
    fit(be, host.size());
    if (!host.empty()) be.to_device(p_, host.data(), bytes());
  }
  std::vector<T> download() const {
    std::vector<T> out(n_);
    if (n_ > 0) be_->to_host(out.data(), p_, bytes());
    return out;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  size_t bytes() const { return n_ * sizeof(T); }
  Backend* backend() const { return be_; }

 private:
  void release() {
    if (p_ != nullptr) be_->deallocate(p_);
    reset_fields();
  }
  void reset_fields() {
    be_ = nullptr;
    p_ = nullptr;
    n_ = cap_ = 0;
  }
  Backend* be_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

// The device copy of a host vector, or null when it is empty: for optional op arguments
// (key_valid, seg_start) in one line.
template <typename T>
const T* upload_or_null(Array<T>& a, Backend& be, const std::vector<T>& host) {
  if (host.empty()) return nullptr;
  a.upload(be, host);
  return a.data();
}

}  // namespace medtune::backend
