// Learning-rate schedules with the semantics of transformers.get_scheduler (optimization.py): each
// schedule is a LambdaLR factor lambda(step) and the lr of optimizer step s (0-based) is
// base_lr * lambda(s). LambdaLR evaluates lambda(0) when it is built and lambda(s + 1) after the
// s-th optimizer step, so the update at step s uses lambda(s), which is what lr_at returns.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace medtune::train {

enum class ScheduleKind {
  kConstant,            // "constant": 1
  kConstantWithWarmup,  // "constant_with_warmup": linear warmup from 0, then 1
  kLinear,              // "linear": warmup, then linear decay to 0 at num_training_steps
  kCosine,              // "cosine": warmup, then 0.5 (1 + cos(pi * num_cycles * 2 * progress))
  kCosineWithMinLr,     // "cosine_with_min_lr": cosine scaled into [min_lr_rate, 1]
};

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::kLinear;  // transformers' TrainingArguments default
  double base_lr = 2e-4;
  int64_t num_warmup_steps = 0;
  int64_t num_training_steps = 0;  // used by linear and the cosines
  double num_cycles = 0.5;         // cosines: 0.5 is a half wave from 1 down to 0 (or min_lr_rate)
  // cosine_with_min_lr only: exactly one of these, as in transformers (min_lr is absolute and
  // becomes the rate min_lr / base_lr).
  std::optional<double> min_lr;
  std::optional<double> min_lr_rate;
};

// The kind a transformers scheduler name stands for; BadInput listing the valid names otherwise.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_name(ScheduleKind kind);

// BadInput naming the field: negative step counts or lr, min_lr settings that transformers rejects.
void validate(const ScheduleConfig& cfg);

// lambda(step): transformers' lr_lambda of the schedule, with its float64 arithmetic in its order.
double lr_lambda(const ScheduleConfig& cfg, int64_t step);

// The lr the optimizer uses for 0-based optimizer step `step`: base_lr * lambda(step).
double lr_at(const ScheduleConfig& cfg, int64_t step);

}  // namespace medtune::train
