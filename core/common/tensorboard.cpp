#include "core/common/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // Castagnoli, reflected
    table[i] = c;
  }
  return table;
}

// TFRecord stores CRCs rotated and offset, so a CRC of data holding CRCs stays well distributed.
uint32_t masked_crc(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// Protobuf wire format: field keys and varints.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
template <typename T>
void put_fixed(std::string& out, int field, T v) {
  put_key(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));  // little-endian, as x86 and protobuf both are
  out.append(raw, sizeof(T));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
std::string event(int64_t step, int field, const std::string& payload) {
  std::string e;
  put_fixed(e, 1, now_seconds());
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, field, payload);
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const auto table = make_crc_table();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  fs::make_dirs(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // The time in the name orders a directory's runs; the pid keeps two writers of one second apart.
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host + "." +
          std::to_string(::getpid());
  file_ = std::fopen(path_.c_str(), "ab");
  COLOSSAL_CHECK(file_ != nullptr, "[tensorboard] cannot create '", path_, "': ", std::strerror(errno));
  write_record(event(0, 3, "brain.Event:2"));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string v;
  put_bytes(v, 1, tag);
  put_fixed(v, 2, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  write_record(event(step, 5, summary));
}

void TensorBoardWriter::flush() {
  COLOSSAL_CHECK(std::fflush(file_) == 0, "[tensorboard] cannot write '", path_, "': ", std::strerror(errno));
}

void TensorBoardWriter::write_record(const std::string& data) {
  const uint64_t length = data.size();
  const uint32_t length_crc = masked_crc(&length, sizeof length);
  const uint32_t data_crc = masked_crc(data.data(), data.size());
  std::string record(reinterpret_cast<const char*>(&length), sizeof length);
  record.append(reinterpret_cast<const char*>(&length_crc), sizeof length_crc);
  record += data;
  record.append(reinterpret_cast<const char*>(&data_crc), sizeof data_crc);
  COLOSSAL_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(), "[tensorboard] cannot write '",
                 path_, "': ", std::strerror(errno));
}

}  // namespace colossal
