#pragma once
// The store a group is created over. A backend's rendezvous (Gloo's connectFullMesh, the
// shared-memory transport) blocks on reads of its peers' keys for up to the whole timeout; a
// member that froze or died half-way through would hold every other member there for that long.
// Reads through this store wait in short polls instead, asking the job's monitor between them,
// so such a member is named within the heartbeat's dead_after.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <functional>
#include <string>
#include <vector>

namespace colossal::dist::detail {

class WatchedStore : public c10d::PrefixStore {
 public:
  /// `wait_until(ready)` polls `ready` and returns once it is true, or throws when the wait must
  /// end (a member gone, the timeout passed).
  using Waiter = std::function<void(const std::function<bool()>& ready)>;
  WatchedStore(const std::string& prefix, c10::intrusive_ptr<c10d::Store> store, Waiter wait_until);

  std::vector<uint8_t> get(const std::string& key) override;
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  void until_present(const std::vector<std::string>& keys);
  Waiter wait_until_;
};

}  // namespace colossal::dist::detail
