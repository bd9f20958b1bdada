#pragma once
// Leveled, rank-filtered logging with a fixed prefix:
//   [colossal][rank 3][WARN] message
//
// COLOSSAL_LOG_LEVEL = debug | info | warn | error     (default info)
// COLOSSAL_LOG_RANKS = 0 (default) | all | a comma list such as 0,3
//
// Messages go to standard error so a program's standard output stays clean for its results.
#include <c10/util/StringUtil.h>

#include <string>

namespace colossal {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

/// Whether a message at `level` from this rank would be printed (cheap; cache-free).
bool log_enabled(LogLevel level, bool all_ranks = false);
/// Prints one message if enabled. `all_ranks` bypasses the rank filter (desync debugging).
void log_message(LogLevel level, const std::string& message, bool all_ranks = false);
/// Parses a level name; throws with the accepted names on anything else.
LogLevel parse_log_level(const std::string& name);

}  // namespace colossal

#define COLOSSAL_LOG_AT_(level, all, ...)                                        \
  do {                                                                           \
    if (::colossal::log_enabled(level, all))                                     \
      ::colossal::log_message(level, ::c10::str(__VA_ARGS__), all);              \
  } while (0)

#define COLOSSAL_LOG_DEBUG(...) COLOSSAL_LOG_AT_(::colossal::LogLevel::kDebug, false, __VA_ARGS__)
#define COLOSSAL_LOG_INFO(...) COLOSSAL_LOG_AT_(::colossal::LogLevel::kInfo, false, __VA_ARGS__)
#define COLOSSAL_LOG_WARN(...) COLOSSAL_LOG_AT_(::colossal::LogLevel::kWarn, false, __VA_ARGS__)
#define COLOSSAL_LOG_ERROR(...) COLOSSAL_LOG_AT_(::colossal::LogLevel::kError, true, __VA_ARGS__)
#define COLOSSAL_LOG_INFO_ALL_RANKS(...) \
  COLOSSAL_LOG_AT_(::colossal::LogLevel::kInfo, true, __VA_ARGS__)
#define COLOSSAL_LOG_WARN_ALL_RANKS(...) \
  COLOSSAL_LOG_AT_(::colossal::LogLevel::kWarn, true, __VA_ARGS__)
