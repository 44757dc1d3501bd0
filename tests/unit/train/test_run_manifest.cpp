// The run manifest: what `medtune verify` checks. A run directory is built from small files, its
// manifest written, then files are changed one at a time; each change must be reported by name,
// and nothing else.
#include "train/run_manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/sha256.h"
#include "io/provenance.h"
#include "io/safetensors_writer.h"

namespace medtune::train {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

class RunManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("medtune_manifest_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    model_ = root_ / "model";
    write(model_ / "config.json", "{\"model_type\": \"llama\"}");
    write(model_ / "model.safetensors", "weights");
    write(model_ / "tokenizer.json", "{}");
    write(model_ / "README.md", "not read by medtune: not hashed");
    write(root_ / "train.jsonl", "{\"question\": \"q\"}\n");
    cfg_.base_model = model_.string();
    cfg_.datasets.push_back({(root_ / "train.jsonl").string(), DatasetType::kMedqa});
    cfg_.output_dir = (root_ / "run").string();
    cfg_.seed = 7;
    write(root_ / "run" / "config_resolved.json", "{\"seed\": 7}");

    manifest_ = make_run_manifest(make_run_inputs(cfg_, compute_identity(cfg_, {}, {}), 2));
    manifest_["config_resolved"] = config_digest(cfg_.output_dir);
    fs::create_directories(root_ / "run" / "adapter");
    const float a[2] = {1.0f, 2.0f};
    io::write_safetensors((root_ / "run" / "adapter" / "adapter_model.safetensors").string(),
                          {{"a", DType::F32, {2}, a}},
                          {{kAdapterManifestKey, manifest_["inputs_sha256"].get<std::string>()}});
    io::FileDigest adapter = io::digest_file((root_ / "run" / "adapter" / "adapter_model.safetensors").string());
    adapter.path = "adapter/adapter_model.safetensors";
    manifest_["outputs"].push_back(io::to_json(adapter));
    write_run_manifest(cfg_.output_dir, manifest_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // The subjects verify_run reports as not matching.
  std::vector<std::string> problems() {
    std::vector<std::string> out;
    for (const auto& item : verify_run(cfg_.output_dir))
      if (!item.problem.empty()) out.push_back(item.subject + ": " + item.problem);
    return out;
  }

  fs::path root_, model_;
  TrainConfig cfg_;
  nlohmann::json manifest_;
};

TEST_F(RunManifestTest, RecordsWhatTheRunReads) {
  const auto& in = manifest_["inputs"];
  EXPECT_EQ(in["seed"], 7);
  EXPECT_EQ(in["threads"], 2);
  EXPECT_EQ(in["medtune_version"], MEDTUNE_VERSION);
  ASSERT_EQ(in["base_model"]["files"].size(), 3u);  // config, weights, tokenizer; not README.md
  EXPECT_EQ(in["base_model"]["files"][1]["path"], (model_ / "model.safetensors").string());
  EXPECT_EQ(in["base_model"]["files"][1]["sha256"], sha256_hex("weights"));
  EXPECT_EQ(in["base_model"]["files"][1]["bytes"], 7);
  EXPECT_EQ(in["datasets"][0]["sha256"], sha256_hex("{\"question\": \"q\"}\n"));
  EXPECT_EQ(manifest_["config_resolved"]["path"], "config_resolved.json");
  EXPECT_EQ(in["training_config_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(manifest_["inputs_sha256"], sha256_hex(in.dump()));
}

TEST_F(RunManifestTest, UntouchedRunVerifies) {
  const auto items = verify_run(cfg_.output_dir);
  EXPECT_EQ(items.size(), 8u);  // identity, 3 model files, data, config, adapter, its metadata
  EXPECT_TRUE(problems().empty()) << ::testing::PrintToString(problems());
}

TEST_F(RunManifestTest, ReportsEachChangedFileByName) {
  write(model_ / "model.safetensors", "weightz");  // same size, other bytes
  write(root_ / "train.jsonl", "{\"question\": \"q2\"}\n");
  const auto p = problems();
  ASSERT_EQ(p.size(), 2u) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("model.safetensors: SHA-256"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("train.jsonl: size 18 -> 19 bytes"), std::string::npos) << p[1];
}

TEST_F(RunManifestTest, ReportsMissingFilesAndEditedManifest) {
  fs::remove(root_ / "train.jsonl");
  auto m = manifest_;
  m["inputs"]["seed"] = 8;  // someone edits the record
  write_run_manifest(cfg_.output_dir, m);
  const auto p = problems();
  ASSERT_EQ(p.size(), 2u) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("the manifest was edited"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("train.jsonl: missing"), std::string::npos) << p[1];
}

TEST_F(RunManifestTest, AdapterMustNameTheRun) {
  const float a[2] = {1.0f, 2.0f};
  io::write_safetensors((root_ / "run" / "adapter" / "adapter_model.safetensors").string(),
                        {{"a", DType::F32, {2}, a}}, {{"format", "pt"}});
  const auto p = problems();
  ASSERT_EQ(p.size(), 2u) << ::testing::PrintToString(p);  // its digest and its metadata
  EXPECT_NE(p[1].find(std::string("metadata has no ") + kAdapterManifestKey), std::string::npos) << p[1];
}

TEST_F(RunManifestTest, NoManifestIsBadInputNamingThePath) {
  fs::remove(root_ / "run" / "manifest.json");
  try {
    verify_run(cfg_.output_dir);
    FAIL() << "expected BadInput";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "manifest.json: no such file (is this a medtune training run directory?)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace medtune::train
