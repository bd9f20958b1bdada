#include "core/dist/collective_check.h"

#include <chrono>
#include <thread>
#include <vector>

#include "core/common/check.h"
#include "core/common/env.h"
#include "core/dist/collectives.h"
#include "core/dist/monitor.h"
#include "core/dist/runtime.h"
#include "core/dist/runtime_internal.h"

namespace colossal::dist {

namespace {
thread_local std::string t_label;
}  // namespace

CollectiveLabel::CollectiveLabel(std::string label) : previous_(std::move(t_label)) { t_label = std::move(label); }
CollectiveLabel::~CollectiveLabel() { t_label = std::move(previous_); }

namespace detail {

bool collective_checks_enabled() {
  static const bool enabled = env_int("COLOSSAL_CHECK_COLLECTIVES").value_or(0) != 0;
  return enabled;
}

const std::string& current_collective_label() { return t_label; }

void agree_on_collective(const Group& handle, uint64_t seq, const std::string& call) {
  GroupState& group = handle.state();
  const int n = static_cast<int>(group.ranks.size());
  if (n <= 1) return;
  auto store = dist::store();
  const std::string base = "check/" + group.store_key + "/" + std::to_string(seq % 2) + "/";
  // "<seq>|<call>", so a reader can tell this collective's entry from the one two before.
  const std::string mine = std::to_string(seq) + "|" + call;
  store->set(base + std::to_string(group.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(base + std::to_string(r));
  const auto start = std::chrono::steady_clock::now();
  Monitor* mon = detail::monitor();
  const auto slice = mon ? mon->options().interval : std::chrono::milliseconds(1000);
  auto next_check = start + slice;
  auto pause = std::chrono::microseconds(50);
  const std::string prefix = std::to_string(seq) + "|";
  for (;;) {
    std::vector<std::string> calls(n);
    int arrived = 0;
    // Every member published an entry at its first checked collective; until then a key may
    // not exist, and check() avoids get()'s blocking wait on it.
    if (store->check(keys)) {
      auto values = store->multiGet(keys);
      for (int r = 0; r < n; ++r) {
        std::string v(values[r].begin(), values[r].end());
        if (v.rfind(prefix, 0) == 0) {
          calls[r] = v.substr(prefix.size());
          ++arrived;
        }
      }
    }
    if (arrived == n) {
      bool same = true;
      for (int r = 1; r < n; ++r) same &= calls[r] == calls[0];
      if (same) return;
      std::string each;
      for (int r = 0; r < n; ++r) each += c10::str("; rank ", group.ranks[r], ": ", calls[r]);
      const std::string msg = c10::str("[dist] collective #", seq, " on ", handle.describe(),
                                       ": the members called different collectives (COLOSSAL_CHECK_COLLECTIVES)",
                                       each);
      group.broken.store(true);
      if (mon) mon->mark_failed(msg);
      COLOSSAL_FAIL(msg);
    }
    const auto now = std::chrono::steady_clock::now();
    std::optional<std::string> lost;
    if (mon && now >= next_check) {
      lost = mon->find_lost_member(group);
      next_check = now + slice;
    }
    if (lost || now - start > group.timeout) {
      std::string who = mon ? mon->diagnose(group, seq) : "";
      const std::string msg = c10::str("[dist] collective #", seq, " (", call, ") on ", handle.describe(),
                                       ": not every member reached it (COLOSSAL_CHECK_COLLECTIVES): ", who);
      group.broken.store(true);
      if (mon) mon->mark_failed(msg);
      COLOSSAL_FAIL(msg);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

}  // namespace detail
}  // namespace colossal::dist
