// The train config's lm-eval task dataset types (train_config.h: kMedqa4Options ..) are exactly
// eval's nine tasks, by name: train/ cannot ask eval/ (layering), so this test ties the two lists.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "eval/tasks.h"
#include "train/train_config.h"
#include "support/scratch_dir.h"

using namespace medtune;
namespace fs = std::filesystem;

TEST(TaskDatasetTypes, EveryEvalTaskIsADatasetTypeOfTheSameName) {
  const fs::path dir = medtune::testing::scratch_dir("task_types");
  fs::create_directories(dir);
  const fs::path yaml = dir / "run.yaml";
  std::string text = "base_model: m.gguf\ndatasets:\n";
  for (const auto& task : eval::open_medical_llm_tasks()) text += "  - path: d.jsonl\n    type: " + task.name + "\n";
  std::ofstream(yaml) << text;
  const train::TrainConfig cfg = train::load_train_config(yaml.string());
  ASSERT_EQ(cfg.datasets.size(), eval::open_medical_llm_tasks().size());
  for (size_t i = 0; i < cfg.datasets.size(); ++i) {
    EXPECT_TRUE(train::is_lm_eval_task_type(cfg.datasets[i].type));
    EXPECT_EQ(train::dataset_type_name(cfg.datasets[i].type), eval::open_medical_llm_tasks()[i].name);
  }
  EXPECT_FALSE(train::is_lm_eval_task_type(train::DatasetType::kMedqa));
  EXPECT_FALSE(train::is_lm_eval_task_type(train::DatasetType::kChatTemplate));
}

TEST(TaskDatasetTypes, CopBaseBelongsToMedmcqa) {
  const fs::path dir = medtune::testing::scratch_dir("task_types");
  fs::create_directories(dir);
  const fs::path yaml = dir / "cop.yaml";
  std::ofstream(yaml) << "base_model: m.gguf\ndatasets:\n  - path: d.jsonl\n    type: medmcqa\n    cop_base: 1\n";
  EXPECT_EQ(train::load_train_config(yaml.string()).datasets[0].cop_base, 1);
  std::ofstream(yaml) << "base_model: m.gguf\ndatasets:\n  - path: d.jsonl\n    type: pubmedqa\n    cop_base: 1\n";
  try {
    train::load_train_config(yaml.string());
    ADD_FAILURE() << "cop_base on pubmedqa was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("datasets[0].cop_base is a key of type medmcqa, not pubmedqa"), std::string::npos)
        << e.what();
  }
}
