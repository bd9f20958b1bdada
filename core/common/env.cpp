#include "core/common/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/common/check.h"

namespace colossal {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> env_int(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s->c_str(), &end, 10);
  COLOSSAL_CHECK(end != s->c_str() && *end == '\0' && errno == 0, "environment variable ", name,
                 ": expected an integer, got '", *s, "'");
  return static_cast<int64_t>(v);
}

std::optional<double> env_double(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s->c_str(), &end);
  COLOSSAL_CHECK(end != s->c_str() && *end == '\0' && errno == 0, "environment variable ", name,
                 ": expected a number, got '", *s, "'");
  return v;
}

std::optional<bool> env_flag(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  std::string v = *s;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  COLOSSAL_FAIL("environment variable ", name, ": expected a flag (1/0, true/false), got '", *s,
                "'");
}

std::string cache_root() {
  if (auto c = env_string("COLOSSAL_CACHE")) return *c;
  auto home = env_string("HOME");
  return (home ? *home : std::string("/root")) + "/.cache/colossal-cpp";
}

}  // namespace colossal
