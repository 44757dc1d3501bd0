// GGUF writer (io/gguf_writer.h) and the Q8_0 quantizer it is used with (core/quant_write.h),
// against files gguf-py wrote (tools/check_export.py --make-fixtures; tests/fixtures/export/).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_write.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace medtune::io {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(MEDTUNE_SOURCE_DIR) + "/tests/fixtures/export/";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// The content make_writer_reference() in tools/check_export.py gives gguf-py's GGUFWriter.
struct ReferenceContent {
  GgufMetadata md;
  std::vector<float> a;     // (3, 5) F32
  std::vector<uint16_t> b;  // (7) F16
  std::vector<uint8_t> c;   // (2, 64) Q8_0
  std::vector<GgufTensorToWrite> tensors;
};

ReferenceContent make_reference_content() {
  ReferenceContent r;
  r.md = {
      {"general.architecture", gguf_string("llama")},
      {"llama.block_count", gguf_u32(2)},
      {"test.i32", gguf_i32(-7)},
      {"test.u64", gguf_u64(uint64_t{1} << 40)},
      {"test.f32", gguf_f32(0.1f)},
      {"test.bool", gguf_bool(true)},
      {"test.str", gguf_string("h\xc3\xa9llo\n")},
      {"test.strs", gguf_string_array({"a", "", "\xc3\xbc"})},
      {"test.i32s", gguf_i32_array({1, -2, 3})},
      {"test.f32s", gguf_f32_array({0.5, -1.25})},
  };
  for (int i = 0; i < 15; ++i) r.a.push_back(static_cast<float>(i) * 0.25f - 1.0f);
  for (int i = 0; i < 7; ++i) r.b.push_back(f32_to_f16(static_cast<float>(i - 3)));
  std::vector<float> c(128);
  for (int i = 0; i < 128; ++i) c[static_cast<size_t>(i)] = static_cast<float>(i) / 7.0f - 9.0f;
  r.c = encode_f32(DType::Q8_0, c.data(), 2, 64);
  r.tensors = {{"a.weight", DType::F32, {3, 5}, r.a.data()},
               {"b.bias", DType::F16, {7}, r.b.data()},
               {"c.weight", DType::Q8_0, {2, 64}, r.c.data()}};
  return r;
}

TEST(GgufWriterExport, BytesEqualGgufPyWriter) {
  const ReferenceContent r = make_reference_content();
  const std::vector<uint8_t> ours = serialize_gguf(r.md, r.tensors);
  const std::vector<uint8_t> ref = read_bytes(kDir + "writer_reference.gguf");
  ASSERT_EQ(ours.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(ours[i], ref[i]) << "first difference at byte " << i;
}

TEST(GgufWriterExport, RoundTripThroughReader) {
  const ReferenceContent r = make_reference_content();
  const fs::path path = fs::temp_directory_path() / ("medtune_gguf_writer_" + std::to_string(::getpid()) + ".gguf");
  write_gguf(path.string(), r.md, r.tensors);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  EXPECT_EQ(read_bytes(path.string()), serialize_gguf(r.md, r.tensors));
  const GgufFile g = GgufFile::open(path.string());
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("test.i32"), -7);
  EXPECT_EQ(g.get_int("test.u64"), int64_t{1} << 40);
  EXPECT_EQ(g.get_float("test.f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(g.get_bool("test.bool"));
  EXPECT_EQ(g.get_string("test.str"), "h\xc3\xa9llo\n");
  EXPECT_EQ(g.get_string_array("test.strs"), (std::vector<std::string>{"a", "", "\xc3\xbc"}));
  EXPECT_EQ(g.get_int_array("test.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.get_float_array("test.f32s"), (std::vector<double>{0.5, -1.25}));
  // Every value read back is written back with its type: the metadata survives a second trip.
  GgufMetadata again;
  again.push_back({"general.architecture", g.metadata().at("general.architecture")});
  for (const auto& kv : r.md)
    if (kv.first != "general.architecture") again.push_back({kv.first, g.metadata().at(kv.first)});
  EXPECT_EQ(serialize_gguf(again, r.tensors), serialize_gguf(r.md, r.tensors));

  const RawTensor& a = g.tensors().at("a.weight");
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(std::memcmp(a.data, r.a.data(), 60), 0);
  const RawTensor& c = g.tensors().at("c.weight");
  EXPECT_EQ(c.dtype, DType::Q8_0);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(std::memcmp(c.data, r.c.data(), r.c.size()), 0);
  EXPECT_EQ(g.tensors().at("b.bias").shape, (std::vector<int64_t>{7}));
  fs::remove(path);
}

TEST(GgufWriterExport, AlignmentPadsEveryTensor) {
  std::vector<float> x(3, 1.0f);
  const GgufMetadata md = {{"general.architecture", gguf_string("llama")}, {"general.alignment", gguf_u32(64)}};
  const std::vector<GgufTensorToWrite> t = {{"x", DType::F32, {3}, x.data()}, {"y", DType::F32, {3}, x.data()}};
  const GgufLayout l = plan_gguf(md, t, 64);
  EXPECT_EQ(l.head.size() % 64, 0u);
  EXPECT_EQ(l.offsets, (std::vector<uint64_t>{0, 64}));
  EXPECT_EQ(l.data_bytes, 128u);
  const std::vector<uint8_t> bytes = serialize_gguf(md, t, 64);
  EXPECT_EQ(bytes.size(), l.head.size() + 128);
  // The reader honours general.alignment and finds y at its aligned offset.
  const fs::path path = fs::temp_directory_path() / ("medtune_gguf_align_" + std::to_string(::getpid()) + ".gguf");
  write_gguf(path.string(), md, t, 64);
  const GgufFile g = GgufFile::open(path.string());
  EXPECT_EQ(g.tensors().at("y").data - g.tensors().at("x").data, 64);
  fs::remove(path);
}

TEST(GgufWriterExport, CallerBugsThrowInternal) {
  std::vector<float> x(40, 0.0f);
  const GgufMetadata md = {{"general.architecture", gguf_string("llama")}};
  EXPECT_THROW(plan_gguf(md, {{"x", DType::F32, {3}, x.data()}, {"x", DType::F32, {3}, x.data()}}), Internal);
  EXPECT_THROW(plan_gguf(md, {{"q", DType::Q8_0, {40}, x.data()}}), Internal);  // not whole blocks
  EXPECT_THROW(plan_gguf(md, {{"x", DType::F32, {3}, nullptr}}), Internal);
  EXPECT_THROW(plan_gguf(md, {{"x", DType::F32, {3}, x.data()}}, 24), Internal);  // not a power of 2
  EXPECT_THROW(plan_gguf({{"k", gguf_u32(1)}, {"k", gguf_u32(2)}}, {}), Internal);
  EXPECT_THROW(plan_gguf({{"general.alignment", gguf_u32(64)}}, {}, 32), Internal);
  GgufValue wrong = gguf_u32(1);
  wrong.type = GgufValue::Type::STRING;
  EXPECT_THROW(plan_gguf({{"k", wrong}}, {}), Internal);
}

// Q8_0 quantization: bit-exact with gguf-py's gguf.quants.quantize (the reference convert_hf_to_gguf
// uses), on random blocks and on ties that roundf rounds away from zero (round-to-even would not).
TEST(QuantWriteExport, Q8_0BitExactWithGgufPy) {
  const std::vector<uint8_t> in = read_bytes(kDir + "q8_0_input.f32");
  const std::vector<uint8_t> ref = read_bytes(kDir + "q8_0_gguf_py.bin");
  ASSERT_EQ(in.size(), 64u * 32 * 4);
  std::vector<float> x(in.size() / 4);
  std::memcpy(x.data(), in.data(), in.size());
  std::vector<uint8_t> out(x.size() / 32 * 34);
  quantize_row_q8_0(x.data(), out.data(), static_cast<int64_t>(x.size()));
  ASSERT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(out[i], ref[i]) << "block " << i / 34 << " byte " << i % 34;
  // The tie block: 127 -> d = 1; 2.5 -> 3 and -2.5 -> -3 (away from zero).
  const int8_t* tie = reinterpret_cast<const int8_t*>(out.data() + 32 * 34 + 2);
  EXPECT_EQ(tie[5], 3);
  EXPECT_EQ(tie[6], -3);
  // Dequantizing what we wrote with the reader's dequantizer gives d * q.
  std::vector<float> back(32);
  dequantize_row(DType::Q8_0, out.data() + 32 * 34, back.data(), 32);
  EXPECT_EQ(back[0], 127.0f);
  EXPECT_EQ(back[5], 3.0f);
}

TEST(QuantWriteExport, EncodeF16AndBf16RoundToNearestEven) {
  const float x[2] = {1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f};  // exact f16 ties
  const std::vector<uint8_t> h = encode_f32(DType::F16, x, 1, 2);
  uint16_t v[2];
  std::memcpy(v, h.data(), 4);
  EXPECT_EQ(f16_to_f32(v[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(v[1]), 1.0f + 2.0f / 1024.0f);
  EXPECT_THROW(encode_f32(DType::Q8_0, x, 1, 2), Internal);
  EXPECT_THROW(encode_f32(DType::Q4_1, x, 1, 2), Internal);
}

}  // namespace
}  // namespace medtune::io
