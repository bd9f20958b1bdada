#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/common/check.h"
#include "text/unicode.h"

namespace colossal::text::jinja {

const Value* Args::keyword(const std::string& name) const {
  for (const auto& [k, v] : keywords)
    if (k == name) return &v;
  return nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return of_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), from_json(it.value()));
      return of_dict(std::move(d));
    }
    default: return Value();
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0;
    case Kind::kString: return !s.empty();
    case Kind::kList: return !list->empty();
    case Kind::kDict: case Kind::kNamespace: return !dict->empty();
    case Kind::kFunction: return true;
  }
  return false;
}

namespace {

// Python's repr of a float: the shortest string that reads back, with ".0" on integral values.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  // Python writes 1e+16 as 1e+16 and to_chars as 1e+16: the same; small exponents differ in
  // padding (Python: 1e-05, to_chars: 1e-05) — equal too.
  return s;
}

std::string py_quote(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + q;
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          char buf[16];
          if (c > 0xFFFF) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          out.append(s, i, static_cast<size_t>(n));
        }
    }
    i += n;
  }
  return out + "\"";
}

}  // namespace

std::string Value::str() const {
  switch (kind) {
    case Kind::kUndefined: return "";
    case Kind::kString: return s;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b ? "True" : "False";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return float_repr(f);
    case Kind::kString: return py_quote(s);
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].repr();
      return out + "]";
    }
    case Kind::kDict: case Kind::kNamespace: {
      std::string out = kind == Kind::kNamespace ? "<Namespace {" : "{";
      for (size_t k = 0; k < dict->size(); ++k) out += (k ? ", " : "") + py_quote((*dict)[k].first) + ": " + (*dict)[k].second.repr();
      return out + (kind == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kFunction: return "<function>";
  }
  return "";
}

std::string Value::dumps(bool ensure_ascii, int indent, bool sort_keys, int depth) const {
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close_nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const std::string item_sep = indent >= 0 ? "," : ", ";
  switch (kind) {
    case Kind::kUndefined: case Kind::kNone: return "null";
    case Kind::kBool: return b ? "true" : "false";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : float_repr(f);
    case Kind::kString: return json_string(s, ensure_ascii);
    case Kind::kList: {
      if (list->empty()) return "[]";
      std::string out = "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? item_sep : "") + nl + (*list)[k].dumps(ensure_ascii, indent, sort_keys, depth + 1);
      return out + close_nl + "]";
    }
    case Kind::kDict: case Kind::kNamespace: {
      if (dict->empty()) return "{}";
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& e : *dict) items.push_back(&e);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      std::string out = "{";
      for (size_t k = 0; k < items.size(); ++k)
        out += (k ? item_sep : "") + nl + json_string(items[k]->first, ensure_ascii) + ": " +
               items[k]->second.dumps(ensure_ascii, indent, sort_keys, depth + 1);
      return out + close_nl + "}";
    }
    case Kind::kFunction: COLOSSAL_FAIL("[chat template] tojson: a function is not JSON");
  }
  return "null";
}

const Value* Value::member(const std::string& key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if ((a.is_number() || a.kind == K::kBool) && (b.is_number() || b.kind == K::kBool)) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return (a.kind == K::kNone || a.kind == K::kUndefined) && (b.kind == K::kNone || b.kind == K::kUndefined);
  switch (a.kind) {
    case K::kString: return a.s == b.s;
    case K::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case K::kDict: case K::kNamespace:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* o = b.member(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    case K::kFunction: return a.fn == b.fn;
    default: return true;
  }
}

bool less(const Value& a, const Value& b) {
  if ((a.is_number() || a.kind == Value::Kind::kBool) && (b.is_number() || b.kind == Value::Kind::kBool)) return a.as_double() < b.as_double();
  if (a.kind == Value::Kind::kString && b.kind == Value::Kind::kString) return a.s < b.s;
  if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (less((*a.list)[k], (*b.list)[k])) return true;
      if (less((*b.list)[k], (*a.list)[k])) return false;
    }
    return a.list->size() < b.list->size();
  }
  COLOSSAL_FAIL("[chat template] cannot compare ", a.type_name(), " with ", b.type_name());
}

}  // namespace colossal::text::jinja
