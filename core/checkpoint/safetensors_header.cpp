// The safetensors header parser, kept apart from the rest (it needs only c10 and nlohmann) so
// the fuzz target (tests/fuzz) can build it with clang and libFuzzer.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "core/checkpoint/safetensors.h"
#include "core/common/check.h"

namespace colossal::checkpoint {
namespace {

// The header can be large for big models, but never this large; a bigger length is corruption.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const std::vector<std::pair<const char*, c10::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<const char*, c10::ScalarType>> t = {
      {"F64", c10::kDouble}, {"F32", c10::kFloat}, {"F16", c10::kHalf},
      {"BF16", c10::kBFloat16}, {"I64", c10::kLong}, {"I32", c10::kInt},
      {"I16", c10::kShort}, {"I8", c10::kChar}, {"U8", c10::kByte}, {"BOOL", c10::kBool}};
  return t;
}

std::string supported_dtypes() {
  std::string s;
  for (const auto& [name, _] : dtype_table()) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

c10::ScalarType dtype_from_safetensors(const std::string& name) {
  for (const auto& [n, t] : dtype_table())
    if (name == n) return t;
  COLOSSAL_FAIL("[safetensors] unknown dtype '", name, "' (supported: ", supported_dtypes(), ")");
}

std::string dtype_to_safetensors(c10::ScalarType dtype) {
  for (const auto& [n, t] : dtype_table())
    if (dtype == t) return n;
  COLOSSAL_FAIL("[safetensors] cannot store dtype ", dtype, " (supported: ", supported_dtypes(), ")");
}

std::vector<TensorInfo> SafetensorsFile::parse_header(const std::string& json, int64_t data_bytes,
                                                      const std::string& origin,
                                                      std::map<std::string, std::string>* metadata) {
  auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  COLOSSAL_CHECK(!doc.is_discarded(), "[safetensors] ", origin, ": the header is not valid JSON");
  COLOSSAL_CHECK(doc.is_object(), "[safetensors] ", origin, ": the header must be a JSON object");
  std::vector<TensorInfo> out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      COLOSSAL_CHECK(v.is_object(), "[safetensors] ", origin, ": __metadata__ must be an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        COLOSSAL_CHECK(m.value().is_string(), "[safetensors] ", origin, ": __metadata__ value '",
                       m.key(), "' must be a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto where = [&] { return c10::str("[safetensors] ", origin, ", tensor '", name, "': "); };
    COLOSSAL_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") &&
                       v.contains("data_offsets"),
                   where(), "expected an object with dtype, shape and data_offsets");
    COLOSSAL_CHECK(v["dtype"].is_string(), where(), "dtype must be a string");
    TensorInfo t;
    t.name = name;
    try {
      t.dtype = dtype_from_safetensors(v["dtype"].get<std::string>());
    } catch (const c10::Error& e) {
      COLOSSAL_FAIL(where(), "unknown dtype '", v["dtype"].get<std::string>(), "' (supported: ",
                    supported_dtypes(), ")");
    }
    COLOSSAL_CHECK(v["shape"].is_array(), where(), "shape must be a list");
    int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      COLOSSAL_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                     where(), "shape entries must be non-negative integers, found ", d.dump());
      int64_t dim = d.get<int64_t>();
      COLOSSAL_CHECK(dim == 0 || numel <= std::numeric_limits<int64_t>::max() / dim, where(),
                     "shape overflows");
      numel *= dim;
      t.shape.push_back(dim);
    }
    const auto& off = v["data_offsets"];
    COLOSSAL_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_integer() &&
                       off[1].is_number_integer(),
                   where(), "data_offsets must be [begin, end]");
    t.begin = off[0].get<int64_t>();
    t.end = off[1].get<int64_t>();
    COLOSSAL_CHECK(t.begin >= 0 && t.begin <= t.end && t.end <= data_bytes, where(),
                   "data_offsets [", t.begin, ", ", t.end, "] outside the data section of ",
                   data_bytes, " bytes");
    int64_t want = numel * static_cast<int64_t>(c10::elementSize(t.dtype));
    COLOSSAL_CHECK(t.end - t.begin == want, where(), "shape ", v["shape"].dump(), " of ",
                   v["dtype"].get<std::string>(), " needs ", want, " bytes but data_offsets hold ",
                   t.end - t.begin);
    out.push_back(std::move(t));
  }
  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : out) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* a = by_offset[i - 1];
    const auto* b = by_offset[i];
    COLOSSAL_CHECK(b->begin >= a->end || a->begin == a->end || b->begin == b->end,
                   "[safetensors] ", origin, ": tensors '", a->name, "' [", a->begin, ", ", a->end,
                   ") and '", b->name, "' [", b->begin, ", ", b->end, ") overlap");
  }
  std::sort(out.begin(), out.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return out;
}

std::vector<TensorInfo> parse_file_bytes(const uint8_t* bytes, uint64_t size,
                                         const std::string& origin,
                                         std::map<std::string, std::string>* metadata,
                                         uint64_t* header_len_out) {
  COLOSSAL_CHECK(size >= 8, "[safetensors] ", origin, ": ", size,
                 " bytes is too short for a header");
  uint64_t header_len = read_le64(bytes);
  COLOSSAL_CHECK(header_len <= kMaxHeaderBytes && header_len <= size - 8, "[safetensors] ", origin,
                 ": header length ", header_len, " is larger than the file (", size,
                 " bytes): truncated or not a safetensors file");
  std::string json(reinterpret_cast<const char*>(bytes + 8), header_len);
  if (header_len_out) *header_len_out = header_len;
  return SafetensorsFile::parse_header(json, static_cast<int64_t>(size - 8 - header_len), origin,
                                       metadata);
}

}  // namespace colossal::checkpoint
