// TensorBoard event files, written by hand: no C++ TensorBoard or protobuf-for-TensorBoard library
// is packaged in Debian, and the format is small. An event file is a sequence of TFRecords, each
// holding one serialized `Event` protocol buffer (tensorflow/core/util/event.proto):
//
//   TFRecord: uint64 length (little-endian) | masked CRC-32C of those 8 bytes | data | masked CRC-32C of data
//   Event:    wall_time double = 1, step int64 = 2, file_version string = 3, summary Summary = 5,
//             session_log SessionLog = 7 (6 is the deprecated log_message)
//   Summary:  repeated Value value = 1;  Value: tag string = 1, simple_value float = 2
//   SessionLog: status enum = 1 (1 = START)
//
// TensorBoard's readers check both CRCs, so a torn last record (a crash mid-write) is dropped,
// not misread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace medtune::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
uint32_t crc32c(std::string_view bytes);
// TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC stored inside
// CRC-checked data does not make the outer CRC degenerate.
uint32_t masked_crc32c(std::string_view bytes);
// `data` framed as one TFRecord.
std::string tfrecord(std::string_view data);

using ScalarValues = std::vector<std::pair<std::string, float>>;
// Serialized Event protos.
std::string event_file_version(double wall_time);  // file_version "brain.Event:2"
std::string event_scalars(double wall_time, int64_t step, const ScalarValues& values);
// SessionLog START at `step`: TensorBoard then drops every event it has read at this step or
// later (purge_orphaned_data), which is how a restarted run hides the steps it takes again.
std::string event_session_start(double wall_time, int64_t step);

// One events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> file in `dir` (created with its
// parents). Every record is flushed as it is written, so a crashed run keeps its events.
class EventFileWriter {
 public:
  // Creates the file and writes the file_version record. Throws BadInput naming `dir` when it
  // cannot be created.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void add_scalars(int64_t step, const ScalarValues& values);
  void add_session_start(int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace medtune::train
