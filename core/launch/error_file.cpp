#include "core/launch/error_file.h"

#include <nlohmann/json.hpp>

#include <ctime>
#include <fstream>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/env.h"
#include "core/common/process_info.h"

namespace colossal::launch {

void write_error_file(const std::string& path, const ErrorRecord& record) {
  nlohmann::json doc = {{"message",
                         {{"message", record.message},
                          {"extraInfo",
                           {{"py_callstack", record.details}, {"timestamp", std::to_string(record.timestamp)}}}}}};
  checkpoint::write_text_atomically(path, doc.dump());
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  auto doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("message")) return std::nullopt;
  ErrorRecord r;
  const auto& m = doc["message"];
  auto as_int = [](const nlohmann::json& v) -> int64_t {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_string()) return std::strtoll(v.get<std::string>().c_str(), nullptr, 10);
    return 0;
  };
  if (m.is_string()) {  // the older shape
    r.message = m.get<std::string>();
    if (doc.contains("timestamp")) r.timestamp = as_int(doc["timestamp"]);
    return r;
  }
  if (!m.is_object()) return std::nullopt;
  if (m.contains("message") && m["message"].is_string()) r.message = m["message"].get<std::string>();
  if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
    const auto& extra = m["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string())
      r.details = extra["py_callstack"].get<std::string>();
    if (extra.contains("timestamp")) r.timestamp = as_int(extra["timestamp"]);
  }
  return r;
}

void record_fatal_error(const std::string& program, const std::string& message) {
  try {
    auto path = env_string("TORCHELASTIC_ERROR_FILE");
    if (!path || path->empty()) return;
    const std::string rank = process_rank_string();
    ErrorRecord r;
    r.message = program + ": " + message;
    r.details = c10::str(program, " (rank ", rank, ") failed: ", message, "\n");
    r.timestamp = static_cast<int64_t>(std::time(nullptr));
    write_error_file(*path, r);
  } catch (...) {
    // Failing to report must not hide the failure being reported.
  }
}

}  // namespace colossal::launch
