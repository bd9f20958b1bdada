#include "text/vocab.h"

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

Vocab Vocab::from_map(const JsonField& j) {
  if (!j.value().is_object()) j.fail("an object {\"token\": id, ...}");
  Vocab v;
  v.ids_.reserve(j.value().size());
  for (auto it = j.value().begin(); it != j.value().end(); ++it) {
    if (!it.value().is_number_integer()) JsonField(it.value(), j.file(), j.path() + "." + it.key()).fail("an integer id");
    v.add(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
  }
  return v;
}

}  // namespace colossal::text
