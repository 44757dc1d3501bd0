#include "train/train_state.h"

#include <cmath>
#include <span>
#include <string>

#include "core/error.h"

namespace medtune::train {

TrainState::TrainState(backend::Backend& be, model::LoraWeights& lora, AdamW& adamw)
    : be_(be), lora_(lora), adamw_(adamw), layout_(lora) {
  // adamw's parameters, checked to be lora's A (gradient dA) and B (dB) in order.
  size_t i = 0;
  for (auto& layer : lora_.layers)
    for (model::LoraLinear& ll : layer) {
      if (!ll.enabled()) continue;
      for (auto [w, g] : {std::pair{&ll.A, &ll.dA}, std::pair{&ll.B, &ll.dB}}) {
        if (i >= adamw_.num_params() || adamw_.param(i).data != w->data() || adamw_.param(i).grad != g->data() ||
            adamw_.param(i).numel != static_cast<int64_t>(w->size()) || g->size() != w->size())
          throw Internal("TrainState: AdamW's parameter " + std::to_string(i) + " is not the adapter's next matrix");
        // The CPU's state is the host memory itself: one segment per matrix.
        if (!on_device()) segments_.push_back({w->data(), g->data(), adamw_.m(i).data(), adamw_.v(i).data(),
                                               static_cast<int64_t>(w->size())});
        ++i;
      }
    }
  if (i != adamw_.num_params()) throw Internal("TrainState: AdamW has parameters beyond the adapter's");
  if (!on_device()) return;

  const auto total = static_cast<size_t>(layout_.total());
  for (backend::Array<float>* a : {&p_, &g_, &m_, &v_}) {
    a->fit(be_, total);
    a->zero();
  }
  if (total > 0) segments_.push_back({p_.data(), g_.data(), m_.data(), v_.data(), layout_.total()});
  i = 0;
  for (auto& layer : lora_.layers)
    for (model::LoraLinear& ll : layer) {
      if (!ll.enabled()) continue;
      ll.device_A = p_.data() + layout_.offset(i);
      ll.device_B = p_.data() + layout_.offset(i + 1);
      i += 2;
    }
}

TrainState::~TrainState() {
  for (auto& layer : lora_.layers)
    for (model::LoraLinear& ll : layer) ll.device_A = ll.device_B = nullptr;
}

void TrainState::to_device() {
  if (!on_device()) return;
  std::vector<float> flat(static_cast<size_t>(layout_.total()), 0.0f);
  const auto upload = [&](backend::Array<float>& dst, auto&& host_of) {
    for (size_t k = 0; k < adamw_.num_params(); ++k) {
      const float* src = host_of(k);
      std::copy(src, src + adamw_.param(k).numel, flat.begin() + layout_.offset(k));
    }
    if (!flat.empty()) be_.to_device(dst.data(), flat.data(), flat.size() * sizeof(float));
  };
  upload(p_, [&](size_t k) { return static_cast<const float*>(adamw_.param(k).data); });
  upload(m_, [&](size_t k) { return adamw_.m(k).data(); });
  upload(v_, [&](size_t k) { return adamw_.v(k).data(); });
}

void TrainState::load_gradients() {
  if (!on_device()) return;
  std::vector<float> flat(static_cast<size_t>(layout_.total()), 0.0f);
  for (size_t k = 0; k < adamw_.num_params(); ++k) {
    const ParamRef& p = adamw_.param(k);
    std::copy(p.grad, p.grad + p.numel, flat.begin() + layout_.offset(k));
  }
  if (!flat.empty()) be_.to_device(g_.data(), flat.data(), flat.size() * sizeof(float));
}

const std::vector<std::array<model::LoraGrad, model::kNumProj>>* TrainState::begin_pass(
    bool first) {
  if (!on_device()) throw Internal("TrainState::begin_pass on the CPU");
  if (first) {
    if (step_table_.empty()) step_table_ = layout_.grad_table(lora_, g_.data());
    g_.zero();
    return &step_table_;
  }
  if (pass_table_.empty()) {  // allocated at the first later micro-batch
    pass_.fit(be_, g_.size());
    pass_table_ = layout_.grad_table(lora_, pass_.data());
  }
  pass_.zero();
  return &pass_table_;
}

void TrainState::end_pass(bool first) {
  if (!on_device()) throw Internal("TrainState::end_pass on the CPU");
  if (first || g_.empty()) return;  // the first pass wrote the step's gradients themselves
  if (pass_table_.empty())
    throw Internal("TrainState::end_pass of a later micro-batch before its begin_pass");
  be_.add_inplace(g_.data(), pass_.data(), static_cast<int64_t>(pass_.size()));
}

double TrainState::allreduce_gradients(dist::Communicator& comm, double loss_sum, const std::string& what) {
  if (!on_device()) throw Internal("TrainState::allreduce_gradients on the CPU");
  if (!g_.empty()) {
    be_.synchronize();  // the passes' additions into g_ are complete before another engine reads it
    if (comm.reads_device_memory()) {
      comm.allreduce_sum_device(g_.data(), g_.size(), what);
    } else {
      std::vector<float> host = g_.download();
      comm.allreduce_sum(std::span<float>(host), what);
      be_.to_device(g_.data(), host.data(), host.size() * sizeof(float));
    }
  }
  comm.allreduce_sum(std::span<double>(&loss_sum, 1), what + " (loss)");
  return loss_sum;
}

int64_t TrainState::exchange_bytes() const {
  return static_cast<int64_t>(g_.bytes() + sizeof(double));
}

double TrainState::grad_norm() {
  double sum = 0.0;
  for (const Segment& s : segments_) sum = be_.sum_squares(s.g, s.n, sum);
  return std::sqrt(sum);
}

void TrainState::scale_gradients(float coef) {
  for (const Segment& s : segments_) be_.scale(s.g, s.n, coef);
}

void TrainState::adamw_step(double lr) {
  AdamW::check_lr(lr);
  // torch increments the step before using it: the first update uses t = 1.
  const int64_t t = adamw_.step_count() + 1;
  const ops::AdamWHyper h = hyper(adamw_.config());
  for (const Segment& s : segments_) be_.adamw_update(s.p, s.g, s.m, s.v, s.n, h, lr, t);
  adamw_.set_step_count(t);
}

bool TrainState::params_finite() {
  // Squares of floats cannot overflow a double: the sum is finite exactly when every element is.
  double sum = 0.0;
  for (const Segment& s : segments_) sum = be_.sum_squares(s.p, s.n, sum);
  return std::isfinite(sum);
}

void TrainState::to_host() {
  if (!on_device()) return;
  const auto download = [&](const backend::Array<float>& src, auto&& host_of) {
    const std::vector<float> flat = src.download();
    for (size_t k = 0; k < adamw_.num_params(); ++k)
      std::copy(flat.begin() + layout_.offset(k), flat.begin() + layout_.offset(k) + adamw_.param(k).numel, host_of(k));
  };
  download(p_, [&](size_t k) { return adamw_.param(k).data; });
  download(m_, [&](size_t k) { return adamw_.m(k).data(); });
  download(v_, [&](size_t k) { return adamw_.v(k).data(); });
}

int64_t TrainState::device_bytes() const {
  return static_cast<int64_t>(p_.bytes() + g_.bytes() + m_.bytes() + v_.bytes() + pass_.bytes());
}

}  // namespace medtune::train
