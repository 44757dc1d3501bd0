#include "train/run_manifest.h"

#include <ctime>
#include <filesystem>

#include "backend/backend.h"
#include "core/error.h"
#include "core/sha256.h"
#include "io/atomic_file.h"
#include "io/provenance.h"
#include "io/safetensors.h"
#include "io/whole_file.h"

namespace medtune::train {

namespace fs = std::filesystem;

nlohmann::json make_run_inputs(const TrainConfig& cfg, const RunIdentity& identity, int threads) {
  // Identity records model files by name and data files by their configured path.
  const bool model_dir = fs::is_directory(cfg.base_model);
  std::vector<nlohmann::json> model_files, data_files;
  for (const auto& f : identity.model_files)
    model_files.push_back(io::to_json(
        {model_dir ? (fs::path(cfg.base_model) / f.name).string() : cfg.base_model, f.bytes, f.sha256}));
  for (const auto& f : identity.data_files) data_files.push_back(io::to_json({f.name, f.bytes, f.sha256}));
  return {
      {"medtune_version", MEDTUNE_VERSION},
      {"backend", cfg.device == "cpu" ? std::string("cpu") : "gpu (" + std::string(backend::gpu_backend_name()) + ")"},
      {"device", cfg.device},
      {"precision", cfg.precision},
      {"threads", threads},
      {"seed", cfg.seed},
      {"base_model", {{"path", cfg.base_model}, {"files", model_files}}},
      {"datasets", data_files},
      {"training_config_sha256", identity.config_sha256},
      {"examples_sha256", identity.examples_sha256},
  };
}

nlohmann::json config_digest(const std::string& run_dir) {
  io::FileDigest d = io::digest_file((fs::path(run_dir) / "config_resolved.json").string());
  d.path = "config_resolved.json";
  return io::to_json(d);
}

std::string run_inputs_sha256(const nlohmann::json& inputs) { return sha256_hex(inputs.dump()); }

std::string utc_timestamp_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json make_run_manifest(nlohmann::json inputs) {
  nlohmann::json m;
  m["format"] = kManifestFormat;
  m["inputs_sha256"] = run_inputs_sha256(inputs);
  m["inputs"] = std::move(inputs);
  m["run"] = nlohmann::json::object();
  m["outputs"] = nlohmann::json::array();
  return m;
}

void write_run_manifest(const std::string& run_dir, const nlohmann::json& manifest) {
  io::atomic_write_file((fs::path(run_dir) / "manifest.json").string(), manifest.dump(2) + "\n");
}

namespace {

nlohmann::json read_manifest(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw BadInput(path + ": no such file (is this a medtune training run directory?)");
  const nlohmann::json m = io::read_json_file(path);
  const auto format = m.is_object() ? m.find("format") : m.end();
  if (format == m.end() || !format->is_string() || *format != kManifestFormat)
    throw BadInput(path + ": not a medtune run manifest (\"format\" is not \"" + kManifestFormat +
                   "\")");
  for (const char* key : {"inputs", "inputs_sha256", "outputs"})
    if (!m.contains(key)) throw BadInput(path + ": field \"" + key + "\" is missing");
  return m;
}

// Relative recorded paths (run outputs, the resolved config) live in the run directory.
std::string resolve(const std::string& run_dir, const std::string& recorded) {
  const fs::path p(recorded);
  return p.is_absolute() ? recorded : (fs::path(run_dir) / p).string();
}

void check_file(std::vector<VerifyItem>& out, const std::string& run_dir, const nlohmann::json& j,
                const std::string& where) {
  const io::FileDigest d = io::file_digest_from_json(j, where);
  out.push_back({d.path, io::digest_mismatch(d, resolve(run_dir, d.path))});
}

void check_list(std::vector<VerifyItem>& out, const std::string& run_dir, const nlohmann::json& list,
                const std::string& where) {
  if (!list.is_array()) throw BadInput(where + ": expected an array of file digests");
  for (size_t i = 0; i < list.size(); ++i) check_file(out, run_dir, list[i], where + "[" + std::to_string(i) + "]");
}

}  // namespace

std::vector<VerifyItem> verify_run(const std::string& run_dir, std::string* run_status) {
  const std::string path = (fs::path(run_dir) / "manifest.json").string();
  const nlohmann::json m = read_manifest(path);
  if (run_status != nullptr) {
    const auto run = m.find("run");
    *run_status = run != m.end() && run->is_object() && run->contains("status") && (*run)["status"].is_string()
                      ? (*run)["status"].get<std::string>()
                      : "";
  }
  const nlohmann::json& in = m["inputs"];
  std::vector<VerifyItem> out;

  const std::string recorded_id = m["inputs_sha256"].get<std::string>();
  const std::string id = run_inputs_sha256(in);
  out.push_back({"manifest.json inputs (run identity)",
                 id == recorded_id ? "" : "SHA-256 of \"inputs\" is " + id + ", manifest says " + recorded_id +
                                              " (the manifest was edited)"});

  const std::string where = path + ": inputs.";
  if (!in.contains("base_model") || !in["base_model"].contains("files"))
    throw BadInput(where + "base_model.files is missing");
  check_list(out, run_dir, in["base_model"]["files"], where + "base_model.files");
  if (in.contains("datasets")) check_list(out, run_dir, in["datasets"], where + "datasets");
  if (m.contains("config_resolved")) check_file(out, run_dir, m["config_resolved"], path + ": config_resolved");
  check_list(out, run_dir, m["outputs"], path + ": outputs");

  // The adapter names the run it came from.
  const std::string adapter = (fs::path(run_dir) / "adapter" / "adapter_model.safetensors").string();
  std::string problem;
  try {
    const auto st = io::read_safetensors(adapter);
    const auto it = st.metadata.find(kAdapterManifestKey);
    if (it == st.metadata.end())
      problem = std::string("metadata has no ") + kAdapterManifestKey;
    else if (it->second != recorded_id)
      problem = std::string(kAdapterManifestKey) + " is " + it->second + ", the manifest's inputs hash is " + recorded_id;
  } catch (const BadInput& e) {
    problem = e.what();
  }
  out.push_back({"adapter/adapter_model.safetensors metadata", problem});
  return out;
}

}  // namespace medtune::train
