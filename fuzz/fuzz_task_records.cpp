// libFuzzer target: read_task_questions on arbitrary bytes (a question file of one of the Open
// Medical-LLM tasks, eval/tasks.h), read as each layout its extension selects (.jsonl, .json,
// .csv: task_records.h) for every task kind (medqa_4options; medmcqa with cop_base -1, 0 and 1;
// pubmedqa; an mmlu task), with skip_invalid false and true, must either return a set or throw
// BadInput. Anything else (a crash, a sanitizer report, nlohmann's exceptions, std::out_of_range,
// an allocation past -malloc_limit_mb) is a bug. A returned set must also hold what tasks.h and
// medqa.h promise: at least one item, every item with the task's option count (4, or 3 for
// pubmedqa) and its answer among them, skipped == skip_reasons.size() and nothing skipped without
// skip_invalid; whatever the strict read accepts, the skipping read accepts the same; and
// task_prompt and task_choices of every item throw nothing but BadInput.
// The reader picks the layout by the path's extension, so the memfd is reached through symlinks
// named q.jsonl, q.json and q.csv in a private temporary directory (nothing is written to disk).
// Seed corpus: fuzz/corpus/task_records/. How to build and run: fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/medqa.h"
#include "eval/tasks.h"
#include "memfd_file.h"

namespace {

constexpr const char* kName = "fuzz_task_records";

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "%s: %s\n", kName, what);
  std::abort();
}

// A private directory of symlinks <dir>/q<ext> -> the memfd, removed at exit.
class ExtensionLinks {
 public:
  explicit ExtensionLinks(const std::string& target) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "medtune_fuzz_task_records.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    dir_ = tmpl;
    for (const char* ext : {".jsonl", ".json", ".csv"}) {
      const std::filesystem::path link = dir_ / (std::string("q") + ext);
      std::filesystem::create_symlink(target, link);
      paths_.push_back(link.string());
    }
  }
  ExtensionLinks(const ExtensionLinks&) = delete;
  ExtensionLinks& operator=(const ExtensionLinks&) = delete;
  ~ExtensionLinks() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::string> paths_;
};

struct Case {
  const char* task;
  int cop_base;
};
constexpr Case kCases[] = {{"medqa_4options", -1}, {"medmcqa", -1}, {"medmcqa", 0},
                           {"medmcqa", 1},         {"pubmedqa", -1}, {"mmlu_anatomy", -1}};

void check_rendering(const medtune::eval::TaskSpec& task, const medtune::eval::McqItem& item) {
  try {
    (void)medtune::eval::task_prompt(task, item);
    const auto choices = medtune::eval::task_choices(task, item);
    if (choices.size() != item.options.size()) broken("task_choices differs in count from the options");
  } catch (const medtune::BadInput&) {
    // allowed by the contract
  } catch (const std::exception& e) {
    medtune::fuzz::unexpected_exception(kName, e.what());
  }
}

std::optional<medtune::eval::McqSet> read(const medtune::eval::TaskSpec& task, const std::string& path,
                                          int cop_base, bool skip_invalid) {
  medtune::eval::McqSet set;
  try {
    set = medtune::eval::read_task_questions(task, path, {cop_base, skip_invalid});
  } catch (const medtune::BadInput&) {
    return std::nullopt;  // expected for malformed input
  } catch (const std::exception& e) {
    medtune::fuzz::unexpected_exception(kName, e.what());
  }
  const int want_options = task.kind == medtune::eval::TaskKind::pubmedqa ? 3 : 4;
  if (set.items.empty()) broken("a returned set has no items");
  if (set.num_options != want_options) broken("num_options is not the task's option count");
  if (set.skipped != static_cast<int64_t>(set.skip_reasons.size()))
    broken("skipped does not match skip_reasons");
  if (!skip_invalid && set.skipped != 0) broken("records skipped without skip_invalid");
  for (const medtune::eval::McqItem& item : set.items) {
    if (static_cast<int>(item.options.size()) != want_options)
      broken("an item's option count differs from the task's");
    if (item.answer < 0 || item.answer >= want_options) broken("answer out of range");
    check_rendering(task, item);
  }
  return set;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static medtune::fuzz::MemfdFile input;
  static const ExtensionLinks links(input.path());
  input.write(data, size);
  for (const std::string& path : links.paths()) {
    for (const Case& c : kCases) {
      const medtune::eval::TaskSpec& task = medtune::eval::task_spec(c.task);
      const auto strict = read(task, path, c.cop_base, false);
      const auto lenient = read(task, path, c.cop_base, true);
      // Whatever the strict read accepts, the lenient one accepts identically (nothing to skip).
      if (strict) {
        if (!lenient) broken("skip_invalid rejects a file the strict read accepts");
        if (lenient->items.size() != strict->items.size() || lenient->skipped != 0)
          broken("skip_invalid reads a valid file differently");
      }
    }
  }
  return 0;
}
