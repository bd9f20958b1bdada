#include "core/data/r_data.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/common/check.h"

namespace colossal::data {
namespace {

// SEXPTYPEs and the serialization's special codes (R's serialize.c).
constexpr int kNil = 0, kSym = 1, kList = 2, kClosure = 3, kEnv = 4, kPromise = 5, kLang = 6, kChar = 9,
              kLgl = 10, kInt = 13, kReal = 14, kCplx = 15, kStr = 16, kDots = 17, kVec = 19, kExpr = 20,
              kS4 = 25;
constexpr int kAltrep = 238, kAttrList = 239, kAttrLang = 240, kBaseEnv = 241, kEmptyEnv = 242,
              kBaseNamespace = 250, kNamespace = 249, kPackage = 248, kPersist = 247, kMissingArg = 251,
              kUnbound = 252, kGlobalEnv = 253, kNilValue = 254, kRef = 255;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[r_data] cannot read '", path, "'");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// zlib (windowBits 15) or gzip (15 + 16) stream -> bytes.
std::string inflate_all(const char* data, size_t size, bool gzip, size_t expected, const std::string& where) {
  std::string out(expected > 0 ? expected : size * 4 + 1024, '\0');
  z_stream z{};
  COLOSSAL_CHECK(inflateInit2(&z, gzip ? 15 + 16 : 15) == Z_OK, "[r_data] zlib initialisation failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(size);
  int rc = Z_OK;
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(out.data() + z.total_out);
    z.avail_out = static_cast<uInt>(out.size() - z.total_out);
    rc = inflate(&z, Z_FINISH);
    if (rc == Z_STREAM_END || expected > 0) break;
    if (rc != Z_BUF_ERROR && rc != Z_OK) break;
    out.resize(out.size() * 2);
  }
  const size_t produced = z.total_out;
  inflateEnd(&z);
  COLOSSAL_CHECK(rc == Z_STREAM_END && (expected == 0 || produced == expected), "[r_data] ", where,
                 ": not a complete ", gzip ? "gzip" : "zlib", " stream", expected ? " of " + std::to_string(expected) + " bytes" : "",
                 " (zlib status ", rc, ")");
  out.resize(produced);
  return out;
}

class Unserializer {
 public:
  Unserializer(const std::string& buf, std::string where) : buf_(buf), where_(std::move(where)) {}

  RValue run() {
    COLOSSAL_CHECK(buf_.size() >= 2 && buf_.compare(0, 2, "X\n") == 0, "[r_data] ", where_,
                   ": not R's XDR serialization (expected \"X\\n\")");
    pos_ = 2;
    const int32_t version = int32();
    COLOSSAL_CHECK(version == 2 || version == 3, "[r_data] ", where_, ": serialization version ", version,
                   ", expected 2 or 3");
    int32();  // the R version that wrote it
    int32();  // the oldest R that reads it
    if (version == 3) bytes(int32());  // native encoding
    return item();
  }

 private:
  int32_t int32() {
    COLOSSAL_CHECK(pos_ + 4 <= buf_.size(), "[r_data] ", where_, ": truncated at byte ", pos_);
    const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
    pos_ += 4;
    return static_cast<int32_t>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]);
  }
  double real() {
    COLOSSAL_CHECK(pos_ + 8 <= buf_.size(), "[r_data] ", where_, ": truncated at byte ", pos_);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(buf_[pos_ + i]);
    pos_ += 8;
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  std::string bytes(int64_t n) {
    COLOSSAL_CHECK(n >= 0 && pos_ + static_cast<size_t>(n) <= buf_.size(), "[r_data] ", where_, ": ", n,
                   " bytes run past the end at byte ", pos_);
    std::string s = buf_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  int64_t length() {
    const int32_t n = int32();
    if (n != -1) return n;
    const int64_t upper = int32(), lower = static_cast<uint32_t>(int32());
    return (upper << 32) + lower;
  }
  void check_count(int64_t n, int64_t element_bytes) {
    COLOSSAL_CHECK(n >= 0 && static_cast<uint64_t>(n) * element_bytes <= buf_.size() - pos_, "[r_data] ", where_,
                   ": a vector of ", n, " elements runs past the end at byte ", pos_);
  }

  void read_attributes(RValue& v) {
    RValue list = item();
    for (size_t i = 0; i < list.items.size(); ++i)
      v.attributes.emplace_back(i < list.tags.size() ? list.tags[i] : "", std::move(list.items[i]));
  }

  RValue item() {
    const int32_t flags = int32();
    const int type = flags & 0xFF;
    const bool has_attr = flags & (1 << 9), has_tag = flags & (1 << 10);
    RValue v;
    switch (type) {
      case kNilValue:
      case kEmptyEnv:
      case kBaseEnv:
      case kGlobalEnv:
      case kUnbound:
      case kMissingArg:
      case kBaseNamespace:
        v.type = type == kNilValue ? kNil : kEnv;
        return v;
      case kRef: {
        int32_t index = flags >> 8;
        if (index == 0) index = int32();
        COLOSSAL_CHECK(index >= 1 && index <= static_cast<int32_t>(refs_.size()), "[r_data] ", where_,
                       ": reference ", index, " to an object not read yet");
        return refs_[index - 1];
      }
      case kSym: {
        RValue name = item();  // a CHARSXP
        v.type = kSym;
        v.symbol = name.symbol;
        refs_.push_back(v);
        return v;
      }
      case kNamespace:
      case kPackage:
      case kPersist: {  // a name (a string vector) standing for an environment
        int32();  // 0
        const int64_t n = int32();
        for (int64_t i = 0; i < n; ++i) item();
        v.type = kEnv;
        refs_.push_back(v);
        return v;
      }
      case kEnv: {
        v.type = kEnv;
        refs_.push_back(v);  // before its contents, which may refer to it
        int32();             // locked
        item();              // enclosure
        item();              // frame
        item();              // hash table
        item();              // attributes
        return v;
      }
      case kList:
      case kLang:
      case kClosure:
      case kPromise:
      case kDots:
      case kAttrList:
      case kAttrLang: {
        // A pairlist: each cell has [attributes] [tag] car, then the cdr (read iteratively).
        v.type = type == kAttrList ? kList : type == kAttrLang ? kLang : type;
        int32_t cell_flags = flags;
        while (true) {
          const bool a = cell_flags & (1 << 9), t = cell_flags & (1 << 10);
          if (a) read_attributes(v);
          std::string tag;
          if (t) tag = item().symbol;
          v.items.push_back(item());
          v.tags.push_back(tag);
          // Peek at the cdr: another cell of the same kind continues the list.
          const size_t at = pos_;
          const int32_t next = int32();
          const int next_type = next & 0xFF;
          if (next_type == kList || next_type == kAttrList || next_type == kLang) {
            cell_flags = next;
            continue;
          }
          pos_ = at;
          RValue tail = item();
          if (tail.type != kNil) {  // an improper list ends in a value
            v.items.push_back(std::move(tail));
            v.tags.emplace_back();
          }
          return v;
        }
      }
      case kChar: {
        const int32_t n = int32();
        v.type = kChar;
        if (n >= 0) v.symbol = bytes(n);
        else v.na.push_back(true);  // NA_STRING
        return v;
      }
      case kLgl:
      case kInt: {
        const int64_t n = length();
        check_count(n, 4);
        v.type = type;
        v.ints.resize(n);
        for (auto& x : v.ints) x = int32();
        break;
      }
      case kReal: {
        const int64_t n = length();
        check_count(n, 8);
        v.type = kReal;
        v.reals.resize(n);
        for (auto& x : v.reals) x = real();
        break;
      }
      case kCplx: {
        const int64_t n = length();
        check_count(n, 16);
        v.type = kCplx;
        v.reals.resize(2 * n);
        for (auto& x : v.reals) x = real();
        break;
      }
      case kStr: {
        const int64_t n = length();
        check_count(n, 4);
        v.type = kStr;
        v.strings.resize(n);
        v.na.assign(n, false);
        for (int64_t i = 0; i < n; ++i) {
          RValue s = item();
          COLOSSAL_CHECK(s.type == kChar, "[r_data] ", where_, ": element ", i, " of a character vector has type ",
                         s.type, ", expected 9 (a string)");
          if (!s.na.empty()) v.na[i] = true;
          else v.strings[i] = std::move(s.symbol);
        }
        break;
      }
      case kVec:
      case kExpr: {
        const int64_t n = length();
        check_count(n, 4);
        v.type = kVec;
        v.items.reserve(n);
        for (int64_t i = 0; i < n; ++i) v.items.push_back(item());
        break;
      }
      case kS4:
        v.type = kS4;
        break;
      case kAltrep:
        return altrep();
      default:
        COLOSSAL_FAIL("[r_data] ", where_, ": R object type ", type, " at byte ", pos_ - 4,
                      " is not supported (vectors, lists, factors and data frames are)");
    }
    if (has_attr) read_attributes(v);
    (void)has_tag;
    return v;
  }

  // ALTREP objects are written as (class info, state, attributes); the state of the forms R
  // writes for data gives the plain vector back.
  RValue altrep() {
    RValue info = item();
    RValue state = item();
    RValue attrs = item();
    const std::string cls = info.items.empty() ? "" : info.items[0].symbol;
    RValue v;
    if (cls == "compact_intseq" || cls == "compact_realseq") {
      COLOSSAL_CHECK(state.reals.size() == 3, "[r_data] ", where_, ": ", cls, " state of ", state.reals.size(),
                     " numbers, expected 3");
      const auto n = static_cast<int64_t>(state.reals[0]);
      const double start = state.reals[1], step = state.reals[2];
      if (cls == "compact_intseq") {
        v.type = kInt;
        for (int64_t i = 0; i < n; ++i) v.ints.push_back(static_cast<int32_t>(start + step * static_cast<double>(i)));
      } else {
        v.type = kReal;
        for (int64_t i = 0; i < n; ++i) v.reals.push_back(start + step * static_cast<double>(i));
      }
    } else if (cls.rfind("wrap_", 0) == 0) {
      COLOSSAL_CHECK(!state.items.empty(), "[r_data] ", where_, ": ", cls, " without a wrapped vector");
      v = std::move(state.items[0]);
    } else if (cls == "deferred_string") {
      // state: (the numbers, info); the strings are their decimal forms.
      COLOSSAL_CHECK(!state.items.empty(), "[r_data] ", where_, ": deferred_string without its argument");
      const RValue& arg = state.items[0];
      v.type = kStr;
      if (arg.type == kInt)
        for (int32_t x : arg.ints) v.strings.push_back(x == INT32_MIN ? "" : std::to_string(x));
      else
        for (double x : arg.reals) v.strings.push_back(std::to_string(x));
      v.na.assign(v.strings.size(), false);
    } else {
      COLOSSAL_FAIL("[r_data] ", where_, ": ALTREP class '", cls, "' is not supported");
    }
    for (size_t i = 0; i < attrs.items.size(); ++i)
      v.attributes.emplace_back(i < attrs.tags.size() ? attrs.tags[i] : "", std::move(attrs.items[i]));
    return v;
  }

  const std::string& buf_;
  std::string where_;
  size_t pos_ = 0;
  std::vector<RValue> refs_;
};

// The index: a named list `variables` of (offset, length) pairs into the .rdb.
std::map<std::string, std::pair<int64_t, int64_t>> read_index(const std::string& base) {
  const std::string path = base + ".rdx";
  const std::string raw = read_file(path);
  const RValue index = unserialize_r(inflate_all(raw.data(), raw.size(), /*gzip=*/true, 0, "'" + path + "'"),
                                     "'" + path + "'");
  const RValue* names = nullptr;
  const RValue* variables = nullptr;
  if (const auto* n = index.attribute("names"))
    for (size_t i = 0; i < n->strings.size() && i < index.items.size(); ++i)
      if (n->strings[i] == "variables") variables = &index.items[i];
  COLOSSAL_CHECK(variables && (names = variables->attribute("names")), "[r_data] '", path,
                 "' is not a lazy-load index (no named 'variables')");
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < names->strings.size() && i < variables->items.size(); ++i) {
    const RValue& where = variables->items[i];
    int64_t offset = 0, length = 0;
    if (where.ints.size() == 2) offset = where.ints[0], length = where.ints[1];
    else if (where.reals.size() == 2) offset = static_cast<int64_t>(where.reals[0]), length = static_cast<int64_t>(where.reals[1]);
    else COLOSSAL_FAIL("[r_data] '", path, "': entry '", names->strings[i], "' has no (offset, length)");
    out[names->strings[i]] = {offset, length};
  }
  return out;
}

}  // namespace

const RValue* RValue::attribute(const std::string& name) const {
  for (const auto& [key, value] : attributes)
    if (key == name) return &value;
  return nullptr;
}

std::vector<std::string> RValue::classes() const {
  const RValue* c = attribute("class");
  return c ? c->strings : std::vector<std::string>{};
}

int64_t RValue::length() const {
  switch (type) {
    case kLgl:
    case kInt: return static_cast<int64_t>(ints.size());
    case kReal: return static_cast<int64_t>(reals.size());
    case kStr: return static_cast<int64_t>(strings.size());
    default: return static_cast<int64_t>(items.size());
  }
}

RValue unserialize_r(const std::string& bytes, const std::string& where) { return Unserializer(bytes, where).run(); }

std::vector<std::string> r_lazyload_names(const std::string& base) {
  std::vector<std::string> names;
  for (const auto& [name, _] : read_index(base)) names.push_back(name);
  return names;
}

RValue read_r_object(const std::string& base, const std::string& name) {
  const auto index = read_index(base);
  auto it = index.find(name);
  if (it == index.end()) {
    std::string known;
    for (const auto& [n, _] : index) known += (known.empty() ? "" : ", ") + n;
    COLOSSAL_FAIL("[r_data] '", base, ".rdx' has no object '", name, "' (it has: ", known, ")");
  }
  const std::string path = base + ".rdb";
  std::ifstream in(path, std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[r_data] cannot read '", path, "'");
  const auto [offset, length] = it->second;
  std::string record(length, '\0');
  in.seekg(offset);
  in.read(record.data(), length);
  const std::string where = "'" + path + "' object '" + name + "'";
  COLOSSAL_CHECK(in.gcount() == length && length >= 4, "[r_data] ", where, ": truncated (", in.gcount(), " of ",
                 length, " bytes at offset ", offset, ")");
  const auto* p = reinterpret_cast<const unsigned char*>(record.data());
  const size_t expected = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  return unserialize_r(inflate_all(record.data() + 4, record.size() - 4, /*gzip=*/false, expected, where), where);
}

RDataFrame::RDataFrame(RValue frame, std::string name) : frame_(std::move(frame)), name_(std::move(name)) {
  const auto classes = frame_.classes();
  COLOSSAL_CHECK(frame_.type == kVec && std::find(classes.begin(), classes.end(), "data.frame") != classes.end(),
                 "[r_data] '", name_, "' is not a data.frame");
  const RValue* names = frame_.attribute("names");
  COLOSSAL_CHECK(names && names->strings.size() == frame_.items.size(), "[r_data] '", name_,
                 "': a data.frame without a name per column");
  names_ = names->strings;
  rows_ = frame_.items.empty() ? 0 : frame_.items[0].length();
  for (size_t i = 0; i < frame_.items.size(); ++i)
    COLOSSAL_CHECK(frame_.items[i].length() == rows_, "[r_data] '", name_, "': column '", names_[i], "' has ",
                   frame_.items[i].length(), " rows, the first has ", rows_);
}

bool RDataFrame::has(const std::string& column) const {
  return std::find(names_.begin(), names_.end(), column) != names_.end();
}

const RValue& RDataFrame::column(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return frame_.items[i];
  std::string known;
  for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
  COLOSSAL_FAIL("[r_data] '", name_, "' has no column '", name, "' (it has: ", known, ")");
}

const std::vector<int32_t>& RDataFrame::ints(const std::string& name) const {
  const RValue& c = column(name);
  COLOSSAL_CHECK(c.type == kInt || c.type == kLgl, "[r_data] '", name_, "' column '", name, "' has R type ", c.type,
                 ", expected integer or factor");
  return c.ints;
}

std::vector<double> RDataFrame::reals(const std::string& name) const {
  const RValue& c = column(name);
  if (c.type == kReal) return c.reals;
  COLOSSAL_CHECK(c.type == kInt || c.type == kLgl, "[r_data] '", name_, "' column '", name, "' has R type ", c.type,
                 ", expected a number");
  std::vector<double> out(c.ints.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = c.ints[i] == INT32_MIN ? std::numeric_limits<double>::quiet_NaN() : c.ints[i];
  return out;
}

std::vector<std::string> RDataFrame::strings(const std::string& name) const {
  const RValue& c = column(name);
  if (c.type == kStr) return c.strings;
  const RValue* levels = c.attribute("levels");
  COLOSSAL_CHECK(c.type == kInt && levels, "[r_data] '", name_, "' column '", name, "' has R type ", c.type,
                 ", expected character or factor");
  std::vector<std::string> out(c.ints.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int32_t code = c.ints[i];
    if (code == INT32_MIN) continue;  // NA
    COLOSSAL_CHECK(code >= 1 && code <= static_cast<int32_t>(levels->strings.size()), "[r_data] '", name_,
                   "' column '", name, "' row ", i + 1, ": factor code ", code, " outside its ",
                   levels->strings.size(), " levels");
    out[i] = levels->strings[code - 1];
  }
  return out;
}

}  // namespace colossal::data
