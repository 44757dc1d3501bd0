// The Open Medical-LLM Leaderboard's nine lm-evaluation-harness tasks, zero-shot, metric acc,
// each as lm-eval's task YAML and utils define it (lm_eval/tasks/{medqa,medmcqa,pubmedqa,mmlu}):
//
//   task                 prompt (doc_to_text)                                  choices    target
//   medqa_4options       "Question: {sent1}\nA. {ending0}\n..D. {ending3}\nAnswer:" A B C D  label
//   medmcqa              "Question: {question}\nChoices:\nA. {opa}\n..D. {opd}\nAnswer:"   cop
//                                                                               A B C D
//   pubmedqa             "Abstract: {CONTEXTS joined by \n}\nQuestion: {QUESTION}\nAnswer:"
//                                                                     yes no maybe  final_decision
//   mmlu_<subject>       description "The following are multiple choice questions (with answers)
//                        about {subject, _ as space}.\n\n" then
//                        "{question.strip()}\nA. {choices[0]}\n..D. {choices[3]}\nAnswer:"
//                                                                               A B C D  answer
// Every continuation is target_delimiter " " + the choice, so the letter tasks score " A" .. " D"
// (Scoring::letter) and pubmedqa scores " yes" " no" " maybe" (Scoring::text); prediction =
// argmax of the log-likelihood, acc = mean(pred == gold), lm-eval's output_type multiple_choice.
//
// Records are read in the layouts each data set is published in (task_records.h for the files):
//   medqa_4options  lm-eval/HF GBaker: sent1, ending0..ending3, label (0-3);
//                   MedQA's release: question, options {"A".."D"} (or a list), answer_idx "A".."D"
//   medmcqa         question, opa, opb, opc, opd, cop: 1-4 in the original release, 0-3 in the HF
//                   dataset (openlifescienceai/medmcqa, lm-eval's source). Which one is read from
//                   McqTaskOptions::cop_base, or detected: a file with a cop of 0 is 0-based, one
//                   with a cop of 4 is 1-based; both, or neither, is refused.
//   pubmedqa        the original ori_pqal.json (keyed by PMID) and bigbio/pubmed_qa's source
//                   schema: QUESTION, CONTEXTS [..], final_decision;
//                   HF pubmed_qa pqa_labeled: question, context {contexts [..]}, final_decision
//   mmlu_*          HF cais/mmlu: question, choices [4], answer (0-3, or a letter), subject (when
//                   present it must be the task's); the original release's headerless CSV:
//                   question,A,B,C,D,answer-letter
#pragma once

#include <string>
#include <vector>

#include "eval/medqa.h"

namespace medtune::eval {

enum class TaskKind { medqa, medmcqa, pubmedqa, mmlu };

struct TaskSpec {
  std::string name;          // lm-eval's task name
  TaskKind kind;
  std::string mmlu_subject;  // "clinical_knowledge" for mmlu_clinical_knowledge; empty otherwise
  bool scores_option_text;   // pubmedqa: the choices are the answers' words, not letters
};

// The nine tasks in the leaderboard's order.
const std::vector<TaskSpec>& open_medical_llm_tasks();
// BadInput naming the valid tasks for an unknown name.
const TaskSpec& task_spec(const std::string& name);

struct McqTaskOptions {
  int cop_base = -1;  // medmcqa: 0 or 1; -1 detects it from the file
  bool skip_invalid = false;
};

// Reads a task's questions from a file in any of its published layouts (above). Errors name the
// file, the line (or record key) and the field; with skip_invalid a bad record is counted and
// passed over, but a file-level problem (undetectable cop base) still stops.
McqSet read_task_questions(const TaskSpec& task, const std::string& path, const McqTaskOptions& options);

// The context lm-eval scores the choices after (description + doc_to_text, zero-shot).
std::string task_prompt(const TaskSpec& task, const McqItem& item);

// The choices as lm-eval lists them (doc_to_choice): "A".."D", or pubmedqa's "yes" "no" "maybe".
std::vector<std::string> task_choices(const TaskSpec& task, const McqItem& item);

}  // namespace medtune::eval
