#include "core/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/integrity.h"
#include "core/common/check.h"

namespace colossal::checkpoint {
namespace {

void write_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->self_ = f;
  f->path_ = path;
  std::string origin = "file '" + path + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  COLOSSAL_CHECK(fd >= 0, "[safetensors] cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    COLOSSAL_FAIL("[safetensors] ", origin, ": 0 bytes is too short for a header");
  }
  // Copy-on-write: views may be modified in memory without ever touching the file.
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  COLOSSAL_CHECK(map != MAP_FAILED, "[safetensors] cannot map '", path, "': ", std::strerror(errno));
  f->map_ = map;
  f->map_size_ = size;
  auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  f->tensors_ = parse_file_bytes(bytes, size, origin, &f->metadata_, &header_len);
  f->data_ = bytes + 8 + header_len;
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  f->verified_ = std::make_unique<std::atomic<bool>[]>(f->tensors_.size());
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::verify(const TensorInfo& t, size_t index) const {
  if (verified_[index].load(std::memory_order_acquire)) return;
  const uint8_t* bytes = data_ + t.begin;
  if (auto it = metadata_.find(checksum_key(t.name)); it != metadata_.end()) {
    const std::string computed = format_checksum(crc32c(bytes, static_cast<size_t>(t.end - t.begin)));
    COLOSSAL_CHECK(computed == it->second, "[safetensors] file '", path_, "': tensor '", t.name,
                   "' does not match its checksum (crc32c stored ", it->second, ", computed ", computed,
                   "): the file is damaged; restore it from a copy or an earlier checkpoint");
  }
  if (!non_finite_allowed()) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (auto bad = find_non_finite(bytes, numel, t.dtype)) {
      COLOSSAL_FAIL("[safetensors] file '", path_, "': tensor '", t.name, "' holds ", bad->count, " NaN/Inf value",
                    bad->count == 1 ? "" : "s", " of ", numel, " (first at flat index ", bad->first,
                    "); weights like these produce garbage. COLOSSAL_ALLOW_NONFINITE=1 loads them anyway");
    }
  }
  verified_[index].store(true, std::memory_order_release);
}

at::Tensor SafetensorsFile::view(const std::string& name) const {
  const TensorInfo* t = find(name);
  COLOSSAL_CHECK(t != nullptr, "[safetensors] file '", path_, "' has no tensor '", name, "'");
  verify(*t, static_cast<size_t>(t - tensors_.data()));
  auto keep = self_.lock();  // the tensor's storage keeps the mapping alive
  void* ptr = const_cast<uint8_t*>(data_ + t->begin);
  if (t->end == t->begin) return at::empty(t->shape, at::TensorOptions().dtype(t->dtype));
  return at::from_blob(ptr, t->shape, [keep](void*) {}, at::TensorOptions().dtype(t->dtype));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> meta = metadata;
  std::set<std::string> seen;
  std::vector<at::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    COLOSSAL_CHECK(name != "__metadata__", "[safetensors] '__metadata__' is reserved");
    COLOSSAL_CHECK(seen.insert(name).second, "[safetensors] tensor '", name, "' given twice for '",
                   path, "'");
    COLOSSAL_CHECK(tensor.defined(), "[safetensors] tensor '", name, "' is undefined");
    auto t = tensor.detach().to(at::kCPU).contiguous();
    int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (auto bad = find_non_finite(t.data_ptr(), t.numel(), t.scalar_type())) {
      COLOSSAL_FAIL("[safetensors] not writing '", path, "': tensor '", name, "' holds ", bad->count,
                    " NaN/Inf value", bad->count == 1 ? "" : "s", " of ", t.numel(), " (first at flat index ",
                    bad->first, "); the earlier files are left as they were");
    }
    meta[checksum_key(name)] = format_checksum(crc32c(t.data_ptr(), static_cast<size_t>(bytes)));
    header[name] = {{"dtype", dtype_to_safetensors(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  if (!meta.empty()) header["__metadata__"] = meta;
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  uint8_t len[8];
  write_le64(len, json.size());
  AtomicFile f(path);
  f.write(len, 8);
  f.write(json.data(), json.size());
  for (const auto& t : data) f.write(t.data_ptr(), t.numel() * t.element_size());
  f.commit();
}

std::vector<std::string> save_sharded(const std::string& dir, const NamedTensors& tensors,
                                      const ShardOptions& options,
                                      const std::map<std::string, std::string>& metadata) {
  COLOSSAL_CHECK(options.max_shard_bytes > 0, "[safetensors] max_shard_bytes must be > 0");
  ::mkdir(dir.c_str(), 0755);
  // Greedy packing in the given order; a tensor larger than the limit gets a shard of its own.
  std::vector<NamedTensors> shards(1);
  int64_t current = 0, total = 0;
  for (const auto& nt : tensors) {
    int64_t bytes = nt.second.numel() * static_cast<int64_t>(nt.second.element_size());
    if (!shards.back().empty() && current + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(nt);
    current += bytes;
    total += bytes;
  }
  std::vector<std::string> written;
  if (shards.size() == 1) {
    std::string name = options.prefix + ".safetensors";
    save_safetensors(dir + "/" + name, shards[0], metadata);
    return {name};
  }
  nlohmann::json weight_map = nlohmann::json::object();
  char buf[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    std::string name = options.prefix + buf;
    save_safetensors(dir + "/" + name, shards[i], metadata);
    for (const auto& nt : shards[i]) weight_map[nt.first] = name;
    written.push_back(name);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::string index_name = options.prefix + ".safetensors.index.json";
  write_text_atomically(dir + "/" + index_name, index.dump(2) + "\n");
  written.push_back(index_name);
  return written;
}

CheckpointReader::CheckpointReader(const std::string& dir, const std::string& prefix) : dir_(dir) {
  std::string index_path = dir + "/" + prefix + ".safetensors.index.json";
  std::string single = dir + "/" + prefix + ".safetensors";
  struct stat st {};
  if (::stat(index_path.c_str(), &st) == 0) {
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    auto index = nlohmann::json::parse(ss.str(), nullptr, false);
    COLOSSAL_CHECK(!index.is_discarded() && index.is_object() && index.contains("weight_map") &&
                       index["weight_map"].is_object(),
                   "[checkpoint] '", index_path, "': expected JSON with a weight_map object");
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      COLOSSAL_CHECK(it.value().is_string(), "[checkpoint] '", index_path, "': weight_map['",
                     it.key(), "'] must be a file name");
      std::string file = it.value().get<std::string>();
      COLOSSAL_CHECK(file.find('/') == std::string::npos, "[checkpoint] '", index_path,
                     "': shard name '", file, "' must not contain '/'");
      auto& f = files_[file];
      if (!f) f = SafetensorsFile::open(dir + "/" + file);
      COLOSSAL_CHECK(f->find(it.key()) != nullptr, "[checkpoint] '", index_path, "' maps '",
                     it.key(), "' to '", file, "', which does not contain it");
      where_[it.key()] = f;
    }
    return;
  }
  COLOSSAL_CHECK(::stat(single.c_str(), &st) == 0, "[checkpoint] '", dir, "' has neither ",
                 prefix, ".safetensors nor ", prefix, ".safetensors.index.json");
  auto f = SafetensorsFile::open(single);
  files_[prefix + ".safetensors"] = f;
  for (const auto& t : f->tensors()) where_[t.name] = f;
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : where_)
    if (!hidden_.count(name) && !derived_.count(name)) out.push_back(name);
  for (const auto& [name, _] : derived_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void CheckpointReader::derive(const std::string& name, c10::ScalarType dtype, std::vector<int64_t> shape,
                              std::function<at::Tensor(const CheckpointReader&)> make) {
  Derived d;
  d.info.name = name;
  d.info.dtype = dtype;
  d.info.shape = std::move(shape);
  d.make = std::move(make);
  derived_[name] = std::move(d);
}

void CheckpointReader::hide(const std::string& name) { hidden_.insert(name); }

const TensorInfo& CheckpointReader::info(const std::string& name) const {
  if (auto d = derived_.find(name); d != derived_.end()) return d->second.info;
  auto it = where_.find(name);
  COLOSSAL_CHECK(it != where_.end(), "[checkpoint] '", dir_, "' has no tensor '", name, "'");
  return *it->second->find(name);
}

at::Tensor CheckpointReader::view(const std::string& name) const {
  if (auto d = derived_.find(name); d != derived_.end()) {
    auto t = d->second.make(*this);
    COLOSSAL_CHECK(at::IntArrayRef(d->second.info.shape) == t.sizes(), "[checkpoint] '", dir_, "': derived tensor '",
                   name, "' came out ", t.sizes(), ", expected ", at::IntArrayRef(d->second.info.shape));
    return t;
  }
  auto it = where_.find(name);
  COLOSSAL_CHECK(it != where_.end(), "[checkpoint] '", dir_, "' has no tensor '", name, "'");
  return it->second->view(name);
}

}  // namespace colossal::checkpoint
