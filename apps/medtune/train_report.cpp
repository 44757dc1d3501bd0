#include "train_report.h"

#include <cstdio>
#include <filesystem>

#include "io/atomic_file.h"

namespace medtune::cli {

namespace fs = std::filesystem;

namespace {

constexpr std::chrono::seconds kMinInterval{10};

std::string adapter_text(const train::TrainConfig& cfg) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s, r %lld, alpha %g", cfg.base_quant == train::BaseQuant::kNf4 ? "QLoRA (NF4 base)" : "LoRA",
                static_cast<long long>(cfg.lora_r), cfg.lora_alpha);
  return buf;
}

std::string datasets_text(const train::TrainConfig& cfg) {
  std::string s;
  for (const auto& d : cfg.datasets)
    s += (s.empty() ? "" : ", ") + d.path + " (" + std::string(train::dataset_type_name(d.type)) + ")";
  return s;
}

}  // namespace

std::string TrainReportSink::path_in(const std::string& output_dir) {
  return (fs::path(output_dir) / "report.html").string();
}

TrainReportSink::TrainReportSink(const train::TrainConfig& cfg)
    : metrics_path_((fs::path(cfg.output_dir) / "metrics.jsonl").string()), report_path_(path_in(cfg.output_dir)) {
  info_.output_dir = cfg.output_dir;
  info_.identity = {{"model", cfg.base_model}, {"adapter", adapter_text(cfg)}, {"data", datasets_text(cfg)}};
}

void TrainReportSink::started(int64_t step, int64_t total_steps) {
  std::string steps = std::to_string(total_steps);
  if (step > 0) steps += " (resumed at step " + std::to_string(step) + ")";
  info_.identity.emplace_back("steps", steps);
  write();
}

void TrainReportSink::record(const nlohmann::json& record) {
  if (record.contains("summary") || std::chrono::steady_clock::now() - last_write_ >= kMinInterval) write();
}

void TrainReportSink::checkpoint_saved(int64_t) { write(); }

void TrainReportSink::write() {
  io::atomic_write_file(report_path_, eval::render_training_report(info_, eval::read_training_curves(metrics_path_)));
  last_write_ = std::chrono::steady_clock::now();
}

}  // namespace medtune::cli
