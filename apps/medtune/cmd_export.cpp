// medtune export merge|gguf|gguf-lora: what medtune trains, in the files the ecosystem loads.
//   export merge MODEL [--adapter DIR] -o OUT_DIR [--dtype f32|f16|bf16]   Hugging Face directory
//   export gguf MODEL [--adapter DIR] -o OUT.gguf [--type f32|f16|q8_0]    llama.cpp model
//   export gguf-lora --adapter DIR --base MODEL -o OUT.gguf                llama.cpp --lora adapter
// and a hidden helper for the export checks (tools/check_export.py):
//   export logits MODEL [--adapter DIR] --ids 1,2,3 -o OUT.safetensors    logits (T, V) in F32
#include <climits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/output_path.h"
#include "io/peft_adapter.h"
#include "io/safetensors_writer.h"
#include "model/export_gguf.h"
#include "model/export_hf.h"
#include "model/llama.h"
#include "model/lora_peft.h"
#include "tokenizer/gguf_metadata.h"

namespace medtune::cli {

namespace {

std::unique_ptr<model::LoraWeights> read_adapter(const std::string& dir, const ModelConfig& c) {
  if (dir.empty()) return nullptr;
  return std::make_unique<model::LoraWeights>(model::lora_from_peft(io::read_peft_adapter(dir), c, dir));
}

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::cerr << "medtune export: note: " << n << "\n";
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(tok, &used);
      if (used != tok.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(tok);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw BadInput("--ids: '" + tok + "' is not a token id (expected comma-separated integers >= 0)");
    }
  }
  if (ids.empty()) throw BadInput("--ids: no token ids");
  return ids;
}

bool same_path(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

// An export never replaces its own inputs, and replaces anything else only when it is the kind of
// file it writes (a .gguf) or the user said --force: a typo in -o must not destroy a file.
void check_gguf_output(const std::string& out, const std::vector<std::string>& inputs, bool force) {
  io::check_output_file(out, "-o");
  for (const auto& in : inputs)
    if (!in.empty() && same_path(out, in)) throw BadInput("-o " + out + ": is an input of this export (" + in + "); choose another path");
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !force && !starts_with_gguf_magic(out))
    throw BadInput("-o " + out + ": exists and is not a GGUF file; pass --force to overwrite it");
}

// A merged model goes into a directory of its own: never the base's or the adapter's (their files
// are being read), and an existing non-empty directory only with --force, since files of another
// model left beside the new ones (extra shards, a tokenizer) would make a broken mix.
void check_merge_output(const std::string& out, const std::string& model, const std::string& adapter, bool force) {
  namespace fs = std::filesystem;
  io::check_output_dir(out, "-o");
  const std::string base_dir = fs::is_directory(model) ? model : fs::absolute(model).parent_path().string();
  for (const auto& in : {base_dir, adapter})
    if (!in.empty() && same_path(out, in))
      throw BadInput("-o " + out + ": is the directory of an input of this export (" + in +
                     "); writing there would replace the files being read: choose another directory");
  std::error_code ec;
  if (fs::is_directory(out, ec) && !fs::is_empty(out, ec) && !force)
    throw BadInput("-o " + out + ": exists and is not empty; pass --force to write into it (files of the same names are replaced)");
}

}  // namespace

void add_export_command(CLI::App& app) {
  CLI::App* exp = app.add_subcommand("export", "Export a model with its adapter: Hugging Face or GGUF");
  exp->require_subcommand(1);

  struct Args {
    std::string model, adapter, out, dtype = "f32", type = "f16", base, ids;
    bool force = false;
  };
  auto a = std::make_shared<Args>();

  CLI::App* merge = exp->add_subcommand("merge", "Merge a LoRA adapter into the base: a Hugging Face directory");
  merge->add_option("MODEL", a->model, "Hugging Face directory or .gguf file (quantized: dequantized first)")->required();
  merge->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory");
  merge->add_option("-o,--out", a->out, "Output directory")->required();
  merge->add_option("--dtype", a->dtype, "Output dtype")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  merge->add_flag("--force", a->force, "Write into an existing non-empty directory");
  merge->callback([a] {
    check_merge_output(a->out, a->model, a->adapter, a->force);
    const io::Checkpoint ck = io::open_checkpoint(a->model);
    const auto lora = read_adapter(a->adapter, ck.config);
    const DType dt = a->dtype == "f32" ? DType::F32 : a->dtype == "f16" ? DType::F16 : DType::BF16;
    const auto rep = model::export_merged_hf(ck, lora.get(), a->out, dt);
    print_notes(rep.notes);
    std::cout << "wrote " << a->out << ":";
    for (const auto& f : rep.written) std::cout << " " << f;
    std::cout << "\n";
  });

  CLI::App* gguf = exp->add_subcommand("gguf", "The (merged) model as a GGUF file for llama.cpp");
  gguf->add_option("MODEL", a->model, "Hugging Face directory or .gguf file")->required();
  gguf->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory to merge in");
  gguf->add_option("-o,--out", a->out, "Output .gguf file")->required();
  gguf->add_option("--type", a->type, "Type of the 2-D weights (norms stay F32)")->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  gguf->add_flag("--force", a->force, "Overwrite an existing file that is not a GGUF");
  gguf->callback([a] {
    check_gguf_output(a->out, {a->model, a->adapter}, a->force);
    const io::Checkpoint ck = io::open_checkpoint(a->model);
    const auto lora = read_adapter(a->adapter, ck.config);
    const DType type = a->type == "f32" ? DType::F32 : a->type == "f16" ? DType::F16 : DType::Q8_0;
    // A GGUF source keeps its own tokenizer keys; a Hugging Face directory's tokenizer.json is
    // converted to them when llama.cpp has an equivalent.
    std::vector<std::string> notes;
    tokenizer::GgufTokenizerMetadata tok;
    if (ck.format != "gguf") {
      const std::string tj = ck.path + "/tokenizer.json";
      if (std::filesystem::exists(tj)) {
        tok = tokenizer::gguf_tokenizer_metadata(tj, ck.config.vocab_size);
        notes = tok.notes;
      } else {
        tok.unsupported = ck.path + ": no tokenizer.json";
      }
      if (!tok.metadata) {
        notes.push_back("no tokenizer in the GGUF (tokenizer.ggml.model = \"none\", llama.cpp evaluates "
                        "token ids): " + tok.unsupported);
      }
    }
    const auto rep = model::export_merged_gguf(ck, lora.get(), a->out, type, tok.metadata ? &*tok.metadata : nullptr);
    notes.insert(notes.end(), rep.notes.begin(), rep.notes.end());
    print_notes(notes);
    std::cout << "wrote " << a->out << "\n";
  });

  CLI::App* glora = exp->add_subcommand("gguf-lora", "The adapter alone in llama.cpp's GGUF LoRA format (--lora)");
  glora->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory")->required();
  glora->add_option("--base", a->base, "The base model it was trained on (Hugging Face directory or .gguf)")->required();
  glora->add_option("-o,--out", a->out, "Output .gguf file")->required();
  glora->add_flag("--force", a->force, "Overwrite an existing file that is not a GGUF");
  glora->callback([a] {
    check_gguf_output(a->out, {a->base, a->adapter}, a->force);
    const io::Checkpoint ck = io::open_checkpoint(a->base);
    const auto lora = read_adapter(a->adapter, ck.config);
    const auto rep = model::export_lora_gguf(ck, *lora, a->out);
    print_notes(rep.notes);
    std::cout << "wrote " << a->out << "\n";
  });

  CLI::App* logits = exp->add_subcommand("logits", "Logits medtune computes for token ids (for checking exports)");
  logits->group("");  // hidden: a test helper, not a user feature
  logits->add_option("MODEL", a->model, "Hugging Face directory or .gguf file")->required();
  logits->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory");
  logits->add_option("--ids", a->ids, "Comma-separated token ids")->required();
  logits->add_option("-o,--out", a->out, "Output .safetensors (tensor 'logits', F32, (T, V))")->required();
  logits->callback([a] {
    model::LlamaModel m(io::open_checkpoint(a->model));
    const auto lora = read_adapter(a->adapter, m.config());
    m.set_lora(lora.get());
    model::Batch b;
    b.ids = parse_ids(a->ids);
    b.T = static_cast<int64_t>(b.ids.size());
    for (int32_t id : b.ids)
      if (id >= m.config().vocab_size) throw BadInput("--ids: " + std::to_string(id) + " is not below the vocabulary size " + std::to_string(m.config().vocab_size));
    const std::vector<float> out = m.logits(b);
    io::write_safetensors(a->out, {{"logits", DType::F32, {b.T, m.config().vocab_size}, out.data()}}, {});
  });
}

}  // namespace medtune::cli
