#include "core/checkpoint/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/common/check.h"

namespace colossal::checkpoint {

namespace {

// ggml's type table, by id: name, elements per block, bytes per block (0: no longer used).
struct TypeInfo {
  const char* name;
  int64_t block, bytes;
};
const TypeInfo kTypes[] = {
    {"F32", 1, 4},      {"F16", 1, 2},       {"Q4_0", 32, 18},   {"Q4_1", 32, 20},  {"Q4_2", 0, 0},
    {"Q4_3", 0, 0},     {"Q5_0", 32, 22},    {"Q5_1", 32, 24},   {"Q8_0", 32, 34},  {"Q8_1", 32, 36},
    {"Q2_K", 256, 84},  {"Q3_K", 256, 110},  {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
    {"Q8_K", 256, 292}, {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18}, {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82}, {"IQ4_XS", 256, 136}, {"I8", 1, 1},
    {"I16", 1, 2},      {"I32", 1, 4},       {"I64", 1, 8},      {"F64", 1, 8},     {"IQ1_M", 256, 56},
    {"BF16", 1, 2},
};
constexpr uint32_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

enum ValueType : uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64
};

// A bounds-checked reader over the mapped bytes.
class GgufReader {
 public:
  GgufReader(const uint8_t* data, uint64_t size, const std::string& path) : p_(data), size_(size), path_(path) {}
  uint64_t offset() const { return off_; }
  void need(uint64_t n, const char* what) const {
    COLOSSAL_CHECK(n <= size_ - off_, "[gguf] ", path_, ": truncated at byte ", off_, " reading ", what, " (",
                   n, " bytes wanted, ", size_ - off_, " left)");
  }
  template <typename T>
  T pod(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = pod<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + off_), n);
    off_ += n;
    return s;
  }
  GgufValue value(uint32_t type, const std::string& key, int depth) {
    GgufValue v;
    switch (type) {
      case kU8: v.i = pod<uint8_t>(key.c_str()); break;
      case kI8: v.i = pod<int8_t>(key.c_str()); break;
      case kU16: v.i = pod<uint16_t>(key.c_str()); break;
      case kI16: v.i = pod<int16_t>(key.c_str()); break;
      case kU32: v.i = pod<uint32_t>(key.c_str()); break;
      case kI32: v.i = pod<int32_t>(key.c_str()); break;
      case kU64: v.i = static_cast<int64_t>(pod<uint64_t>(key.c_str())); break;
      case kI64: v.i = pod<int64_t>(key.c_str()); break;
      case kF32: v.kind = GgufValue::Kind::kFloat; v.f = pod<float>(key.c_str()); break;
      case kF64: v.kind = GgufValue::Kind::kFloat; v.f = pod<double>(key.c_str()); break;
      case kBool:
        v.kind = GgufValue::Kind::kBool;
        v.b = pod<uint8_t>(key.c_str()) != 0;
        break;
      case kString:
        v.kind = GgufValue::Kind::kString;
        v.s = str(key.c_str());
        break;
      case kArray: {
        COLOSSAL_CHECK(depth < 4, "[gguf] ", path_, ": key '", key, "' nests arrays too deeply");
        v.kind = GgufValue::Kind::kArray;
        const uint32_t item = pod<uint32_t>(key.c_str());
        const uint64_t n = pod<uint64_t>(key.c_str());
        // Each item takes at least one byte: a count larger than the rest of the file is corrupt.
        COLOSSAL_CHECK(n <= size_ - off_, "[gguf] ", path_, ": key '", key, "' claims ", n,
                       " array items, more than the file's remaining ", size_ - off_, " bytes");
        v.array.reserve(n);
        for (uint64_t k = 0; k < n; ++k) v.array.push_back(value(item, key, depth + 1));
        break;
      }
      default:
        COLOSSAL_CHECK(false, "[gguf] ", path_, ": key '", key, "' has value type ", type,
                       " (expected 0..12: a corrupt file or a newer GGUF version)");
    }
    return v;
  }

 private:
  const uint8_t* p_;
  uint64_t size_, off_ = 0;
  const std::string& path_;
};

}  // namespace

std::string ggml_type_name(uint32_t type) {
  if (type < kTypeCount && kTypes[type].block > 0) return kTypes[type].name;
  return "type " + std::to_string(type);
}

int64_t ggml_type_bytes(uint32_t type, int64_t elements) {
  if (type >= kTypeCount || kTypes[type].block == 0 || elements % kTypes[type].block != 0) return -1;
  return elements / kTypes[type].block * kTypes[type].bytes;
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  COLOSSAL_CHECK(fd >= 0, "[gguf] cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 24) {
    ::close(fd);
    COLOSSAL_CHECK(false, "[gguf] ", path, ": ", size, " bytes, too short for a GGUF header");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  COLOSSAL_CHECK(map != MAP_FAILED, "[gguf] cannot map '", path, "': ", std::strerror(errno));
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->map_ = map;
  f->map_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(map);
  GgufReader r(bytes, size, path);
  COLOSSAL_CHECK(std::memcmp(bytes, "GGUF", 4) == 0, "[gguf] ", path, ": not a GGUF file (it starts with '",
                 std::string(reinterpret_cast<const char*>(bytes), 4), "', expected 'GGUF')");
  r.pod<uint32_t>("magic");
  f->version_ = r.pod<uint32_t>("version");
  COLOSSAL_CHECK(f->version_ == 2 || f->version_ == 3, "[gguf] ", path, ": version ", f->version_,
                 " (this reader takes GGUF versions 2 and 3)");
  const uint64_t tensor_count = r.pod<uint64_t>("tensor count");
  const uint64_t kv_count = r.pod<uint64_t>("metadata count");
  COLOSSAL_CHECK(tensor_count <= size && kv_count <= size, "[gguf] ", path, ": header claims ", tensor_count,
                 " tensors and ", kv_count, " metadata keys in a file of ", size, " bytes");
  for (uint64_t k = 0; k < kv_count; ++k) {
    std::string key = r.str("metadata key");
    const uint32_t type = r.pod<uint32_t>(key.c_str());
    f->metadata_[key] = r.value(type, key, 0);
  }
  struct Raw {
    std::string name;
    uint32_t type;
    std::vector<int64_t> shape;
    uint64_t offset;
  };
  std::vector<Raw> raw;
  for (uint64_t t = 0; t < tensor_count; ++t) {
    Raw x;
    x.name = r.str("tensor name");
    const uint32_t dims = r.pod<uint32_t>(x.name.c_str());
    COLOSSAL_CHECK(dims >= 1 && dims <= 4, "[gguf] ", path, ": tensor '", x.name, "' has ", dims,
                   " dimensions (expected 1..4)");
    for (uint32_t d = 0; d < dims; ++d) {
      const uint64_t n = r.pod<uint64_t>(x.name.c_str());
      COLOSSAL_CHECK(n >= 1 && n <= (uint64_t{1} << 40), "[gguf] ", path, ": tensor '", x.name, "' dimension ", d,
                     " is ", n);
      x.shape.push_back(static_cast<int64_t>(n));
    }
    x.type = r.pod<uint32_t>(x.name.c_str());
    x.offset = r.pod<uint64_t>(x.name.c_str());
    raw.push_back(std::move(x));
  }
  const int64_t alignment = f->get_int("general.alignment", 32);
  COLOSSAL_CHECK(alignment >= 1 && alignment <= (1 << 20) && (alignment & (alignment - 1)) == 0, "[gguf] ", path,
                 ": general.alignment is ", alignment, " (expected a power of two)");
  // Writers place every tensor at a multiple of the alignment; one that is not means the offsets
  // and the alignment disagree, and the weights would be read shifted.
  for (const auto& x : raw)
    COLOSSAL_CHECK(x.offset % static_cast<uint64_t>(alignment) == 0, "[gguf] ", path, ": tensor '", x.name,
                   "' starts at data offset ", x.offset, ", not a multiple of general.alignment ", alignment,
                   " (the file's layout is inconsistent)");
  const uint64_t data_start = (r.offset() + alignment - 1) / alignment * alignment;
  COLOSSAL_CHECK(data_start <= size, "[gguf] ", path, ": the data section starts past the end of the file");
  for (auto& x : raw) {
    GgufTensor t;
    t.name = x.name;
    t.type = x.type;
    t.shape = x.shape;
    t.bytes = ggml_type_bytes(x.type, t.elements());
    if (t.bytes < 0) t.bytes = 0;  // an unknown type or a shape that is not whole blocks: refused on use
    COLOSSAL_CHECK(x.offset <= size - data_start && static_cast<uint64_t>(t.bytes) <= size - data_start - x.offset,
                   "[gguf] ", path, ": tensor '", t.name, "' (", t.bytes, " bytes at data offset ", x.offset,
                   ") runs past the end of the file");
    t.data = bytes + data_start + x.offset;
    COLOSSAL_CHECK(f->index_.emplace(t.name, f->tensors_.size()).second, "[gguf] ", path, ": tensor '", t.name,
                   "' appears twice");
    f->tensors_.push_back(std::move(t));
  }
  return f;
}

int64_t first_non_finite(const GgufTensor& t) {
  auto half_bad = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return (h & 0x7C00) == 0x7C00;
  };
  const int64_t n = t.elements();
  switch (static_cast<GgmlType>(t.type)) {
    case GgmlType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, t.data + 4 * i, 4);
        if ((bits & 0x7F800000u) == 0x7F800000u) return i;
      }
      return -1;
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const uint16_t mask = t.type == static_cast<uint32_t>(GgmlType::kF16) ? 0x7C00 : 0x7F80;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        if ((h & mask) == mask) return i;
      }
      return -1;
    }
    default: break;
  }
  // Quantized blocks: (block bytes, offsets of the fp16 scales in a block).
  struct Scales {
    GgmlType type;
    int64_t bytes;
    int first, second;  // -1: none
  };
  constexpr Scales kScales[] = {{GgmlType::kQ8_0, 34, 0, -1},   {GgmlType::kQ4_0, 18, 0, -1},
                                {GgmlType::kQ2_K, 84, 80, 82},  {GgmlType::kQ3_K, 110, 108, -1},
                                {GgmlType::kQ4_K, 144, 0, 2},   {GgmlType::kQ5_K, 176, 0, 2},
                                {GgmlType::kQ6_K, 210, 208, -1}};
  for (const auto& s : kScales) {
    if (t.type != static_cast<uint32_t>(s.type)) continue;
    for (int64_t b = 0; b < t.bytes / s.bytes; ++b) {
      const uint8_t* block = t.data + b * s.bytes;
      if (half_bad(block + s.first) || (s.second >= 0 && half_bad(block + s.second))) return b;
    }
  }
  return -1;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

namespace {
const char* kind_name(GgufValue::Kind k) {
  switch (k) {
    case GgufValue::Kind::kInt: return "an integer";
    case GgufValue::Kind::kFloat: return "a float";
    case GgufValue::Kind::kBool: return "a bool";
    case GgufValue::Kind::kString: return "a string";
    case GgufValue::Kind::kArray: return "an array";
  }
  return "?";
}
}  // namespace

const GgufValue& GgufFile::lookup(const std::string& key) const {
  auto it = metadata_.find(key);
  COLOSSAL_CHECK(it != metadata_.end(), "[gguf] ", path_, ": no metadata key '", key, "'");
  return it->second;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = lookup(key);
  COLOSSAL_CHECK(v.kind == GgufValue::Kind::kInt, "[gguf] ", path_, ": '", key, "' is ", kind_name(v.kind),
                 ", expected an integer");
  return v.i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = lookup(key);
  COLOSSAL_CHECK(v.kind == GgufValue::Kind::kFloat || v.kind == GgufValue::Kind::kInt, "[gguf] ", path_, ": '", key,
                 "' is ", kind_name(v.kind), ", expected a number");
  return v.kind == GgufValue::Kind::kFloat ? v.f : static_cast<double>(v.i);
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = lookup(key);
  COLOSSAL_CHECK(v.kind == GgufValue::Kind::kString, "[gguf] ", path_, ": '", key, "' is ", kind_name(v.kind),
                 ", expected a string");
  return v.s;
}

const std::vector<GgufValue>& GgufFile::get_array(const std::string& key) const {
  const GgufValue& v = lookup(key);
  COLOSSAL_CHECK(v.kind == GgufValue::Kind::kArray, "[gguf] ", path_, ": '", key, "' is ", kind_name(v.kind),
                 ", expected an array");
  return v.array;
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const GgufValue& v = lookup(key);
  COLOSSAL_CHECK(v.kind == GgufValue::Kind::kBool || v.kind == GgufValue::Kind::kInt, "[gguf] ", path_, ": '", key,
                 "' is ", kind_name(v.kind), ", expected a bool");
  return v.kind == GgufValue::Kind::kBool ? v.b : v.i != 0;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const auto* t = find(name);
  COLOSSAL_CHECK(t != nullptr, "[gguf] ", path_, ": no tensor '", name, "'");
  return *t;
}

}  // namespace colossal::checkpoint
