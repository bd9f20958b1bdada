#pragma once
// The values a Jinja template computes with, with Python's semantics (what jinja2 runs on):
// truthiness, equality, str() and repr(), and json.dumps as transformers' tojson calls it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace colossal::text::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  const Value* keyword(const std::string& name) const;
};
using Function = std::function<Value(Args&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace (a namespace is a dict its template may change)
  std::shared_ptr<Function> fn;

  static Value none() { Value v; v.kind = Kind::kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value of_list(List x) { Value v; v.kind = Kind::kList; v.list = std::make_shared<List>(std::move(x)); return v; }
  static Value of_dict(Dict x, Kind k = Kind::kDict) { Value v; v.kind = k; v.dict = std::make_shared<Dict>(std::move(x)); return v; }
  static Value function(Function f) { Value v; v.kind = Kind::kFunction; v.fn = std::make_shared<Function>(std::move(f)); return v; }
  static Value from_json(const nlohmann::ordered_json& j);

  bool defined() const { return kind != Kind::kUndefined; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  double as_double() const { return kind == Kind::kFloat ? f : kind == Kind::kBool ? b : static_cast<double>(i); }
  bool truthy() const;
  /// Python's str(): what {{ value }} prints.
  std::string str() const;
  /// Python's repr().
  std::string repr() const;
  /// json.dumps(value, ensure_ascii, indent (< 0: none), sort_keys), Python's separators.
  std::string dumps(bool ensure_ascii, int indent, bool sort_keys, int depth = 0) const;
  const Value* member(const std::string& key) const;  // a dict's or namespace's entry
  std::string type_name() const;
};

bool equal(const Value& a, const Value& b);
/// a < b for numbers and strings (and lists element-wise); anything else throws.
bool less(const Value& a, const Value& b);

}  // namespace colossal::text::jinja
