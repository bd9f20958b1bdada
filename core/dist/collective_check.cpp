#include "core/dist/collective_check.h"

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
  const std::string prefix = std::to_string(seq) + "|", mine = prefix + call;
  store->set(base + std::to_string(group.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(base + std::to_string(r));
  Monitor* mon = detail::monitor();
  std::vector<std::string> calls(n);
  const auto wait = wait_for_group(mon, group, [&] {
    // Every member published an entry at its first checked collective; until then a key may
    // not exist, and check() avoids get()'s blocking wait on it.
    if (!store->check(keys)) return false;
    auto values = store->multiGet(keys);
    int arrived = 0;
    for (int r = 0; r < n; ++r) {
      std::string v(values[r].begin(), values[r].end());
      if (v.rfind(prefix, 0) == 0) {
        calls[r] = v.substr(prefix.size());
        ++arrived;
      }
    }
    return arrived == n;
  });
  std::string msg;
  if (!wait.ready) {
    msg = c10::str("[dist] collective #", seq, " (", call, ") on ", handle.describe(),
                   ": not every member reached it (COLOSSAL_CHECK_COLLECTIVES): ", mon ? mon->diagnose(group, seq) : "");
  } else {
    bool same = true;
    for (int r = 1; r < n; ++r) same &= calls[r] == calls[0];
    if (same) return;
    std::string each;
    for (int r = 0; r < n; ++r) each += c10::str("; rank ", group.ranks[r], ": ", calls[r]);
    msg = c10::str("[dist] collective #", seq, " on ", handle.describe(),
                   ": the members called different collectives (COLOSSAL_CHECK_COLLECTIVES)", each);
  }
  group.broken.store(true);
  if (mon) mon->mark_failed(msg);
  COLOSSAL_FAIL(msg);
}

}  // namespace detail
}  // namespace colossal::dist
