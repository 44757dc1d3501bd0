#include "train/checkpoint_state.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "core/error.h"
#include "core/sha256.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace medtune::train {

namespace {

// JSON has no NaN or Inf: a non-finite loss (warned about when it happens) is stored as null.
nlohmann::json number_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }
double number_from(const nlohmann::json& j) {
  return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>();
}

}  // namespace

std::string plan_sha256(const std::vector<std::vector<int64_t>>& plan) {
  Sha256 h;
  auto put = [&h](int64_t v) { h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), sizeof v)); };
  for (const auto& batch : plan) {
    put(static_cast<int64_t>(batch.size()));
    for (int64_t i : batch) put(i);
  }
  return h.hex();
}

nlohmann::json to_json(const TrainerState& s) {
  nlohmann::json losses = nlohmann::json::array();
  for (double l : s.losses) losses.push_back(number_or_null(l));
  nlohmann::json evals = nlohmann::json::array();
  for (const auto& e : s.evals) {
    nlohmann::json j{{"step", e.step}, {"loss", number_or_null(e.loss)}, {"tokens", e.tokens}};
    if (e.accuracy) j["accuracy"] = *e.accuracy;
    evals.push_back(j);
  }
  return {{"format", "medtune-trainer-state"},
          {"version", 1},
          {"step", s.step},
          {"total_steps", s.total_steps},
          {"scheduler", {{"next_step", s.step}, {"warmup_steps", s.warmup_steps}, {"num_training_steps", s.total_steps}}},
          {"tokens", s.tokens},
          {"input_tokens", s.input_tokens},
          {"losses", losses},
          {"evals", evals},
          {"cursor",
           {{"epoch", s.cursor.epoch},
            {"position", s.cursor.position},
            {"consumed", s.cursor.consumed},
            {"plan_sha256", s.cursor.plan_sha256}}},
          // Every random draw of training is a pure function of (seed, epoch) or (seed, step):
          // the epoch shuffle (plan_epoch) and the LoRA dropout masks. There is no generator
          // state to carry; the cursor and the step are the whole of it.
          {"rng", {{"kind", "counter-based: (seed, epoch) for the data order, (seed, step) for dropout"}}},
          {"num_threads", s.num_threads},
          {"world_size", s.world_size},
          {"metrics_bytes", s.metrics_bytes},
          {"elapsed_s", s.elapsed_s},
          {"skipped_steps", s.skipped_steps}};
}

TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& origin) {
  TrainerState s;
  try {
    if (j.at("format").get<std::string>() != "medtune-trainer-state" || j.at("version").get<int>() != 1)
      throw BadInput(origin + ": not a version 1 medtune trainer state");
    s.step = j.at("step").get<int64_t>();
    s.total_steps = j.at("total_steps").get<int64_t>();
    s.warmup_steps = j.at("scheduler").at("warmup_steps").get<int64_t>();
    s.tokens = j.at("tokens").get<int64_t>();
    s.input_tokens = j.at("input_tokens").get<int64_t>();
    for (const auto& l : j.at("losses")) s.losses.push_back(number_from(l));
    for (const auto& e : j.at("evals")) {
      EvalPoint p;
      p.step = e.at("step").get<int64_t>();
      p.loss = number_from(e.at("loss"));
      p.tokens = e.at("tokens").get<int64_t>();
      if (e.contains("accuracy")) p.accuracy = e["accuracy"].get<double>();
      s.evals.push_back(p);
    }
    const auto& c = j.at("cursor");
    s.cursor.epoch = c.at("epoch").get<int64_t>();
    s.cursor.position = c.at("position").get<int64_t>();
    s.cursor.consumed = c.at("consumed").get<int64_t>();
    s.cursor.plan_sha256 = c.at("plan_sha256").get<std::string>();
    s.num_threads = j.at("num_threads").get<int64_t>();
    // Absent in checkpoints written before data-parallel training: one process.
    s.world_size = j.value("world_size", int64_t{1});
    s.metrics_bytes = j.at("metrics_bytes").get<int64_t>();
    s.elapsed_s = j.at("elapsed_s").get<double>();
    // Absent in checkpoints written before steps could be skipped: none were.
    s.skipped_steps = j.value("skipped_steps", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(origin + ": " + e.what());
  }
  if (s.step < 0 || static_cast<int64_t>(s.losses.size()) != s.step)
    throw BadInput(origin + ": step " + std::to_string(s.step) + " but " + std::to_string(s.losses.size()) +
                   " losses");
  if (s.skipped_steps < 0 || s.skipped_steps > s.step)
    throw BadInput(origin + ": skipped_steps " + std::to_string(s.skipped_steps) + " is not within 0.." +
                   std::to_string(s.step));
  if (s.cursor.epoch < 0 || s.cursor.position < 0 || s.cursor.consumed < 0)
    throw BadInput(origin + ": negative cursor");
  return s;
}

void write_optimizer_state(const std::string& path, const AdamW& adamw) {
  std::vector<io::TensorToWrite> tensors;
  for (size_t i = 0; i < adamw.num_params(); ++i) {
    const ParamRef& p = adamw.param(i);
    tensors.push_back({p.name + ".exp_avg", DType::F32, {p.numel}, adamw.m(i).data()});
    tensors.push_back({p.name + ".exp_avg_sq", DType::F32, {p.numel}, adamw.v(i).data()});
  }
  const int64_t step = adamw.step_count();
  tensors.push_back({"step", DType::I64, {}, &step});
  io::write_safetensors(path, tensors, {{"format", "medtune-adamw"}});
}

void read_optimizer_state(const std::string& path, AdamW& adamw) {
  const io::SafetensorsFile f = io::read_safetensors(path);
  auto tensor = [&](const std::string& name, DType dtype, int64_t numel) -> const RawTensor& {
    const auto it = f.tensors.find(name);
    if (it == f.tensors.end()) throw BadInput(path + ": no tensor '" + name + "'");
    if (it->second.dtype != dtype || it->second.numel() != numel)
      throw BadInput(path + ": tensor '" + name + "' has " + std::to_string(it->second.numel()) +
                     " elements of another type than the " + std::to_string(numel) + " the run has");
    return it->second;
  };
  if (f.tensors.size() != 2 * adamw.num_params() + 1)
    throw BadInput(path + ": " + std::to_string(f.tensors.size()) + " tensors, expected " +
                   std::to_string(2 * adamw.num_params() + 1) + " (the LoRA targets or rank differ?)");
  for (size_t i = 0; i < adamw.num_params(); ++i) {
    const ParamRef& p = adamw.param(i);
    const RawTensor& m = tensor(p.name + ".exp_avg", DType::F32, p.numel);
    const RawTensor& v = tensor(p.name + ".exp_avg_sq", DType::F32, p.numel);
    std::memcpy(adamw.m(i).data(), m.data, static_cast<size_t>(p.numel) * sizeof(float));
    std::memcpy(adamw.v(i).data(), v.data, static_cast<size_t>(p.numel) * sizeof(float));
  }
  int64_t step = 0;
  std::memcpy(&step, tensor("step", DType::I64, 1).data, sizeof step);
  adamw.set_step_count(step);
}

}  // namespace medtune::train
