#include "core/dist/comm_profile.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>

#include "core/common/check.h"
#include "core/common/env.h"
#include "core/common/fs.h"
#include "core/common/log.h"

namespace colossal::dist::comm_profile {
namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

constexpr size_t kMaxHistory = 10000;

struct Profile {
  std::mutex mu;
  Table open;                 // the step in progress
  std::deque<Step> history;   // finished steps, oldest first
  int64_t finished = 0;       // steps ended so far (history may have dropped the oldest)
  std::string jsonl_path;     // empty: no per-step file
};

Profile& profile() {
  static Profile* p = new Profile();  // never destroyed: collectives may run during static teardown
  return *p;
}

nlohmann::json to_json(const Step& s) {
  nlohmann::json calls = nlohmann::json::array();
  for (const auto& [key, t] : s.table) {
    calls.push_back({{"group", key.first}, {"op", key.second}, {"calls", t.calls}, {"bytes", t.bytes},
                     {"seconds", t.seconds}, {"exposed_seconds", t.exposed_seconds}});
  }
  return {{"step", s.step}, {"collectives", calls}};
}

void add(Totals& into, const Totals& t) {
  into.calls += t.calls;
  into.bytes += t.bytes;
  into.seconds += t.seconds;
  into.exposed_seconds += t.exposed_seconds;
}

}  // namespace

void configure_from_environment(int rank) {
  auto value = env_string("COLOSSAL_COMM_PROFILE");
  if (!value || value->empty() || *value == "0") return;
  Profile& p = profile();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (*value != "1") {
      fs::make_dirs(*value);
      p.jsonl_path = *value + "/comm_rank" + std::to_string(rank) + ".jsonl";
      std::ofstream truncate(p.jsonl_path, std::ios::trunc);
      COLOSSAL_CHECK(truncate.good(), "[dist] COLOSSAL_COMM_PROFILE: cannot write ", p.jsonl_path);
    }
  }
  detail::g_enabled = true;
}

void set_enabled(bool on) { detail::g_enabled = on; }

void record(const std::string& group, const char* op, int64_t bytes, double seconds, double exposed_seconds) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  Totals& t = p.open[{group, op}];
  t.calls += 1;
  t.bytes += bytes;
  t.seconds += seconds;
  t.exposed_seconds += std::min(exposed_seconds, seconds);
}

void end_step() {
  if (!enabled()) return;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  Step s;
  s.step = ++p.finished;
  s.table = std::move(p.open);
  p.open.clear();
  if (!p.jsonl_path.empty()) {
    std::ofstream out(p.jsonl_path, std::ios::app);
    out << to_json(s).dump() << "\n";
  }
  p.history.push_back(std::move(s));
  if (p.history.size() > kMaxHistory) p.history.pop_front();
}

std::vector<Step> steps() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  return {p.history.begin(), p.history.end()};
}

Table current() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.open;
}

std::pair<Table, int64_t> totals() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  Table sum;
  for (const auto& s : p.history)
    for (const auto& [key, t] : s.table) add(sum[key], t);
  return {sum, static_cast<int64_t>(p.history.size())};
}

std::string format_summary() {
  auto [table, n] = totals();
  if (n == 0) {
    table = current();
    n = 1;
  }
  if (table.empty()) return "";
  std::string out = c10::str("communication per step (mean of ", n, n == 1 ? " step" : " steps", "):\n");
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %-16s %11s %11s %10s %7s\n", "group", "op", "calls/step", "MiB/step",
                "ms/step", "hidden");
  out += line;
  for (const auto& [key, t] : table) {
    std::snprintf(line, sizeof line, "  %-28s %-16s %11.2f %11.3f %10.2f %6.0f%%\n", key.first.c_str(),
                  key.second.c_str(), static_cast<double>(t.calls) / n, t.bytes / 1048576.0 / n,
                  t.seconds * 1e3 / n, 100.0 * t.hidden_fraction());
    out += line;
  }
  return out;
}

void finish() {
  if (!enabled()) return;
  auto text = format_summary();
  if (!text.empty()) COLOSSAL_LOG_INFO(text);
  reset();
}

void reset() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.open.clear();
  p.history.clear();
  p.finished = 0;
}

}  // namespace colossal::dist::comm_profile
