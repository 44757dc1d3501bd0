// safetensors reader against files written (or rejected) by the reference safetensors package:
// tools/make_safetensors_fixtures.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"

namespace medtune::io {
namespace {

const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/safetensors/";

template <typename T>
T element(const RawTensor& t, int64_t i) {
  T v;
  std::memcpy(&v, t.data + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Expects BadInput whose message contains every one of `needles`.
void expect_bad(const std::string& file, std::initializer_list<std::string> needles) {
  const std::string path = kDir + file;
  try {
    read_safetensors(path);
    FAIL() << path << ": no exception";
  } catch (const BadInput& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

TEST(Safetensors, ReadsEveryDtypeAndMetadata) {
  SafetensorsFile f = read_safetensors(kDir + "valid.safetensors");
  EXPECT_EQ(f.path, kDir + "valid.safetensors");
  ASSERT_EQ(f.tensors.size(), 6u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("note"), "medtune fixture");

  const RawTensor& a = f.tensors.at("a");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.nbytes, 24);
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.file.get(), f.file.get());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(element<float>(a, i), i * 0.5f - 1.0f);

  const RawTensor& b = f.tensors.at("b");
  EXPECT_EQ(b.dtype, DType::F16);
  const float bv[] = {1.0f, -2.0f, 0.5f, 65504.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f16_to_f32(element<uint16_t>(b, i)), bv[i]);

  EXPECT_EQ(f.tensors.at("c").dtype, DType::I64);
  EXPECT_EQ(element<int64_t>(f.tensors.at("c"), 0), 7);
  EXPECT_EQ(element<int64_t>(f.tensors.at("c"), 1), -9);
  EXPECT_EQ(f.tensors.at("e").dtype, DType::F64);
  EXPECT_EQ(element<double>(f.tensors.at("e"), 0), 3.25);
  EXPECT_EQ(f.tensors.at("i").dtype, DType::I32);
  EXPECT_EQ(element<int32_t>(f.tensors.at("i"), 0), -5);
  EXPECT_EQ(element<int32_t>(f.tensors.at("i"), 1), 123456);

  const RawTensor& empty = f.tensors.at("empty");
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(empty.nbytes, 0);
  EXPECT_EQ(empty.numel(), 0);
}

TEST(Safetensors, ReadsBf16) {
  SafetensorsFile f = read_safetensors(kDir + "bf16.safetensors");
  const RawTensor& w = f.tensors.at("w");
  EXPECT_EQ(w.dtype, DType::BF16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{3}));
  const float want[] = {1.5f, -2.0f, 0.15625f};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bf16_to_f32(element<uint16_t>(w, i)), want[i]);
}

TEST(Safetensors, ParseFromBytesMatchesFile) {
  std::ifstream in(kDir + "valid.safetensors", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SafetensorsFile f = parse_safetensors(MappedFile::from_bytes("mem.safetensors", bytes));
  EXPECT_EQ(f.path, "mem.safetensors");
  EXPECT_EQ(element<float>(f.tensors.at("a"), 5), 1.5f);
}

TEST(Safetensors, BrokenFilesNameFileAndTensor) {
  expect_bad("truncated.safetensors", {"outside the data section"});
  expect_bad("header_too_big.safetensors", {"header length", "maximum"});
  expect_bad("header_past_eof.safetensors", {"header length 1000", "file size"});
  expect_bad("bad_json.safetensors", {"not valid JSON"});
  expect_bad("offsets_outside.safetensors", {"tensor 'a'", "[0, 400]", "outside"});
  expect_bad("overlap.safetensors", {"tensor 'b'", "overlaps tensor 'a'"});
  expect_bad("hole.safetensors", {"tensor 'b'", "hole"});
  expect_bad("wrong_size.safetensors", {"tensor 'a'", "holds 20 bytes", "needs 24"});
  expect_bad("unknown_dtype.safetensors", {"tensor 'q'", "F8_E4M3 is not supported"});
  expect_bad("bad_metadata.safetensors", {"__metadata__", "'step'"});
  expect_bad("empty.safetensors", {"not a safetensors file"});
}

TEST(Safetensors, MissingFileIsBadInput) {
  EXPECT_THROW(read_safetensors(kDir + "does_not_exist.safetensors"), BadInput);
}

// Every truncation of a valid file must be rejected cleanly (never crash, never accept).
TEST(Safetensors, EveryTruncationIsRejected) {
  std::ifstream in(kDir + "valid.safetensors", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse_safetensors(MappedFile::from_bytes("cut", cut)), BadInput) << n;
  }
}

TEST(SafetensorsDir, SingleFile) {
  auto t = read_safetensors_dir(kDir + "tiny_llama");
  EXPECT_EQ(t.size(), 21u);  // embed, norm, lm_head + 2 layers x 9
  const RawTensor& e = t.at("model.embed_tokens.weight");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{16, 8}));
  // Fixture values: element i is (i % 64) * 0.25 - 4.
  for (int64_t i : {0, 1, 63, 64, 127}) EXPECT_EQ(element<float>(e, i), (i % 64) * 0.25f - 4.0f);
}

TEST(SafetensorsDir, TwoShardsMergedAndEachMappedOnce) {
  auto t = read_safetensors_dir(kDir + "tiny_llama_sharded");
  EXPECT_EQ(t.size(), 21u);
  const RawTensor& down = t.at("model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(down.dtype, DType::F16);
  EXPECT_EQ(down.shape, (std::vector<int64_t>{8, 12}));
  for (int64_t i : {0, 5, 70, 95}) EXPECT_EQ(f16_to_f32(element<uint16_t>(down, i)), (i % 64) * 0.25f - 4.0f);
  // Tensors from the same shard share one mapping; the two shards are two mappings.
  std::set<const MappedFile*> files;
  for (const auto& [name, r] : t) files.insert(r.file.get());
  EXPECT_EQ(files.size(), 2u);
  EXPECT_NE(t.at("lm_head.weight").file->path().find("model-0000"), std::string::npos);
}

class SafetensorsDirBroken : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("medtune_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  void copy(const std::string& from, const std::string& name) {
    std::filesystem::copy_file(kDir + from, dir_ / name);
  }
  std::string expect_bad() {
    try {
      read_safetensors_dir(dir_.string());
    } catch (const BadInput& e) {
      return e.what();
    }
    ADD_FAILURE() << "no exception";
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsDirBroken, IndexNamesMissingShard) {
  copy("tiny_llama_sharded/model-00001-of-00002.safetensors", "model-00001-of-00002.safetensors");
  write("model.safetensors.index.json",
        R"({"weight_map": {"model.norm.weight": "model-00009-of-00009.safetensors"}})");
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model-00009-of-00009.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsDirBroken, TensorAbsentFromItsShard) {
  copy("valid.safetensors", "s1.safetensors");
  write("model.safetensors.index.json", R"({"weight_map": {"zz": "s1.safetensors"}})");
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'zz'"), std::string::npos) << msg;
}

TEST_F(SafetensorsDirBroken, TensorInTwoShards) {
  copy("valid.safetensors", "s1.safetensors");
  copy("valid.safetensors", "s2.safetensors");
  write("model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("present in two shards"), std::string::npos) << msg;
  EXPECT_NE(msg.find("s1.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("s2.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsDirBroken, ShardOutsideDirectory) {
  write("model.safetensors.index.json", R"({"weight_map": {"a": "../valid.safetensors"}})");
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("outside the model directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
}

TEST_F(SafetensorsDirBroken, IndexNotJsonOrNoWeightMap) {
  write("model.safetensors.index.json", "{ nope");
  EXPECT_NE(expect_bad().find("model.safetensors.index.json: not valid JSON"), std::string::npos);
  write("model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_NE(expect_bad().find("'weight_map'"), std::string::npos);
}

TEST_F(SafetensorsDirBroken, EmptyDirectory) {
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("no model.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsDirBroken, BrokenShardNamesShardFile) {
  copy("overlap.safetensors", "s1.safetensors");
  write("model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  const std::string msg = expect_bad();
  EXPECT_NE(msg.find("s1.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
}

}  // namespace
}  // namespace medtune::io
