#pragma once
// GGUF, llama.cpp's model file: "GGUF", a version (2 or 3), tensor and key counts, typed
// key-value metadata (architecture, hyper-parameters, the tokenizer's vocabulary), tensor
// descriptions (name, dimensions innermost first, ggml type, offset), then the tensor data from
// the next multiple of `general.alignment` (32 by default). Read through a read-only memory map:
// nothing is copied until a caller converts a tensor. Every count, length and offset is checked
// against the file before use, so a truncated or corrupt file gets an error naming the file and
// the field, never a read past the end.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colossal::checkpoint {

/// The ggml tensor types this version can convert (others are read, named, and refused by the
/// loader that meets them).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30
};
/// "F32", "Q4_K", ... for any ggml type id (or "type <n>").
std::string ggml_type_name(uint32_t type);
/// Bytes of `elements` values of `type` (a multiple of its block); -1 for a type not listed above.
int64_t ggml_type_bytes(uint32_t type, int64_t elements);

struct GgufValue {
  enum class Kind { kInt, kFloat, kBool, kString, kArray } kind = Kind::kInt;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<GgufValue> array;
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;           // ggml type id
  std::vector<int64_t> shape;  // ggml order: shape[0] is the innermost (a matrix's columns)
  const uint8_t* data = nullptr;
  int64_t bytes = 0;
  int64_t elements() const;
};

/// The first element (f32, f16, bf16) or block (q8_0, q4_0 and the K-quants: their fp16 scales)
/// of `t` that is NaN or infinite, or -1 when there is none (or the type is not one of those).
int64_t first_non_finite(const GgufTensor& t);

class GgufFile {
 public:
  /// Maps and validates `path`; throws naming the file and the field on any inconsistency.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  /// Typed lookups: throw naming the file and the key when it is missing or of another kind.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // an integer value is accepted too
  std::string get_string(const std::string& key) const;
  const std::vector<GgufValue>& get_array(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }
  double get_float(const std::string& key, double fallback) const { return has(key) ? get_float(key) : fallback; }
  bool get_bool(const std::string& key, bool fallback) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;
  /// Throws naming the file and the tensor when it is absent.
  const GgufTensor& tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  const GgufValue& lookup(const std::string& key) const;
  std::string path_;
  uint32_t version_ = 0;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

}  // namespace colossal::checkpoint
