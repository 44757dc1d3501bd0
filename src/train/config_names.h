// The names a training config spells its enumerations with, and the axolotl per-dataset keys: read
// by train_config.cpp, written back by train_config_write.cpp. Internal to those files.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "train/train_config.h"

namespace medtune::train::config {

inline constexpr std::array<std::pair<std::string_view, AdapterKind>, 2> kAdapters{
    {{"lora", AdapterKind::kLora}, {"qlora", AdapterKind::kQlora}}};
inline constexpr std::array<std::pair<std::string_view, BaseQuant>, 2> kBaseQuants{
    {{"none", BaseQuant::kNone}, {"nf4", BaseQuant::kNf4}}};
// The task names are eval::open_medical_llm_tasks()'s (test_apps TaskDatasetTypes checks it: the
// config is read below eval/ in the build's layering, so it cannot ask).
inline constexpr std::array<std::pair<std::string_view, DatasetType>, 15> kDatasetTypes{
    {{"medqa", DatasetType::kMedqa},
     {"chat", DatasetType::kChat},
     {"alpaca", DatasetType::kAlpaca},
     {"completion", DatasetType::kCompletion},
     {"input_output", DatasetType::kInputOutput},
     {"chat_template", DatasetType::kChatTemplate},
     {"medqa_4options", DatasetType::kMedqa4Options},
     {"medmcqa", DatasetType::kMedmcqa},
     {"pubmedqa", DatasetType::kPubmedqa},
     {"mmlu_anatomy", DatasetType::kMmluAnatomy},
     {"mmlu_clinical_knowledge", DatasetType::kMmluClinicalKnowledge},
     {"mmlu_college_biology", DatasetType::kMmluCollegeBiology},
     {"mmlu_college_medicine", DatasetType::kMmluCollegeMedicine},
     {"mmlu_medical_genetics", DatasetType::kMmluMedicalGenetics},
     {"mmlu_professional_medicine", DatasetType::kMmluProfessionalMedicine}}};
inline constexpr std::array<std::pair<std::string_view, PromptFormat>, 2> kPromptFormats{
    {{"lm_eval", PromptFormat::kLmEval}, {"chat", PromptFormat::kChat}}};
inline constexpr std::array<std::pair<std::string_view, AnswerTarget>, 2> kAnswerTargets{
    {{"letter", AnswerTarget::kLetter}, {"text", AnswerTarget::kText}}};
// cosine_with_min_lr needs min_lr, which configs do not have yet.
inline constexpr std::array<std::pair<std::string_view, ScheduleKind>, 4> kSchedulers{
    {{"cosine", ScheduleKind::kCosine},
     {"linear", ScheduleKind::kLinear},
     {"constant", ScheduleKind::kConstant},
     {"constant_with_warmup", ScheduleKind::kConstantWithWarmup}}};

inline constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kAutoTrueFalse{
    {{"auto", "auto"}, {"true", "true"}, {"false", "false"}}};

// How a data-parallel job sums gradients over ranks (dist/gradient_sum.h).
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kReductions{
    {{"auto", "auto"}, {"ordered", "ordered"}, {"allreduce", "allreduce"}}};

// The axolotl per-dataset keys that hold a name, each with the type that reads it (a key its
// type does not read would be silently ignored, so it is an error). roles_to_train and
// message_property_mappings are read in read_dataset_key.
struct DatasetKey {
  std::string_view name;
  std::string DatasetSpec::*field;
  DatasetType type;
};
inline constexpr std::array<DatasetKey, 9> kDatasetKeys{{
    {"field", &DatasetSpec::field, DatasetType::kCompletion},
    {"field_instruction", &DatasetSpec::field_instruction, DatasetType::kAlpaca},
    {"field_input", &DatasetSpec::field_input, DatasetType::kAlpaca},
    {"field_output", &DatasetSpec::field_output, DatasetType::kAlpaca},
    {"field_system", &DatasetSpec::field_system, DatasetType::kChatTemplate},
    {"field_messages", &DatasetSpec::field_messages, DatasetType::kChatTemplate},
    {"message_field_role", &DatasetSpec::message_field_role, DatasetType::kChatTemplate},
    {"message_field_content", &DatasetSpec::message_field_content, DatasetType::kChatTemplate},
    {"train_on_eos", &DatasetSpec::train_on_eos, DatasetType::kChatTemplate},
}};
inline constexpr std::array<std::string_view, 4> kTrainOnEos{"turn", "all", "last", "none"};

}  // namespace medtune::train::config
