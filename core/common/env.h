#pragma once
// Reading environment variables with errors that name the variable and what was expected.
#include <cstdint>
#include <optional>
#include <string>

namespace colossal {

/// The variable's value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);
/// Integer value; throws "environment variable X: expected an integer, got 'abc'".
std::optional<int64_t> env_int(const char* name);
/// Floating-point value; throws "environment variable X: expected a number, got 'abc'".
std::optional<double> env_double(const char* name);
/// 1/true/yes/on and 0/false/no/off (any case); anything else throws.
std::optional<bool> env_flag(const char* name);

/// Where scripts/setup.sh keeps what it fetches (LibTorch, the built-in datasets):
/// $COLOSSAL_CACHE, else ~/.cache/colossal-cpp.
std::string cache_root();

}  // namespace colossal
