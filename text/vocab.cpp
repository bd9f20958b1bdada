#include "text/vocab.h"

#include <cstdio>

#include "core/common/check.h"

namespace colossal::text {

void Vocab::add(const std::string& token, int32_t id) {
  COLOSSAL_CHECK(id >= 0, "[text] token \"", token, "\" has the negative id ", id);
  ids_[token] = id;
  if (static_cast<size_t>(id) >= tokens_.size()) {
    tokens_.resize(static_cast<size_t>(id) + 1);
    present_.resize(static_cast<size_t>(id) + 1, false);
  }
  tokens_[static_cast<size_t>(id)] = token;
  present_[static_cast<size_t>(id)] = true;
}

void Vocab::index_byte_tokens() {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[static_cast<size_t>(b)] = id(name).value_or(-1);
  }
}

bool Vocab::append_byte_tokens(const std::string& s, std::vector<int32_t>& out) const {
  for (unsigned char b : s)
    if (byte_ids_[b] < 0) return false;
  for (unsigned char b : s) out.push_back(byte_ids_[b]);
  return true;
}

Vocab Vocab::from_map(const JsonField& j) {
  if (!j.value().is_object()) j.fail("an object {\"token\": id, ...}");
  Vocab v;
  v.ids_.reserve(j.value().size());
  for (auto it = j.value().begin(); it != j.value().end(); ++it) {
    if (!it.value().is_number_integer()) JsonField(it.value(), j.file(), j.path() + "." + it.key()).fail("an integer id");
    v.add(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
  }
  v.index_byte_tokens();
  return v;
}

}  // namespace colossal::text
