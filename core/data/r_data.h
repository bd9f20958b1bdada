#pragma once
// R's data files, read without R: the lazy-load databases that R packages install their datasets
// in (data/Rdata.rdx: a gzip-compressed index of names; data/Rdata.rdb: one zlib-compressed,
// XDR-serialized object per record), and the objects in them as a tree of RValue. Debian ships
// real datasets this way (janeaustenr's novels, dslabs' MovieLens ratings), so the project reads
// them straight from the packages that setup unpacks.
//
//   auto movielens = colossal::data::read_r_object(dir + "/Rdata", "movielens");
//   RDataFrame frame(movielens, "movielens");
//   auto users = frame.ints("userId");
//
// Supported: NULL, symbols, pairlists, logical/integer/double/character vectors, lists,
// attributes (names, class, factor levels, row names), environments as placeholders, and the
// ALTREP forms R writes for compact sequences and wrapped or deferred vectors. Anything else is
// an error naming the type and the object.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colossal::data {

/// One R object. Vectors fill the member of their type; NA integers are INT32_MIN (R's NA_integer_),
/// NA strings are empty with `na` set at their index.
struct RValue {
  int type = 0;  // R's SEXPTYPE: 0 NULL, 1 symbol, 2 pairlist, 4 environment, 10 logical,
                 // 13 integer, 14 double, 16 character, 19 list
  std::string symbol;                 // a symbol's name
  std::vector<int32_t> ints;          // logical, integer
  std::vector<double> reals;          // double
  std::vector<std::string> strings;   // character
  std::vector<bool> na;               // character: which elements are NA
  std::vector<RValue> items;          // list and pairlist elements
  std::vector<std::string> tags;      // pairlist: each element's tag ("" when none)
  std::vector<std::pair<std::string, RValue>> attributes;

  /// The attribute `name`, or null.
  const RValue* attribute(const std::string& name) const;
  /// The class attribute's strings (empty without one).
  std::vector<std::string> classes() const;
  int64_t length() const;
};

/// Parses one XDR serialization ("X\n" header; R's format versions 2 and 3). `where` names the
/// source in errors.
RValue unserialize_r(const std::string& bytes, const std::string& where);

/// The names in a lazy-load database's index (`base` + ".rdx").
std::vector<std::string> r_lazyload_names(const std::string& base);

/// The object `name` from a lazy-load database (`base` + ".rdx" and ".rdb", e.g.
/// ".../data/Rdata"). Errors name the file and the object; a missing name lists those present.
RValue read_r_object(const std::string& base, const std::string& name);

/// A data.frame's columns by name.
class RDataFrame {
 public:
  RDataFrame(RValue frame, std::string name);
  int64_t rows() const { return rows_; }
  const std::vector<std::string>& column_names() const { return names_; }
  bool has(const std::string& column) const;
  /// Integer columns (factors give their codes, 1-based as in R; NA is INT32_MIN).
  const std::vector<int32_t>& ints(const std::string& column) const;
  /// Numeric columns (integer ones converted; NA is NaN).
  std::vector<double> reals(const std::string& column) const;
  /// Character columns, or factors as their levels' strings.
  std::vector<std::string> strings(const std::string& column) const;

 private:
  const RValue& column(const std::string& name) const;
  RValue frame_;
  std::string name_;
  std::vector<std::string> names_;
  int64_t rows_ = 0;
};

}  // namespace colossal::data
