#pragma once
// Writes GGUF version 3 files (the layout gguf.h reads): the metadata, the tensor descriptions,
// then each tensor's bytes from the next multiple of 32. Tensors are produced one at a time while
// the file is written (a model larger than memory streams through), and the file appears only
// when complete (AtomicFile: write, fsync, rename).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/checkpoint/gguf.h"

namespace colossal::checkpoint {

class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& value);
  void add_u32(const std::string& key, uint32_t value);
  void add_i32(const std::string& key, int32_t value);
  void add_f32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_strings(const std::string& key, const std::vector<std::string>& values);
  void add_f32s(const std::string& key, const std::vector<float>& values);
  void add_i32s(const std::string& key, const std::vector<int32_t>& values);

  /// Produces a tensor's bytes in `type` when the file reaches it (ggml_type_bytes(type, elements)
  /// of them, checked).
  using Producer = std::function<std::vector<uint8_t>()>;
  /// `shape` in ggml order (innermost first: a [rows, cols] matrix is {cols, rows}).
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> shape, Producer produce);

  /// Writes everything to `path` atomically; throws naming the tensor whose bytes do not match.
  void write(const std::string& path) const;
  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    uint64_t bytes;  // what `produce` must return
    Producer produce;
  };
  void key(const std::string& name, uint32_t type);
  template <typename T>
  void add_array(const std::string& name, uint32_t element_type, const std::vector<T>& values);
  std::string kv_;  // the encoded key-value pairs
  uint64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace colossal::checkpoint
