#pragma once
// The message of the exception `fn` throws, for checking that errors explain themselves.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
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

/// Expects `fn` to throw an error whose message contains every one of `parts`.
inline void expect_error_mentions(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  const auto message = error_message_of(fn);
  for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

}  // namespace colossal::testing
