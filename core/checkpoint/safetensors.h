#pragma once
// The safetensors format (what Hugging Face writes): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"k": "v"}}, then the raw little-endian data; offsets count from the end of
// the header. Dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
//
// Reading maps the file (copy-on-write, so a tensor view may be written without touching the
// file) and copies nothing until asked; every header field is validated first and a bad file
// gets an error naming the file and the tensor. The first view of a tensor verifies it: its
// CRC32C when the file carries one ("crc32c:<name>" in __metadata__, which we write; files from
// elsewhere have none) and, for floating tensors, that it holds no NaN/Inf (integrity.h).
// Writing refuses NaN/Inf (a diverged run must not overwrite good checkpoints with garbage). Writing goes to a temporary name, is fsynced,
// then renamed, so a crash never leaves a half-written file under the real name.
//
// Sharded checkpoints: model-00001-of-0000N.safetensors ... plus model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {"name": "model-00001-of-0000N.safetensors"}}).
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colossal::checkpoint {

struct TensorInfo {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data section
  int64_t end = 0;
};

/// "F32" <-> c10::kFloat, ...; unknown names/types throw listing the supported ones.
c10::ScalarType dtype_from_safetensors(const std::string& name);
std::string dtype_to_safetensors(c10::ScalarType dtype);

class SafetensorsFile {
 public:
  /// Maps and validates `path`. Throws naming the file (and tensor) on any inconsistency.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  /// Validates a header without a file (the fuzz target's entry point).
  static std::vector<TensorInfo> parse_header(const std::string& json, int64_t data_bytes,
                                              const std::string& origin,
                                              std::map<std::string, std::string>* metadata);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  /// In header order of names (sorted).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// A tensor viewing the mapped file (no copy; keeps the mapping alive). Verified on first use.
  at::Tensor view(const std::string& name) const;
  /// An owning copy.
  at::Tensor load(const std::string& name) const { return view(name).clone(); }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::weak_ptr<SafetensorsFile> self_;
  std::unique_ptr<std::atomic<bool>[]> verified_;  // per tensor, in tensors_ order
  void verify(const TensorInfo& t, size_t index) const;
};

/// Validates a whole file image (length prefix + header) without mapping a file; returns the
/// tensors and the header length. Every malformed input is a c10::Error naming `origin`.
std::vector<TensorInfo> parse_file_bytes(const uint8_t* bytes, uint64_t size,
                                         const std::string& origin,
                                         std::map<std::string, std::string>* metadata,
                                         uint64_t* header_len = nullptr);

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// Writes one file atomically (temporary name, fsync, rename, fsync of the directory).
/// Names must be unique; tensors may have any layout (they are made contiguous).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct ShardOptions {
  int64_t max_shard_bytes = int64_t{5} << 30;  // like transformers' "5GB"
  std::string prefix = "model";                // model.safetensors / model-0000i-of-0000N...
};

/// Writes `dir`/model.safetensors when everything fits one shard, else numbered shards and the
/// index. Returns the files written (relative names).
std::vector<std::string> save_sharded(const std::string& dir, const NamedTensors& tensors,
                                      const ShardOptions& options = {},
                                      const std::map<std::string, std::string>& metadata = {});

/// Reads a directory written by save_sharded (or by transformers): single file or index + shards.
///
/// A checkpoint laid out differently from the model that reads it (another family's names, a
/// fused matrix the model keeps as several, a transposed layout) is read through derived
/// tensors: derive() adds a tensor computed from stored ones, hide() takes stored ones out of
/// names(), so loaders see the model's names and nothing else changes.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir, const std::string& prefix = "model");
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return derived_.count(name) != 0 || where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  at::Tensor view(const std::string& name) const;
  at::Tensor load(const std::string& name) const { return view(name).clone(); }
  const std::string& dir() const { return dir_; }
  /// Tensor `name` of `dtype` and `shape`, made by `make` when read (a view or a new tensor).
  void derive(const std::string& name, c10::ScalarType dtype, std::vector<int64_t> shape,
              std::function<at::Tensor(const CheckpointReader&)> make);
  /// Stored tensor `name` is left out of names() (still readable: derived tensors read it).
  void hide(const std::string& name);

 private:
  struct Derived {
    TensorInfo info;
    std::function<at::Tensor(const CheckpointReader&)> make;
  };
  std::string dir_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;  // by file name
  std::map<std::string, std::shared_ptr<SafetensorsFile>> where_;  // tensor -> file
  std::map<std::string, Derived> derived_;
  std::set<std::string> hidden_;
};

}  // namespace colossal::checkpoint
