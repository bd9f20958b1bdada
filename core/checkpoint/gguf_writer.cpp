#include "core/checkpoint/gguf_writer.h"

#include <cstring>
#include <type_traits>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"

namespace colossal::checkpoint {

namespace gguf_writing {  // named: this file shares a unity batch with gguf.cpp's reader

constexpr uint64_t kAlignment = 32;  // general.alignment's default (the key is not written)
// GGUF value types (gguf.cpp's reader has its own names for them: one unity batch holds both).
enum WrittenType : uint32_t {
  kWriteU32 = 4, kWriteI32 = 5, kWriteF32 = 6, kWriteBool = 7, kWriteString = 8, kWriteArray = 9
};

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}
uint64_t padded(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace gguf_writing
using namespace gguf_writing;  // NOLINT(build/namespaces): this file's own helpers

void GgufWriter::key(const std::string& name, uint32_t type) {
  put_string(kv_, name);
  put<uint32_t>(kv_, type);
  ++kv_count_;
}

void GgufWriter::add_string(const std::string& k, const std::string& v) {
  key(k, kWriteString);
  put_string(kv_, v);
}
void GgufWriter::add_u32(const std::string& k, uint32_t v) {
  key(k, kWriteU32);
  put(kv_, v);
}
void GgufWriter::add_i32(const std::string& k, int32_t v) {
  key(k, kWriteI32);
  put(kv_, v);
}
void GgufWriter::add_f32(const std::string& k, float v) {
  key(k, kWriteF32);
  put(kv_, v);
}
void GgufWriter::add_bool(const std::string& k, bool v) {
  key(k, kWriteBool);
  put<uint8_t>(kv_, v ? 1 : 0);
}
template <typename T>
void GgufWriter::add_array(const std::string& k, uint32_t element_type, const std::vector<T>& values) {
  key(k, kWriteArray);
  put<uint32_t>(kv_, element_type);
  put<uint64_t>(kv_, values.size());
  for (const auto& v : values) {
    if constexpr (std::is_same_v<T, std::string>) put_string(kv_, v);
    else put(kv_, v);
  }
}
void GgufWriter::add_strings(const std::string& k, const std::vector<std::string>& values) {
  add_array(k, kWriteString, values);
}
void GgufWriter::add_f32s(const std::string& k, const std::vector<float>& values) { add_array(k, kWriteF32, values); }
void GgufWriter::add_i32s(const std::string& k, const std::vector<int32_t>& values) { add_array(k, kWriteI32, values); }

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> shape, Producer produce) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  COLOSSAL_CHECK(!shape.empty() && elements > 0, "[gguf] tensor '", name, "': empty shape");
  // ggml stores rows as whole blocks of the type.
  COLOSSAL_CHECK(ggml_type_bytes(static_cast<uint32_t>(type), shape[0]) > 0, "[gguf] tensor '", name, "': ",
                 ggml_type_name(static_cast<uint32_t>(type)), " rows of ", shape[0], " values are not whole blocks");
  for (const auto& t : tensors_) COLOSSAL_CHECK(t.name != name, "[gguf] tensor '", name, "' added twice");
  const auto bytes = static_cast<uint64_t>(ggml_type_bytes(static_cast<uint32_t>(type), elements));
  tensors_.push_back({name, type, std::move(shape), bytes, std::move(produce)});
}

void GgufWriter::write(const std::string& path) const {
  std::string head;
  put<uint32_t>(head, 0x46554747u);  // "GGUF"
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head += kv_;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset = padded(offset + t.bytes);
  }
  head.resize(padded(head.size()), '\0');
  AtomicFile file(path);
  file.write(head.data(), head.size());
  const std::string zeros(kAlignment, '\0');
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    const auto bytes = t.produce();
    COLOSSAL_CHECK(bytes.size() == t.bytes, "[gguf] tensor '", t.name, "': ", bytes.size(), " bytes produced, ",
                   t.bytes, " expected for ", ggml_type_name(static_cast<uint32_t>(t.type)));
    file.write(bytes.data(), bytes.size());
    if (i + 1 < tensors_.size()) file.write(zeros.data(), padded(t.bytes) - t.bytes);
  }
  file.commit();
}

}  // namespace colossal::checkpoint
