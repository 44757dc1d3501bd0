// report.html of a training run: one self-contained page (inline CSS and SVG, no script, no
// network) beside the adapter, rewritten as the run goes so a browser shows how it is doing:
// a header with what is trained (model, adapter rank and alpha, data, steps) and the run's status,
// then training loss (with evaluation loss), evaluation accuracy, learning rate, gradient norm,
// tokens per second and resident memory against step. Every string from the run is escaped.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "eval/training_curves.h"

namespace medtune::eval {

struct TrainingRunInfo {
  std::vector<std::pair<std::string, std::string>> identity;  // label, value: model, adapter, data, steps
  std::string output_dir;
};

std::string render_training_report(const TrainingRunInfo& info, const TrainingCurves& curves);

}  // namespace medtune::eval
