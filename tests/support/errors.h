#pragma once
// The message of the exception `fn` throws, for checking that errors explain themselves.
#include <functional>
#include <string>

#include "core/common/check.h"

namespace colossal::testing {

inline std::string error_message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return error_text(e);
  }
  return "<no exception>";
}

}  // namespace colossal::testing
