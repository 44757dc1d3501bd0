// TensorBoard event files: CRC-32C against published check values, the TFRecord framing, Event
// protos against bytes derived by hand from event.proto and the protobuf wire format, and the
// mapping of metrics.jsonl records to tags. That TensorBoard itself reads the files is
// tests/e2e/train_tensorboard.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "train/tensorboard_sink.h"
#include "train/tfevents.h"

namespace medtune::train {
namespace {

namespace fs = std::filesystem;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + static_cast<size_t>(i)]);
  return v;
}

// The check value of the CRC catalogue (reveng.sourceforge.io, CRC-32/ISCSI) and two vectors of
// RFC 3720 appendix B.4.
TEST(TfEvents, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(TfEvents, MaskedCrcAndFraming) {
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  const std::string data = "hello";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(r.substr(0, 8), bytes({5, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(le32(r, 8), masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 5), data);
  EXPECT_EQ(le32(r, 17), masked_crc32c(data));
}

TEST(TfEvents, EventsEncodeAsEventProto) {
  // wall_time 0.5: field 1, fixed64 (key 0x09), IEEE 754 0x3FE0000000000000 little-endian.
  const std::string wall = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xE0, 0x3F});
  EXPECT_EQ(event_file_version(0.5), wall + bytes({0x1A, 13}) + "brain.Event:2");
  // step 3: field 2 varint (0x10). summary: field 5 (0x2A) holding one Summary.value (0x0A)
  // {tag "a" (0x0A 1 'a'), simple_value 1.0f (0x15, 0x3F800000 little-endian)}.
  EXPECT_EQ(event_scalars(0.5, 3, {{"a", 1.0f}}),
            wall + bytes({0x10, 3, 0x2A, 10, 0x0A, 8, 0x0A, 1, 'a', 0x15, 0, 0, 0x80, 0x3F}));
  // step 300 is the varint AC 02; session_log: field 7 (0x3A) {status START: 0x08 1}. (Field 6
  // is the deprecated log_message: TensorBoard would not see a restart there.)
  EXPECT_EQ(event_session_start(0.5, 300), wall + bytes({0x10, 0xAC, 0x02, 0x3A, 2, 0x08, 1}));
  // proto3 leaves a zero step out.
  EXPECT_EQ(event_session_start(0.5, 0), wall + bytes({0x3A, 2, 0x08, 1}));
}

TEST(TfEvents, MetricsRecordsBecomeHfTrainerTags) {
  int64_t step = -1;
  const ScalarValues train = tensorboard_scalars(
      {{"step", 7}, {"epoch", 0.5}, {"loss", 2.25}, {"lr", 1e-4}, {"grad_norm", 0.75},
       {"tokens_per_s", 123.5}, {"elapsed_s", 9.0}, {"rss_bytes", 3 * 1048576 + 524288}},
      step);
  EXPECT_EQ(step, 7);
  const ScalarValues want_train{{"train/loss", 2.25f},      {"train/learning_rate", 1e-4f},
                                {"train/grad_norm", 0.75f}, {"train/tokens_per_second", 123.5f},
                                {"train/rss_mib", 3.5f},    {"train/epoch", 0.5f}};
  EXPECT_EQ(train, want_train);

  const ScalarValues eval =
      tensorboard_scalars({{"eval", {{"step", 4}, {"loss", 1.5}, {"tokens", 10}, {"accuracy", 0.25}}}}, step);
  EXPECT_EQ(step, 4);
  EXPECT_EQ(eval, (ScalarValues{{"eval/loss", 1.5f}, {"eval/accuracy", 0.25f}}));
  // Accuracy only (no validation tokens): its loss of 0 is not a loss.
  EXPECT_EQ(tensorboard_scalars({{"eval", {{"step", 4}, {"loss", 0.0}, {"tokens", 0}, {"accuracy", 0.5}}}}, step),
            (ScalarValues{{"eval/accuracy", 0.5f}}));
  // A NaN loss is null in metrics.jsonl and absent here; the summary has no scalars.
  EXPECT_EQ(tensorboard_scalars({{"step", 8}, {"loss", nullptr}, {"lr", 0.5}}, step),
            (ScalarValues{{"train/learning_rate", 0.5f}}));
  EXPECT_TRUE(tensorboard_scalars({{"summary", {{"steps", 8}}}}, step).empty());
}

TEST(TfEvents, SinkWritesOneFlushedFilePerStart) {
  const fs::path dir = fs::temp_directory_path() / ("medtune_tfevents_" + std::to_string(getpid())) / "runs";
  fs::remove_all(dir.parent_path());
  TensorBoardSink first(dir.string());
  first.started(0, 10);
  first.record({{"step", 1}, {"loss", 2.0}});
  // Flushed: the file holds both records while the writer is still open.
  std::ifstream in(first.file_path(), std::ios::binary);
  std::string content(fs::file_size(first.file_path()), '\0');
  in.read(content.data(), static_cast<std::streamsize>(content.size()));
  const std::string name = fs::path(first.file_path()).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(getpid()) + "."), std::string::npos) << name;
  size_t records = 0;
  for (size_t at = 0; at + 12 <= content.size(); ++records) {
    uint64_t len = 0;
    std::memcpy(&len, content.data() + at, 8);
    EXPECT_EQ(le32(content, at + 12 + len), masked_crc32c(content.substr(at + 12, len)));
    at += 16 + len;
  }
  EXPECT_EQ(records, 3u);  // file_version, SessionLog START, the scalars

  // A resumed run opens a second file whose name sorts after the first, in the same second too.
  TensorBoardSink resumed(dir.string());
  resumed.started(5, 10);
  EXPECT_GT(fs::path(resumed.file_path()).filename().string(), name);
  fs::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace medtune::train
