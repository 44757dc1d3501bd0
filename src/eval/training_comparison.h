// The training curves behind two compared evaluation runs (`medtune eval --compare A B --out DIR`
// writes DIR/comparison.html): each eval run's report.json records the adapter it scored; when
// that adapter was written by `medtune train`, its run directory holds metrics.jsonl, and the page
// overlays the two runs' loss, learning rate, gradient norm, tokens/s and memory. Where a side has
// no curves the page says why (no adapter, no report.json, no metrics.jsonl beside the adapter).
#pragma once

#include <optional>
#include <string>

#include "eval/training_curves.h"

namespace medtune::eval {

struct TrainingRunOfEval {
  std::string eval_run;                  // as given to --compare
  std::string metrics_path;              // the training run's metrics.jsonl ("" when none)
  std::optional<TrainingCurves> curves;  // read from metrics_path
  std::string why_none;                  // when !curves: the reason, for the page
};

// Finds the training run behind an eval run (a directory, or its predictions.jsonl): report.json
// beside the predictions, its provenance.adapter, and metrics.jsonl in the adapter directory or
// the directory above it (<output_dir>/adapter). A metrics.jsonl that exists but does not parse
// throws BadInput naming its line.
TrainingRunOfEval training_run_of_eval(const std::string& eval_run);

// comparison.html: the terminal comparison (`comparison_text`, escaped) and the overlaid curves,
// A in blue, B in orange.
std::string render_training_comparison(const std::string& comparison_text, const TrainingRunOfEval& a,
                                       const TrainingRunOfEval& b);

}  // namespace medtune::eval
