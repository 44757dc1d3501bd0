#include "dist/gradient_sum.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/error.h"

namespace medtune::dist {

namespace {
constexpr size_t kLossFloats = sizeof(double) / sizeof(float);
}

StepGradientSum::StepGradientSum(Communicator& comm, std::vector<std::span<float>> grads, bool deterministic,
                                 size_t bucket_floats)
    : comm_(comm), grads_(std::move(grads)), deterministic_(deterministic), bucket_floats_(std::max<size_t>(1, bucket_floats)) {
  for (const auto& g : grads_) num_grads_ += g.size();
  acc_.assign(num_grads_ + kLossFloats, 0.0f);
}

double StepGradientSum::loss_of(const std::vector<float>& buf) {
  double loss = 0;
  std::memcpy(&loss, buf.data() + buf.size() - kLossFloats, sizeof loss);
  return loss;
}
void StepGradientSum::set_loss(std::vector<float>& buf, double loss_sum) {
  std::memcpy(buf.data() + buf.size() - kLossFloats, &loss_sum, sizeof loss_sum);
}

void StepGradientSum::flatten_into(std::vector<float>& buf, double loss_sum) const {
  buf.resize(num_grads_ + kLossFloats);
  size_t off = 0;
  for (const auto& g : grads_) {
    std::memcpy(buf.data() + off, g.data(), g.size() * sizeof(float));
    off += g.size();
  }
  set_loss(buf, loss_sum);
}

// acc += grads, element by element (the one rounding a single process makes per micro-batch).
void StepGradientSum::add_grads_into(std::vector<float>& acc) const {
  size_t off = 0;
  for (const auto& g : grads_) {
    float* a = acc.data() + off;
    for (size_t i = 0; i < g.size(); ++i) a[i] += g[i];
    off += g.size();
  }
}

void StepGradientSum::begin_step() {
  micro_in_step_ = 0;
  kept_count_ = 0;
}

void StepGradientSum::add_micro_batch(double loss_sum) {
  const bool keep = deterministic_ && comm_.rank() > 0;
  if (keep) {
    if (kept_count_ == kept_.size()) kept_.emplace_back();
    flatten_into(kept_[kept_count_++], loss_sum);
  } else if (micro_in_step_ == 0) {
    // The first micro-batch's gradients are copied, not added to zero: the same bits (-0 too).
    flatten_into(acc_, 0.0 + loss_sum);
  } else {
    add_grads_into(acc_);
    set_loss(acc_, loss_of(acc_) + loss_sum);
  }
  ++micro_in_step_;
}

double StepGradientSum::finish(int64_t step) {
  if (micro_in_step_ == 0) throw Internal("StepGradientSum::finish: no micro-batch in step " + std::to_string(step));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = "the gradients of step " + std::to_string(step);
  const int rank = comm_.rank(), size = comm_.size();
  auto bytes = [](std::vector<float>& v) { return std::as_writable_bytes(std::span<float>(v)); };
  if (size > 1 && deterministic_) {
    // The partial sum travels 0 -> 1 -> ... -> size-1, bucket by bucket, each rank adding its
    // micro-batches in order; the loss (a double in the last two floats) travels last, alone.
    const std::string from_prev = what + " (partial sum from rank " + std::to_string(rank - 1) + ")";
    for (size_t b0 = 0; b0 < acc_.size();) {
      const bool loss_part = b0 == num_grads_;
      const size_t b1 = loss_part ? acc_.size() : std::min(num_grads_, b0 + bucket_floats_);
      const std::span<float> part(acc_.data() + b0, b1 - b0);
      if (rank > 0) {
        comm_.recv(std::as_writable_bytes(part), rank - 1, from_prev);
        for (size_t m = 0; m < kept_count_; ++m) {
          const std::vector<float>& k = kept_[m];
          if (loss_part) {
            set_loss(acc_, loss_of(acc_) + loss_of(k));
          } else {
            float* a = acc_.data();
            for (size_t i = b0; i < b1; ++i) a[i] += k[i];
          }
        }
      }
      if (rank + 1 < size) comm_.send(std::as_bytes(std::span<const float>(part)), rank + 1, what);
      b0 = b1;
    }
    comm_.broadcast(bytes(acc_), size - 1, what + " (total from rank " + std::to_string(size - 1) + ")");
  } else if (size > 1) {
    double loss = loss_of(acc_);
    comm_.allreduce_sum(std::span<float>(acc_.data(), num_grads_), what);
    comm_.allreduce_sum(std::span<double>(&loss, 1), what + " (loss)");
    set_loss(acc_, loss);
  }
  exchange_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t off = 0;
  for (const auto& g : grads_) {
    std::memcpy(g.data(), acc_.data() + off, g.size() * sizeof(float));
    off += g.size();
  }
  return loss_of(acc_);
}

}  // namespace medtune::dist
