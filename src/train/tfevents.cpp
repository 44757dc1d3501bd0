#include "train/tfevents.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace medtune::train {

namespace fs = std::filesystem;

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// ---- protobuf wire format, the few pieces an Event needs ----
enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, int field, WireType type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}
template <typename T>
void put_little_endian(std::string& out, T bits) {
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// The fields every Event starts with.
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_little_endian(e, std::bit_cast<uint64_t>(wall_time));
  if (step != 0) {  // proto3: a zero scalar is not written
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));  // negative steps are ten bytes, as protobuf has it
  }
  return e;
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// TensorBoard reads the event files of a directory in the order of their names, and only the
// order tells it which file a restart's SessionLog START comes after. A resumed run started in
// the same second as the run it continues would sort by pid, not by time, so its timestamp is
// moved past the newest file already there.
int64_t file_timestamp(const std::string& dir) {
  auto t = static_cast<int64_t>(unix_time_now());
  constexpr std::string_view kPrefix = "events.out.tfevents.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::string rest = name.substr(kPrefix.size());
    int64_t seen = 0;
    try {
      seen = std::stoll(rest.substr(0, rest.find('.')));
    } catch (const std::exception&) {
      continue;  // not one of ours
    }
    if (seen >= t) t = seen + 1;
  }
  return t;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = kCrc32cTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_little_endian(length, static_cast<uint64_t>(data.size()));
  std::string out = length;
  put_little_endian(out, masked_crc32c(length));
  out.append(data);
  put_little_endian(out, masked_crc32c(data));
  return out;
}

std::string event_file_version(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const ScalarValues& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, kFixed32);
    put_little_endian(v, std::bit_cast<uint32_t>(value));
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string event_session_start(double wall_time, int64_t step) {
  std::string session_log;
  put_key(session_log, 1, kVarint);
  put_varint(session_log, 1);  // SessionLog.START
  std::string e = event_header(wall_time, step);
  put_bytes(e, 7, session_log);  // 7, not 6: field 6 is the deprecated log_message
  return e;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw BadInput("logging_dir " + dir + ": cannot create it: " + ec.message());
  // <n> tells apart the files one process opens in the same second, as TensorFlow's counter does.
  static std::atomic<int> counter{0};
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(file_timestamp(dir)) + "." + host_name() + "." +
                            std::to_string(getpid()) + "." + std::to_string(counter++)))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw BadInput("logging_dir: cannot create " + path_ + ": " + std::strerror(errno));
  write_record(event_file_version(unix_time_now()));
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::add_scalars(int64_t step, const ScalarValues& values) {
  write_record(event_scalars(unix_time_now(), step, values));
}

void EventFileWriter::add_session_start(int64_t step) {
  write_record(event_session_start(unix_time_now(), step));
}

void EventFileWriter::write_record(const std::string& event) {
  const std::string record = tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw Internal(path_ + ": cannot write the TensorBoard event: " + std::strerror(errno));
}

}  // namespace medtune::train
