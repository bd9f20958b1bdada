#include "text/json_field.h"

#include "core/common/check.h"

namespace colossal::text {

namespace {
std::string kind(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_string()) return "the string \"" + v.get<std::string>().substr(0, 40) + "\"";
  if (v.is_boolean()) return std::string("the boolean ") + (v.get<bool>() ? "true" : "false");
  if (v.is_number()) return "the number " + v.dump();
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  return "an object";
}
}  // namespace

void JsonField::fail(const std::string& expected) const {
  COLOSSAL_FAIL("[text] ", where(), ": expected ", expected, ", found ", kind(*value_));
}

JsonField JsonField::operator[](const std::string& key) const {
  if (!value_->is_object()) fail("an object with \"" + key + "\"");
  auto it = value_->find(key);
  COLOSSAL_CHECK(it != value_->end(), "[text] ", where(), ": the member \"", key, "\" is missing");
  return JsonField(*it, file_, path_ + "." + key);
}

JsonField JsonField::operator[](size_t i) const {
  if (!value_->is_array() || i >= value_->size()) fail("an array with an element " + std::to_string(i));
  return JsonField((*value_)[i], file_, path_ + "[" + std::to_string(i) + "]");
}

size_t JsonField::size() const {
  if (!value_->is_array() && !value_->is_object()) fail("an array or an object");
  return value_->size();
}

std::string JsonField::str() const {
  if (!value_->is_string()) fail("a string");
  return value_->get<std::string>();
}
int64_t JsonField::integer() const {
  if (!value_->is_number_integer()) fail("an integer");
  return value_->get<int64_t>();
}
double JsonField::number() const {
  if (!value_->is_number()) fail("a number");
  return value_->get<double>();
}
bool JsonField::boolean() const {
  if (!value_->is_boolean()) fail("true or false");
  return value_->get<bool>();
}

std::string JsonField::str(const std::string& key, const std::string& fallback) const {
  return has(key) ? (*this)[key].str() : fallback;
}
int64_t JsonField::integer(const std::string& key, int64_t fallback) const {
  return has(key) ? (*this)[key].integer() : fallback;
}
double JsonField::number(const std::string& key, double fallback) const {
  return has(key) ? (*this)[key].number() : fallback;
}
bool JsonField::boolean(const std::string& key, bool fallback) const {
  return has(key) ? (*this)[key].boolean() : fallback;
}

std::string JsonField::type(const std::string& what, std::initializer_list<const char*> known) const {
  const std::string t = (*this)["type"].str();
  std::string list;
  for (const char* k : known) {
    if (t == k) return t;
    list += std::string(list.empty() ? "" : ", ") + k;
  }
  COLOSSAL_FAIL("[text] ", where(), ".type: ", what, " \"", t, "\" is not supported (supported: ", list, ")");
}

}  // namespace colossal::text
