// The heartbeat monitor in one process: two monitors over one in-memory store, one of them
// reading through a store that can be made to answer late.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/dist/group.h"
#include "core/dist/monitor.h"
#include "core/dist/shm_transport.h"

namespace colossal::dist {
namespace {

using namespace std::chrono_literals;

// Answers the monitor's multiGet late, once, when armed: a loaded store host, or an observer
// starved of CPU, looks the same from the monitor's side.
class LateStore : public c10d::PrefixStore {
 public:
  explicit LateStore(c10::intrusive_ptr<c10d::Store> s) : c10d::PrefixStore("job", std::move(s)) {}
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override {
    auto out = c10d::PrefixStore::multiGet(keys);  // the values as they were when asked
    if (delay_ms.exchange(0) > 0) {
      std::this_thread::sleep_for(600ms);
      answered_late = true;
    }
    return out;
  }
  std::atomic<int> delay_ms{0};
  std::atomic<bool> answered_late{false};
};

Monitor::Options fast() {
  Monitor::Options o;
  o.interval = 20ms;
  o.dead_after = 300ms;
  return o;
}

std::unique_ptr<detail::GroupState> pair_group() {
  auto g = std::make_unique<detail::GroupState>();
  g->name = "pair";
  g->store_key = "group/pair";
  g->ranks = {0, 1};
  g->rank = 0;
  return g;
}

TEST(Monitor, ALateStoreAnswerDoesNotCondemnALivePeer) {
  auto shared = c10::make_intrusive<c10d::HashStore>();
  auto late = c10::make_intrusive<LateStore>(shared);
  Monitor observer(late, 0, 2, fast());
  Monitor peer(c10::make_intrusive<c10d::PrefixStore>("job", shared), 1, 2, fast());
  auto group = pair_group();
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(observer.find_lost_member(*group), std::nullopt);
  late->delay_ms = 1;  // the next poll reads beats and returns them 600 ms later (> dead_after)
  for (int i = 0; i < 2000 && !late->answered_late; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(late->answered_late) << "the observer never polled the store";
  // Right after the late answer, and for a while after, the peer (beating all along) is alive.
  for (int i = 0; i < 50; ++i) {
    auto lost = observer.find_lost_member(*group);
    ASSERT_EQ(lost, std::nullopt) << "check " << i << ": " << *lost;
    std::this_thread::sleep_for(5ms);
  }
}

TEST(Monitor, APeerThatStopsBeatingIsFoundAfterDeadAfter) {
  auto shared = c10::make_intrusive<c10d::HashStore>();
  Monitor observer(shared, 0, 2, fast());
  // Rank 1 publishes one beat and then nothing, as a process that froze or was killed -9.
  std::string rec = R"({"hb":1,"state":"alive","groups":{}})";
  shared->set(monitor_record_key(1), std::vector<uint8_t>(rec.begin(), rec.end()));
  auto group = pair_group();
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::string> lost;
  while (!(lost = observer.find_lost_member(*group)) && std::chrono::steady_clock::now() - start < 5s) {
    std::this_thread::sleep_for(5ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(lost.has_value()) << "a silent peer was never reported";
  EXPECT_NE(lost->find("rank 1 is gone"), std::string::npos) << *lost;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 2s) << "found only after " << std::chrono::duration<double>(took).count() << " s";
}

}  // namespace
}  // namespace colossal::dist
