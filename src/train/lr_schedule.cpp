#include "train/lr_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace medtune::train {
namespace {

struct NamedKind {
  std::string_view name;
  ScheduleKind kind;
};

constexpr std::array<NamedKind, 5> kKinds = {{
    {"constant", ScheduleKind::kConstant},
    {"constant_with_warmup", ScheduleKind::kConstantWithWarmup},
    {"linear", ScheduleKind::kLinear},
    {"cosine", ScheduleKind::kCosine},
    {"cosine_with_min_lr", ScheduleKind::kCosineWithMinLr},
}};

double to_double(int64_t x) {
  return static_cast<double>(x);
}

// The warmup ramp every warmup schedule shares: float(step) / float(max(1, num_warmup_steps)).
double warmup(int64_t step, int64_t num_warmup_steps) {
  return to_double(step) / to_double(std::max<int64_t>(1, num_warmup_steps));
}

// float(step - warmup) / float(max(1, training - warmup)), as the linear and cosine lambdas have
// it.
double progress(const ScheduleConfig& cfg, int64_t step) {
  return to_double(step - cfg.num_warmup_steps) /
         to_double(std::max<int64_t>(1, cfg.num_training_steps - cfg.num_warmup_steps));
}

// 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)), evaluated left to right
// as Python does, so the product rounds the same way.
double half_cosine(const ScheduleConfig& cfg, int64_t step) {
  return 0.5 * (1.0 + std::cos(std::numbers::pi * cfg.num_cycles * 2.0 * progress(cfg, step)));
}

}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
  for (const NamedKind& k : kKinds)
    if (k.name == name) return k.kind;
  std::string valid;
  for (const NamedKind& k : kKinds) valid += (valid.empty() ? "" : ", ") + std::string(k.name);
  throw BadInput("unknown lr scheduler '" + std::string(name) + "'; valid: " + valid);
}

std::string_view schedule_name(ScheduleKind kind) {
  for (const NamedKind& k : kKinds)
    if (k.kind == kind) return k.name;
  throw Internal("schedule_name: unknown ScheduleKind " + std::to_string(static_cast<int>(kind)));
}

void validate(const ScheduleConfig& cfg) {
  const std::string where = "lr scheduler '" + std::string(schedule_name(cfg.kind)) + "': ";
  if (!std::isfinite(cfg.base_lr) || cfg.base_lr < 0)
    throw BadInput(where + "learning rate " + std::to_string(cfg.base_lr) + " must be >= 0");
  if (cfg.num_warmup_steps < 0)
    throw BadInput(where + "num_warmup_steps " + std::to_string(cfg.num_warmup_steps) +
                   " must be >= 0");
  if (cfg.num_training_steps < 0)
    throw BadInput(where + "num_training_steps " + std::to_string(cfg.num_training_steps) +
                   " must be >= 0");
  if (cfg.kind == ScheduleKind::kCosineWithMinLr) {
    // transformers: "Only one of min_lr or min_lr_rate should be set" / "One of ... should be set".
    if (cfg.min_lr.has_value() == cfg.min_lr_rate.has_value())
      throw BadInput(where + "set exactly one of min_lr and min_lr_rate");
    if (cfg.min_lr && cfg.base_lr == 0)
      throw BadInput(where + "min_lr needs a learning rate > 0 (min_lr_rate = min_lr / lr)");
  }
}

double lr_lambda(const ScheduleConfig& cfg, int64_t step) {
  validate(cfg);
  if (step < 0) throw BadInput("lr scheduler: step " + std::to_string(step) + " must be >= 0");
  const bool warming = step < cfg.num_warmup_steps;
  switch (cfg.kind) {
    case ScheduleKind::kConstant:
      return 1.0;
    case ScheduleKind::kConstantWithWarmup:
      return warming ? warmup(step, cfg.num_warmup_steps) : 1.0;
    case ScheduleKind::kLinear:
      if (warming) return warmup(step, cfg.num_warmup_steps);
      return std::max(
          0.0, to_double(cfg.num_training_steps - step) /
                   to_double(std::max<int64_t>(1, cfg.num_training_steps - cfg.num_warmup_steps)));
    case ScheduleKind::kCosine:
      // Past num_training_steps the cosine rises again (progress > 1); transformers does not clamp
      // it, and neither do we.
      if (warming) return warmup(step, cfg.num_warmup_steps);
      return std::max(0.0, half_cosine(cfg, step));
    case ScheduleKind::kCosineWithMinLr: {
      if (warming) return warmup(step, cfg.num_warmup_steps);
      const double rate = cfg.min_lr ? *cfg.min_lr / cfg.base_lr : *cfg.min_lr_rate;
      const double factor = half_cosine(cfg, step) * (1 - rate) + rate;
      return std::max(0.0, factor);
    }
  }
  throw Internal("lr_lambda: unknown ScheduleKind " + std::to_string(static_cast<int>(cfg.kind)));
}

double lr_at(const ScheduleConfig& cfg, int64_t step) {
  return cfg.base_lr * lr_lambda(cfg, step);
}

}  // namespace medtune::train
