#include "train/optimizer.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "ops/adamw.h"

namespace medtune::train {
namespace {

void check_range(const char* field, double value, double lo, double hi, bool hi_open) {
  const bool ok = std::isfinite(value) && value >= lo && (hi_open ? value < hi : value <= hi);
  if (!ok) {
    std::ostringstream msg;
    msg << "AdamW: " << field << " = " << value << " is invalid; it must be in [" << lo << ", "
        << hi << (hi_open ? ")" : "]");
    throw BadInput(msg.str());
  }
}

}  // namespace

void validate(const AdamWConfig& cfg) {
  const double inf = HUGE_VAL;
  check_range("lr", cfg.lr, 0.0, inf, true);
  check_range("beta1", cfg.beta1, 0.0, 1.0, true);
  check_range("beta2", cfg.beta2, 0.0, 1.0, true);
  check_range("eps", cfg.eps, 0.0, inf, true);
  check_range("weight_decay", cfg.weight_decay, 0.0, inf, true);
}

ops::AdamWHyper hyper(const AdamWConfig& cfg) { return {cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay}; }

// The arithmetic is ops::adamw_update's (ops/cpu/adamw.cpp, where the derivation from torch's
// _single_tensor_adam is written down); here it takes the training config.
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWConfig& cfg, double lr, int64_t step) {
  ops::adamw_update<T>(p, g, m, v, n, hyper(cfg), lr, step);
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWConfig&,
                                  double, int64_t);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t,
                                   const AdamWConfig&, double, int64_t);

AdamW::AdamW(AdamWConfig cfg, std::vector<ParamRef> params)
    : cfg_(cfg), params_(std::move(params)) {
  validate(cfg_);
  offset_.reserve(params_.size() + 1);
  offset_.push_back(0);
  for (const ParamRef& p : params_) {
    if (p.numel < 0 || (p.numel > 0 && (p.data == nullptr || p.grad == nullptr)))
      throw Internal("AdamW: parameter '" + p.name +
                     "' has no data or gradient buffer, or numel < 0");
    offset_.push_back(offset_.back() + p.numel);
  }
  m_.assign(static_cast<size_t>(offset_.back()), 0.0f);
  v_.assign(static_cast<size_t>(offset_.back()), 0.0f);
}

void AdamW::check_lr(double lr) { check_range("lr", lr, 0.0, HUGE_VAL, true); }

void AdamW::step(double lr) {
  check_lr(lr);
  // torch increments the step before using it: the first update uses t = 1.
  const int64_t t = step_ + 1;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamRef& p = params_[i];
    adamw_update<float>(p.data, p.grad, m_.data() + offset_[i], v_.data() + offset_[i], p.numel,
                        cfg_, lr, t);
  }
  step_ = t;
}

void AdamW::set_step_count(int64_t t) {
  if (t < 0) throw BadInput("AdamW: step count " + std::to_string(t) + " is negative");
  step_ = t;
}

std::span<float> AdamW::m(size_t i) {
  return {m_.data() + offset_.at(i), static_cast<size_t>(params_.at(i).numel)};
}
std::span<const float> AdamW::m(size_t i) const {
  return {m_.data() + offset_.at(i), static_cast<size_t>(params_.at(i).numel)};
}
std::span<float> AdamW::v(size_t i) {
  return {v_.data() + offset_.at(i), static_cast<size_t>(params_.at(i).numel)};
}
std::span<const float> AdamW::v(size_t i) const {
  return {v_.data() + offset_.at(i), static_cast<size_t>(params_.at(i).numel)};
}

}  // namespace medtune::train
