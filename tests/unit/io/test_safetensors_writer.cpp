// safetensors writer against the reference writer: the bytes must equal files written by Python's
// safetensors (tools/check_peft_roundtrip.py --make-fixtures, and PEFT's own adapter files), and
// our reader must read back what we wrote. Also the crash-safe replacement in io/atomic_file.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/half.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace medtune::io {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/";

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("medtune_st_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The tensors of all_dtypes_tensors() in tools/check_peft_roundtrip.py, value for value.
struct AllDtypes {
  float w_f32[6];
  uint16_t b_f16[4];
  uint16_t a_bf16[3];
  double d_f64[2] = {1e-300, -2.5};
  int64_t c_i64[2] = {7, -9};
  int32_t e_i32[4] = {1, -2, 3, 2147483647};
  float s_f32 = 42.0f;
  uint16_t x_f16[1];

  AllDtypes() {
    for (int i = 0; i < 6; ++i) w_f32[i] = static_cast<float>(i) * 0.5f - 1.0f;
    const float b[] = {1.0f, -2.0f, 0.5f, 65504.0f};
    for (int i = 0; i < 4; ++i) b_f16[i] = f32_to_f16(b[i]);
    const float a[] = {1.5f, -0.25f, 3.0f};
    for (int i = 0; i < 3; ++i) a_bf16[i] = f32_to_bf16(a[i]);
    x_f16[0] = f32_to_f16(0.0f);
  }
  // Deliberately not in the file's order: the writer must sort.
  std::vector<TensorToWrite> tensors() const {
    return {
        {"w.f32", DType::F32, {2, 3}, w_f32},     {"b.f16", DType::F16, {4}, b_f16},
        {"a.bf16", DType::BF16, {3}, a_bf16},     {"d.f64", DType::F64, {2, 1}, d_f64},
        {"c.i64", DType::I64, {2}, c_i64},        {"e.i32", DType::I32, {2, 2}, e_i32},
        {"s.f32", DType::F32, {}, &s_f32},        {"z.f32", DType::F32, {0, 3}, nullptr},
        {"x.f16", DType::F16, {1, 1}, x_f16},
    };
  }
};

TEST(SafetensorsWriter, BytesEqualTheReferenceWriter) {
  const AllDtypes t;
  const std::vector<uint8_t> ours = serialize_safetensors(t.tensors(), {{"format", "pt"}});
  const std::vector<uint8_t> ref = file_bytes(kFixtures + "peft/all_dtypes.safetensors");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(ours.size(), ref.size());
  EXPECT_TRUE(ours == ref) << "header ours: "
                           << std::string(ours.begin() + 8, ours.begin() + std::min<size_t>(ours.size(), 400))
                           << "\nheader ref:  "
                           << std::string(ref.begin() + 8, ref.begin() + std::min<size_t>(ref.size(), 400));
}

TEST(SafetensorsWriter, FileEqualsTheReferenceAndReadsBack) {
  TempDir dir;
  const AllDtypes t;
  const std::string path = dir / "x.safetensors";
  write_safetensors(path, t.tensors(), {{"format", "pt"}});
  EXPECT_TRUE(file_bytes(path) == file_bytes(kFixtures + "peft/all_dtypes.safetensors"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f.tensors.size(), 9u);
  for (const TensorToWrite& w : t.tensors()) {
    const RawTensor& r = f.tensors.at(w.name);
    EXPECT_EQ(r.dtype, w.dtype) << w.name;
    EXPECT_EQ(r.shape, w.shape) << w.name;
    ASSERT_EQ(r.nbytes, r.numel() * dtype_block_bytes(w.dtype)) << w.name;
    if (r.nbytes) {
      EXPECT_EQ(std::memcmp(r.data, w.data, static_cast<size_t>(r.nbytes)), 0) << w.name;
    }
    // The reference aligns every tensor to its element size within the file.
    EXPECT_EQ((r.data - f.file->data()) % dtype_block_bytes(w.dtype), 0) << w.name;
  }
}

// PEFT wrote this file with safetensors.torch.save_file; rewriting its tensors must give it back.
TEST(SafetensorsWriter, RewritesPeftsAdapterFileByteForByte) {
  for (const char* fixture : {"llama_gqa", "llama_headdim", "qwen2_bias"}) {
    const std::string path = kFixtures + "hf/" + fixture + "/adapter_init/adapter_model.safetensors";
    const SafetensorsFile f = read_safetensors(path);
    std::vector<TensorToWrite> ts;
    for (const auto& [name, r] : f.tensors) ts.push_back({name, r.dtype, r.shape, r.data});
    EXPECT_TRUE(serialize_safetensors(ts, f.metadata) == file_bytes(path)) << path;
  }
}

TEST(SafetensorsWriter, HeaderIsPaddedWithSpacesAndOmitsEmptyMetadata) {
  const float v = 1.0f;
  for (size_t len = 1; len <= 9; ++len) {  // every residue of the JSON length mod 8
    const std::vector<uint8_t> b =
        serialize_safetensors({{std::string(len, 'n'), DType::F32, {1}, &v}}, {});
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | b[static_cast<size_t>(i)];
    EXPECT_EQ(n % 8, 0u);
    const std::string header(b.begin() + 8, b.begin() + 8 + static_cast<int64_t>(n));
    const std::string json = "{\"" + std::string(len, 'n') +
                             "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    EXPECT_EQ(header, json + std::string(n - json.size(), ' '));
    EXPECT_LT(n - json.size(), 8u);
  }
  EXPECT_EQ(serialize_safetensors({}, {}),
            (std::vector<uint8_t>{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}));
}

TEST(SafetensorsWriter, EscapesNamesAsJson) {
  TempDir dir;
  const float v = 2.0f;
  const std::string name = "a\"b\\c\nd/é";
  write_safetensors(dir / "e.safetensors", {{name, DType::F32, {1}, &v}}, {{"k\t", "v\x01"}});
  const SafetensorsFile f = read_safetensors(dir / "e.safetensors");
  ASSERT_EQ(f.tensors.count(name), 1u);
  EXPECT_EQ(f.metadata.at("k\t"), "v\x01");
}

TEST(SafetensorsWriter, RejectsCallerBugs) {
  const float v = 0.0f;
  EXPECT_THROW(serialize_safetensors({{"a", DType::F32, {1}, &v}, {"a", DType::F32, {1}, &v}}, {}),
               Internal);
  EXPECT_THROW(serialize_safetensors({{"__metadata__", DType::F32, {1}, &v}}, {}), Internal);
  EXPECT_THROW(serialize_safetensors({{"", DType::F32, {1}, &v}}, {}), Internal);
  EXPECT_THROW(serialize_safetensors({{"q", DType::Q4_0, {32}, &v}}, {}), Internal);
  EXPECT_THROW(serialize_safetensors({{"n", DType::F32, {-1}, &v}}, {}), Internal);
  EXPECT_THROW(serialize_safetensors({{"z", DType::F32, {2}, nullptr}}, {}), Internal);
}

TEST(AtomicFile, ReplacesExistingFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir / "f.bin";
  atomic_write_file(path, std::string_view("old content"));
  atomic_write_file(path, std::string_view("new"));
  const auto b = file_bytes(path);
  EXPECT_EQ(std::string(b.begin(), b.end()), "new");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(AtomicFile, MissingDirectoryIsBadInputNamingThePath) {
  TempDir dir;
  const std::string path = dir / "no/such/dir/f.bin";
  try {
    atomic_write_file(path, std::string_view("x"));
    FAIL() << "no exception";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, FailedRenameKeepsTheDestinationAndRemovesTheTemporary) {
  TempDir dir;
  // The destination is a non-empty directory: rename(2) fails after the data was written.
  const std::string path = dir / "d";
  fs::create_directories(path);
  { std::ofstream(path + "/keep") << "keep"; }
  EXPECT_THROW(atomic_write_file(path, std::string_view("x")), std::runtime_error);
  EXPECT_TRUE(fs::is_regular_file(path + "/keep"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace
}  // namespace medtune::io
