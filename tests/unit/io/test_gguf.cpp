// GGUF reader and GGUF -> Checkpoint against files written (or deliberately broken) by
// tools/make_gguf_fixtures.py with gguf-py's GGUFWriter.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/quant.h"
#include "io/checkpoint.h"
#include "io/gguf.h"
#include "support/scratch_dir.h"

namespace medtune::io {
namespace {

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/gguf/";
const std::string kQuantDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/quant/";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> read_floats(const std::string& path) {
  const std::vector<uint8_t> b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Runs `fn` and expects BadInput whose message contains the path and every needle.
template <typename Fn>
void expect_bad_input(const std::string& path, Fn fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << path << ": no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "path not in: " << msg;
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

void expect_bad_file(const std::string& file, std::initializer_list<std::string> needles) {
  const std::string path = kDir + file;
  SCOPED_TRACE(file);
  expect_bad_input(
      path, [&] { GgufFile::open(path); }, needles);
}

// ------------------------------------------------------------------ metadata

TEST(Gguf, ReadsHeaderAndEveryValueType) {
  const GgufFile g = GgufFile::open(kDir + "tiny_llama.gguf");
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.path(), kDir + "tiny_llama.gguf");
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), 2);
  EXPECT_EQ(g.get_int("test.u8"), 200);
  EXPECT_EQ(g.get_int("test.i8"), -100);
  EXPECT_EQ(g.get_int("test.u16"), 60000);
  EXPECT_EQ(g.get_int("test.i16"), -30000);
  EXPECT_EQ(g.get_int("test.u32"), 4000000000LL);
  EXPECT_EQ(g.get_int("test.i32"), -2000000000LL);
  EXPECT_EQ(g.get_int("test.u64"), int64_t{1} << 40);
  EXPECT_EQ(g.get_int("test.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(g.get_float("test.f32"), 0.25);
  EXPECT_EQ(g.get_float("test.f64"), -1.5e-300);
  EXPECT_EQ(g.get_float("test.u16"), 60000.0);  // integers widen
  EXPECT_TRUE(g.get_bool("test.bool"));
  EXPECT_EQ(g.get_string("test.string"), "h\xc3\xa9llo");
  EXPECT_EQ(g.metadata().at("test.u16").type, GgufValue::Type::U16);
  EXPECT_EQ(g.metadata().at("test.i64").type, GgufValue::Type::I64);
  // The f32 value is widened exactly: 1e-5f, not 1e-5.
  EXPECT_EQ(g.get_float("llama.attention.layer_norm_rms_epsilon"), static_cast<double>(1e-5f));

  EXPECT_EQ(g.get_int_array("test.arr_u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(g.get_int_array("test.arr_i16"), (std::vector<int64_t>{-1, 7}));
  EXPECT_EQ(g.get_int_array("test.arr_u64"), (std::vector<int64_t>{0, int64_t{1} << 50}));
  EXPECT_EQ(g.get_float_array("test.arr_f64"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(g.get_float_array("test.arr_f32"), (std::vector<double>{0.5, 3.0}));
  EXPECT_EQ(g.get_float_array("test.arr_u8"), (std::vector<double>{1, 2, 255}));
  EXPECT_EQ(g.metadata().at("test.arr_bool").elem_type, GgufValue::Type::BOOL);
  const auto& tokens = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(g.get_int_array("tokenizer.ggml.token_type").size(), 32u);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges"), (std::vector<std::string>{"t 1", "t1 0"}));

  EXPECT_EQ(g.get_int_or("llama.absent", 7), 7);
  EXPECT_EQ(g.get_float_or("llama.absent", 2.5), 2.5);
  EXPECT_FALSE(g.get_bool_or("llama.absent", false));
  EXPECT_EQ(g.get_string_or("llama.absent", "x"), "x");
  EXPECT_EQ(g.get_int_or("llama.block_count", 7), 2);
}

TEST(Gguf, GettersNameFileAndKeyOnError) {
  const std::string path = kDir + "tiny_llama.gguf";
  const GgufFile g = GgufFile::open(path);
  expect_bad_input(path, [&] { g.get_int("general.name"); },
                   {"metadata key 'general.name'", "has type string, expected an integer"});
  expect_bad_input(path, [&] { g.get_string("llama.nope"); },
                   {"metadata key 'llama.nope' is missing"});
  expect_bad_input(path, [&] { g.get_bool("test.u8"); },
                   {"metadata key 'test.u8'", "expected bool"});
  expect_bad_input(path, [&] { g.get_string_array("tokenizer.ggml.token_type"); },
                   {"'tokenizer.ggml.token_type'", "array of i32", "expected array of string"});
  expect_bad_input(path, [&] { g.get_int_array("test.arr_f32"); }, {"'test.arr_f32'"});
  expect_bad_input(path, [&] { g.get_float("test.string"); }, {"'test.string'"});
  expect_bad_input(path, [&] { g.get_int_or("general.name", 1); }, {"'general.name'"});
}

// ------------------------------------------------------------------ tensors

TEST(Gguf, TensorInfosShapesAndPlacement) {
  const GgufFile g = GgufFile::open(kDir + "tiny_llama.gguf");
  // 2 + output + rope_freqs + 2 layers x 9
  EXPECT_EQ(g.tensors().size(), 22u);
  ASSERT_EQ(g.tensor_order().size(), 22u);
  EXPECT_EQ(g.tensor_order()[0], "token_embd.weight");
  const RawTensor& emb = g.tensors().at("token_embd.weight");
  EXPECT_EQ(emb.dtype, DType::Q8_0);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{32, 32}));  // (vocab, hidden), PyTorch order
  EXPECT_EQ(emb.nbytes, 32 * 34);
  const RawTensor& k = g.tensors().at("blk.0.attn_k.weight");
  EXPECT_EQ(k.dtype, DType::F16);
  EXPECT_EQ(k.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(k.nbytes, 16 * 32 * 2);
  EXPECT_EQ(g.tensors().at("blk.0.attn_v.weight").dtype, DType::BF16);
  EXPECT_EQ(g.tensors().at("blk.0.attn_q.weight").dtype, DType::Q4_1);
  EXPECT_EQ(g.tensors().at("output.weight").dtype, DType::Q4_0);
  EXPECT_EQ(g.tensors().at("output_norm.weight").shape, (std::vector<int64_t>{32}));
  for (const auto& [name, t] : g.tensors()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(t.name, name);
    ASSERT_TRUE(t.file);
    const int64_t off = t.data - t.file->data();
    EXPECT_EQ(off % 32, 0);
    EXPECT_LE(off + t.nbytes, static_cast<int64_t>(t.file->size()));
    EXPECT_EQ(t.nbytes, dtype_row_bytes(t.dtype, t.shape.back()) * (t.numel() / t.shape.back()));
  }
}

// all_types.gguf holds the first 512 elements of each quant fixture as a [2, 256] tensor, with
// general.alignment = 64: reading through the GGUF must give gguf-py's values bit for bit.
TEST(Gguf, EveryTypeDequantizesLikeGgufPy) {
  const GgufFile g = GgufFile::open(kDir + "all_types.gguf");
  EXPECT_EQ(g.get_int("general.alignment"), 64);
  const std::pair<const char*, DType> types[] = {
      {"F32", DType::F32},   {"F16", DType::F16},   {"BF16", DType::BF16}, {"Q8_0", DType::Q8_0},
      {"Q4_0", DType::Q4_0}, {"Q4_1", DType::Q4_1}, {"Q4_K", DType::Q4_K}, {"Q6_K", DType::Q6_K},
      {"Q5_0", DType::Q5_0}, {"Q5_1", DType::Q5_1}, {"Q5_K", DType::Q5_K},
      {"Q2_K", DType::Q2_K}, {"Q3_K", DType::Q3_K}, {"IQ4_NL", DType::IQ4_NL},
      {"IQ4_XS", DType::IQ4_XS}};
  for (const auto& [name, dt] : types) {
    SCOPED_TRACE(name);
    const RawTensor& t = g.tensors().at(std::string("t.") + name);
    EXPECT_EQ(t.dtype, dt);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 256}));
    EXPECT_EQ((t.data - t.file->data()) % 64, 0);
    const std::vector<float> want = read_floats(kQuantDir + name + ".f32");
    ASSERT_GE(want.size(), 512u);
    std::vector<float> got(512);
    for (int r = 0; r < 2; ++r)
      dequantize_row(dt, t.data + r * dtype_row_bytes(dt, 256), got.data() + r * 256, 256);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), 512 * 4), 0);
  }
  const RawTensor& t3 = g.tensors().at("t.3d");
  EXPECT_EQ(t3.shape, (std::vector<int64_t>{2, 3, 4}));  // ne = [4, 3, 2] reversed
  float v[24];
  std::memcpy(v, t3.data, sizeof v);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
}

TEST(Gguf, ReadsVersion2) {
  const GgufFile g = GgufFile::open(kDir + "tiny_qwen2.gguf");
  EXPECT_EQ(g.version(), 2u);
  EXPECT_EQ(g.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(g.tensors().at("blk.1.attn_k.bias").shape, (std::vector<int64_t>{16}));
}

TEST(Gguf, ParsesFromMemory) {
  std::vector<uint8_t> bytes = read_bytes(kDir + "tiny_llama.gguf");
  const size_t n = bytes.size();
  const GgufFile g = GgufFile::parse(MappedFile::from_bytes("<memory>", std::move(bytes)));
  EXPECT_EQ(g.path(), "<memory>");
  EXPECT_EQ(g.tensors().size(), 22u);
  const RawTensor& t = g.tensors().at("output_norm.weight");
  EXPECT_GE(t.data, t.file->data());
  EXPECT_LE(t.data + t.nbytes, t.file->data() + n);
  expect_bad_input("<empty>", [] { GgufFile::parse(MappedFile::from_bytes("<empty>", {})); },
                   {"not a GGUF file"});
}

// ------------------------------------------------------------------ broken files

TEST(GgufBroken, EachNamesTheFileAndTheCulprit) {
  expect_bad_file("bad_magic.gguf", {"not a GGUF file", "'GGUX'"});
  expect_bad_file("bad_version.gguf", {"GGUF version 1 is not supported"});
  expect_bad_file("bad_truncated_header.gguf", {"truncated at byte 8", "tensor count"});
  expect_bad_file("bad_truncated_metadata.gguf",
                  {"truncated at byte", "metadata key 'llama.block_count'"});
  expect_bad_file("bad_truncated_tensor_infos.gguf",
                  {"truncated at byte", "tensor 'blk.1.attn_q.weight'"});
  expect_bad_file("bad_truncated_data.gguf",
                  {"tensor 'blk.1.ffn_down.weight'", "outside the file"});
  expect_bad_file("bad_huge_array.gguf",
                  {"metadata key 'tokenizer.ggml.tokens'", "4611686018427387904", "cannot fit"});
  expect_bad_file("bad_huge_string.gguf", {"metadata key 'general.name'", "string length"});
  expect_bad_file("bad_huge_tensor_count.gguf", {"1099511627776 tensors"});
  expect_bad_file("bad_offset_outside.gguf",
                  {"tensor 'blk.1.ffn_down.weight'", "outside the file"});
  expect_bad_file("bad_misaligned_offset.gguf",
                  {"tensor 'blk.0.ffn_up.weight'", "not a multiple of the alignment 32"});
  expect_bad_file("bad_unknown_type.gguf",
                  {"tensor 'blk.0.attn_output.weight'", "ggml type 99 (unknown)"});
  expect_bad_file("bad_unsupported_type.gguf",
                  {"tensor 'blk.0.attn_output.weight'", "ggml type 16 (IQ2_XXS) is not supported"});
  expect_bad_file("bad_ndims.gguf", {"tensor 'output_norm.weight'", "n_dims = 5"});
  expect_bad_file("bad_block.gguf",
                  {"tensor 'token_embd.weight'", "ne[0] = 48", "Q8_0 block size 32"});
  expect_bad_file("bad_huge_dim.gguf", {"tensor 'output.weight'", "overflow"});
  expect_bad_file("bad_huge_bytes.gguf", {"tensor 'output_norm.weight'", "byte size", "overflows"});
  expect_bad_file("bad_overlap.gguf",
                  {"tensor 'output_norm.weight'", "overlaps tensor 'token_embd.weight'"});
  expect_bad_file("bad_value_type.gguf",
                  {"metadata key 'llama.context_length'", "unknown value type 13"});
  expect_bad_file("bad_alignment.gguf", {"metadata key 'general.alignment'", "power of two"});
  expect_bad_file("bad_nested_array.gguf", {"metadata key 'test.nested'", "arrays of arrays"});
  expect_bad_file("bad_duplicate_key.gguf", {"metadata key 'general.name'", "twice"});
  expect_bad_file("no_such_file.gguf", {"cannot open"});
}

// Every prefix of a valid file is rejected with BadInput (never another exception or a crash),
// except prefixes that only drop trailing padding after the last tensor.
TEST(GgufBroken, EveryTruncationIsBadInput) {
  const std::vector<uint8_t> full = read_bytes(kDir + "all_types.gguf");
  const GgufFile g = GgufFile::parse(MappedFile::from_bytes("full", full));
  int64_t data_end = 0;
  for (const auto& [name, t] : g.tensors())
    data_end = std::max<int64_t>(data_end, t.data - t.file->data() + t.nbytes);
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      GgufFile::parse(MappedFile::from_bytes("cut", std::move(cut)));
      EXPECT_GE(static_cast<int64_t>(n), data_end) << "prefix of " << n << " bytes parsed";
    } catch (const BadInput& e) {
      EXPECT_LT(static_cast<int64_t>(n), data_end) << e.what();
    }
  }
}

// Flipping any byte of the header/metadata/tensor-info region gives a file or BadInput.
TEST(GgufBroken, ByteFlipsAreBadInputOrValid) {
  const std::vector<uint8_t> full = read_bytes(kDir + "all_types.gguf");
  for (size_t i = 0; i < 640 && i < full.size(); ++i) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> b = full;
      b[i] ^= x;
      try {
        GgufFile::parse(MappedFile::from_bytes("flip", std::move(b)));
      } catch (const BadInput&) {
      }
    }
  }
}

// ------------------------------------------------------------------ checkpoint_from_gguf

TEST(GgufCheckpoint, TinyLlama) {
  const std::string path = kDir + "tiny_llama.gguf";
  auto g = std::make_shared<GgufFile>(GgufFile::open(path));
  const Checkpoint ck = checkpoint_from_gguf(g);
  EXPECT_EQ(ck.path, path);
  EXPECT_EQ(ck.format, "gguf");
  EXPECT_EQ(ck.gguf, g);
  EXPECT_TRUE(ck.qk_rows_permuted);
  const ModelConfig& c = ck.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 32);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_EQ(c.rms_norm_eps, static_cast<double>(1e-5f));
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));

  EXPECT_EQ(ck.tensors.size(), g->tensors().size());
  for (const char* name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
        "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight",
        "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
        "model.layers.1.mlp.down_proj.weight", "rope_freqs.weight"}) {
    EXPECT_EQ(ck.tensors.count(name), 1u) << name;
  }
  const RawTensor& q = ck.tensors.at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.name, "blk.0.attn_q.weight");                        // the name in the file
  EXPECT_EQ(q.data, g->tensors().at("blk.0.attn_q.weight").data);  // still the mapping
  EXPECT_EQ(q.shape, (std::vector<int64_t>{32, 32}));
}

TEST(GgufCheckpoint, TinyQwen2TiedWithBiases) {
  auto g = std::make_shared<GgufFile>(GgufFile::open(kDir + "tiny_qwen2.gguf"));
  const Checkpoint ck = checkpoint_from_gguf(g);
  EXPECT_EQ(ck.config.architecture, "qwen2");
  EXPECT_FALSE(ck.qk_rows_permuted);
  EXPECT_TRUE(ck.config.tie_word_embeddings);
  EXPECT_TRUE(ck.config.attention_bias);
  EXPECT_EQ(ck.config.rope_theta, 1000000.0);
  EXPECT_EQ(ck.tensors.count("lm_head.weight"), 0u);
  EXPECT_EQ(ck.tensors.at("model.layers.1.self_attn.k_proj.bias").shape,
            (std::vector<int64_t>{16}));
  EXPECT_EQ(ck.tensors.count("model.layers.0.self_attn.q_proj.bias"), 1u);
  EXPECT_EQ(ck.tensors.count("model.layers.0.self_attn.v_proj.bias"), 1u);
}

TEST(GgufCheckpoint, RejectsWithFileAndKey) {
  const std::string arch = kDir + "unsupported_arch.gguf";
  expect_bad_input(arch,
                   [&] { checkpoint_from_gguf(std::make_shared<GgufFile>(GgufFile::open(arch))); },
                   {"unsupported architecture 'gpt2' (supported: llama, mistral, qwen2)"});
  const std::string missing = kDir + "missing_key.gguf";
  expect_bad_input(
      missing, [&] { checkpoint_from_gguf(std::make_shared<GgufFile>(GgufFile::open(missing))); },
      {"metadata key 'llama.block_count' is missing"});
  const std::string partial = kDir + "partial_rotary.gguf";
  expect_bad_input(partial,
                   [&] { checkpoint_from_gguf(std::make_shared<GgufFile>(GgufFile::open(partial))); },
                   {"metadata key 'llama.rope.dimension_count'", "partial rotary"});
  const std::string yarn = kDir + "rope_yarn.gguf";
  expect_bad_input(yarn,
                   [&] { checkpoint_from_gguf(std::make_shared<GgufFile>(GgufFile::open(yarn))); },
                   {"metadata key 'llama.rope.scaling.type'", "'yarn' is not supported"});
  const std::string wrong = kDir + "bad_wrong_type.gguf";
  const GgufFile g = GgufFile::open(wrong);
  expect_bad_input(wrong, [&] { g.get_int("llama.block_count"); },
                   {"metadata key 'llama.block_count' has type string"});
}

// A tensor missing from a GGUF is named as the file names it (llama.cpp's name), with the Hugging
// Face name after it (issue #18, item 8): here blk.1.attn_k.weight renamed to blk.1.attn_x.weight.
TEST(GgufCheckpoint, MissingTensorNamedByItsGgufName) {
  std::ifstream in(kDir + "tiny_llama.gguf", std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string bytes = buf.str();
  const size_t at = bytes.find("blk.1.attn_k.weight");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 11] = 'x';
  const std::string path = (medtune::testing::scratch_dir("gguf") / "missing_tensor.gguf").string();
  std::ofstream(path, std::ios::binary) << bytes;
  expect_bad_input(path, [&] { open_checkpoint(path); },
                   {"missing tensor 'blk.1.attn_k.weight' (model.layers.1.self_attn.k_proj.weight)"});
  std::remove(path.c_str());
  EXPECT_EQ(gguf_tensor_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
  EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.01.mlp.up_proj.weight"), "");
  EXPECT_EQ(gguf_tensor_name("rope_freqs.weight"), "");
}

TEST(GgufCheckpoint, Llama3RopeScalingFromMetadata) {
  auto g = std::make_shared<GgufFile>(GgufFile::open(kDir + "rope_llama3.gguf"));
  const RopeScaling& r = checkpoint_from_gguf(g).config.rope_scaling;
  EXPECT_EQ(r.type, "llama3");
  EXPECT_EQ(r.factor, 8.0);
  EXPECT_EQ(r.original_max_position_embeddings, 8192);
  EXPECT_EQ(r.low_freq_factor, 1.0);
  EXPECT_EQ(r.high_freq_factor, 4.0);
}

// ------------------------------------------------------------------ the real SmolLM2 file

TEST(GgufSmolLM2, RealFileMatchesGgufPy) {
  const char* env = std::getenv("MEDTUNE_SMOLLM2_GGUF");
  if (env == nullptr || *env == '\0') GTEST_SKIP() << "MEDTUNE_SMOLLM2_GGUF is not set";
  auto g = std::make_shared<GgufFile>(GgufFile::open(env));
  const Checkpoint ck = checkpoint_from_gguf(g);
  const ModelConfig& c = ck.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(ck.qk_rows_permuted);
  const struct {
    const char* tensor;
    const char* fixture;
  } rows[] = {{"token_embd.weight", "smollm2_token_embd_row0.f32"},
              {"blk.0.attn_q.weight", "smollm2_blk0_attn_q_row0.f32"}};
  for (const auto& r : rows) {
    SCOPED_TRACE(r.tensor);
    const RawTensor& t = g->tensors().at(r.tensor);
    ASSERT_EQ(t.shape.back(), 576);
    const std::vector<float> want = read_floats(kDir + r.fixture);
    ASSERT_EQ(want.size(), 576u);
    std::vector<float> got(576);
    dequantize_row(t.dtype, t.data, got.data(), 576);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), 576 * 4), 0);
  }
  EXPECT_EQ(g->tensors().at("token_embd.weight").shape, (std::vector<int64_t>{49152, 576}));
}

}  // namespace
}  // namespace medtune::io
