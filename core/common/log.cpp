#include "core/common/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>

#include "core/common/check.h"
#include "core/common/process_info.h"

namespace colossal {
namespace {

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

LogLevel threshold() {
  const char* v = std::getenv("COLOSSAL_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return LogLevel::kInfo;
  return parse_log_level(v);
}

// True when COLOSSAL_LOG_RANKS names this rank ("all", or a comma list; default "0").
bool rank_selected(int rank) {
  const char* v = std::getenv("COLOSSAL_LOG_RANKS");
  std::string spec = (v == nullptr || *v == '\0') ? "0" : v;
  if (spec == "all") return true;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty() && std::to_string(rank) == item) return true;
  }
  return false;
}

}  // namespace

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  COLOSSAL_FAIL("[log] COLOSSAL_LOG_LEVEL: expected one of debug, info, warn, error; got '", name,
                "'");
}

bool log_enabled(LogLevel level, bool all_ranks) {
  if (static_cast<int>(level) < static_cast<int>(threshold())) return false;
  return all_ranks || rank_selected(process_rank());
}

void log_message(LogLevel level, const std::string& message, bool all_ranks) {
  if (!log_enabled(level, all_ranks)) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[colossal][rank %d][%s] %s\n", process_rank(), level_name(level),
               message.c_str());
  std::fflush(stderr);
}

}  // namespace colossal
