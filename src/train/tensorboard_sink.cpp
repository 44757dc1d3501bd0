#include "train/tensorboard_sink.h"

#include "core/error.h"

namespace medtune::train {

namespace {

// `json[key]` as float32 when it is a number (metrics.jsonl writes NaN and Inf as null: those
// points are left out, as TensorBoard could not plot them either).
void add(ScalarValues& out, const nlohmann::json& j, const char* key, const std::string& tag, double scale = 1.0) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return;
  out.emplace_back(tag, static_cast<float>(it->get<double>() * scale));
}

}  // namespace

ScalarValues tensorboard_scalars(const nlohmann::json& record, int64_t& step) {
  ScalarValues v;
  if (record.contains("step") && record["step"].is_number_integer()) {
    step = record["step"].get<int64_t>();
    add(v, record, "loss", "train/loss");
    add(v, record, "lr", "train/learning_rate");
    add(v, record, "grad_norm", "train/grad_norm");
    add(v, record, "tokens_per_s", "train/tokens_per_second");
    add(v, record, "rss_bytes", "train/rss_mib", 1.0 / (1024.0 * 1024.0));
    add(v, record, "epoch", "train/epoch");
  } else if (record.contains("eval") && record["eval"].is_object()) {
    const nlohmann::json& e = record["eval"];
    step = e.value("step", int64_t{0});
    // An accuracy-only evaluation (no validation examples) logs loss 0 over 0 tokens: no loss.
    if (e.value("tokens", int64_t{0}) > 0) add(v, e, "loss", "eval/loss");
    add(v, e, "accuracy", "eval/accuracy");
  }
  return v;
}

void TensorBoardSink::started(int64_t step, int64_t) {
  writer_ = std::make_unique<EventFileWriter>(dir_);
  writer_->add_session_start(step == 0 ? 0 : step + 1);
}

void TensorBoardSink::record(const nlohmann::json& record) {
  if (!writer_) throw Internal("TensorBoardSink: record before started");
  int64_t step = 0;
  const ScalarValues values = tensorboard_scalars(record, step);
  if (!values.empty()) writer_->add_scalars(step, values);
}

const std::string& TensorBoardSink::file_path() const {
  if (!writer_) throw Internal("TensorBoardSink: no event file before started");
  return writer_->path();
}

}  // namespace medtune::train
