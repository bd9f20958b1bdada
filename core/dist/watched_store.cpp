#include "core/dist/watched_store.h"

namespace colossal::dist::detail {

WatchedStore::WatchedStore(const std::string& prefix, c10::intrusive_ptr<c10d::Store> store, Waiter wait_until)
    : c10d::PrefixStore(prefix, std::move(store)), wait_until_(std::move(wait_until)) {}

void WatchedStore::until_present(const std::vector<std::string>& keys) {
  wait_until_([&] { return check(keys); });  // check() adds the prefix
}

std::vector<uint8_t> WatchedStore::get(const std::string& key) {
  until_present({key});
  return c10d::PrefixStore::get(key);
}

std::vector<std::vector<uint8_t>> WatchedStore::multiGet(const std::vector<std::string>& keys) {
  until_present(keys);
  return c10d::PrefixStore::multiGet(keys);
}

void WatchedStore::wait(const std::vector<std::string>& keys) { until_present(keys); }

// The caller's timeout is not shorter than the group's in any backend we create; the group's
// timeout (inside until_present_) bounds the wait either way.
void WatchedStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  until_present(keys);
}

}  // namespace colossal::dist::detail
