#include "core/dist/monitor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "core/common/check.h"
#include "core/common/log.h"

namespace colossal::dist {

std::string store_prefix(int attempt, int generation) {
  return "attempt" + std::to_string(attempt) + "/init" + std::to_string(generation);
}

std::string monitor_record_key(int rank) { return "colossal/monitor/" + std::to_string(rank); }

std::optional<PublishedFailure> parse_failure_record(const std::string& record) {
  auto rec = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (rec.is_discarded() || !rec.is_object() || rec.value("state", "") != "failed" || !rec.contains("why")) {
    return std::nullopt;
  }
  PublishedFailure out;
  out.why = rec["why"].get<std::string>();
  for (const auto& s : rec.value("suspects", nlohmann::json::array()))
    out.suspects.emplace_back(s[0].get<int>(), s[1].get<std::string>());
  return out;
}

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Monitor::Monitor(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, Options options)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), options_(options) {
  peers_.resize(world_size_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    publish_locked();  // our record exists before anyone can wait on us
  }
  thread_ = std::thread([this] { run(); });
}

Monitor::~Monitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (state_ == "alive") state_ = "exited";
    try {
      publish_locked();
    } catch (...) {
      // The store may already be gone at shutdown; nothing left to tell.
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Monitor::on_enter(const detail::GroupState& group, const char* op, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  my_groups_[group.store_key] = {seq, op};
}

void Monitor::mark_failed(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = "failed";
  why_ = first_line(why).substr(0, 400);
  try {
    publish_locked();
  } catch (...) {
  }
}

void Monitor::publish_locked() {
  nlohmann::json rec;
  rec["hb"] = heartbeat_;
  rec["state"] = state_;
  if (!why_.empty()) rec["why"] = why_;
  if (state_ == "failed" && !suspects_.empty()) {
    nlohmann::json suspects = nlohmann::json::array();
    for (const auto& [r, finding] : suspects_) suspects.push_back({r, finding});
    rec["suspects"] = suspects;
  }
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [key, v] : my_groups_) groups[key] = {v.first, v.second};
  rec["groups"] = groups;
  std::string text = rec.dump();
  store_->set(monitor_record_key(rank_), std::vector<uint8_t>(text.begin(), text.end()));
}

void Monitor::poll_peers_locked() {
  auto now = std::chrono::steady_clock::now();
  // Records are read with one multiGet; a rank is added once check() has seen its record
  // (get() would block on a rank that has not published yet).
  std::vector<int> ranks;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    if (!peers_[r].present && !store_->check({monitor_record_key(r)})) continue;
    ranks.push_back(r);
    keys.push_back(monitor_record_key(r));
  }
  if (keys.empty()) return;
  auto values = store_->multiGet(keys);
  last_poll_done_ = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ranks.size(); ++i) {
    PeerRecord& p = peers_[ranks[i]];
    auto rec = nlohmann::json::parse(std::string(values[i].begin(), values[i].end()), nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) continue;
    int64_t hb = rec.value("hb", int64_t{-1});
    if (!p.present || hb != p.heartbeat) {
      p.last_advance = now;
      p.advance_seen = last_poll_done_;
      p.polls_since_advance = 0;
    } else {
      ++p.polls_since_advance;
    }
    p.present = true;
    p.heartbeat = hb;
    p.state = rec.value("state", std::string("alive"));
    p.why = rec.value("why", std::string());
    p.groups.clear();
    if (rec.contains("groups") && rec["groups"].is_object()) {
      for (auto it = rec["groups"].begin(); it != rec["groups"].end(); ++it) {
        p.groups[it.key()] = {it.value()[0].get<uint64_t>(), it.value()[1].get<std::string>()};
      }
    }
  }
}

void Monitor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.interval, [this] { return stopping_; });
    if (stopping_) break;
    ++heartbeat_;
    try {
      publish_locked();
      poll_peers_locked();
    } catch (const std::exception& e) {
      if (!store_lost_) {
        store_lost_ = true;
        store_error_ = first_line(e.what());
        COLOSSAL_LOG_WARN_ALL_RANKS("[dist] lost the rendezvous store: ", store_error_);
      }
    }
  }
}

std::optional<std::string> Monitor::lost_reason_locked(
    int rank, std::chrono::steady_clock::time_point now) const {
  const PeerRecord& p = peers_[rank];
  if (!p.present) return std::nullopt;
  if (p.state == "failed") return c10::str("rank ", rank, " failed: ", p.why);
  if (p.state == "exited") return c10::str("rank ", rank, " has already exited");
  // Silent means: our own polls went on for dead_after and none of them saw a new beat. Measured
  // between polls, not against the clock now, so an observer that was itself starved of CPU, or
  // a store that answered late, does not condemn a peer whose beats it simply has not read yet;
  // a few unchanged polls are required too, because after a store stall every peer's next beat
  // arrives only a moment after our first poll gets through.
  constexpr int kMinSilentPolls = 3;
  auto silent = last_poll_done_ - p.advance_seen;
  if (silent > options_.dead_after && p.polls_since_advance >= kMinSilentPolls) {
    return c10::str("rank ", rank, " is gone (no heartbeat for ", seconds(std::max(silent, now - p.advance_seen)), " s)");
  }
  return std::nullopt;
}

void Monitor::mark_exited() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != "alive") return;
  state_ = "exited";
  try {
    publish_locked();
  } catch (...) {
  }
}

void Monitor::wait_for_peers_to_leave(std::chrono::milliseconds max_wait) {
  auto deadline = std::chrono::steady_clock::now() + max_wait;
  std::unique_lock<std::mutex> lock(mu_);
  while (!store_lost_ && std::chrono::steady_clock::now() < deadline) {
    bool someone_left_behind = false;
    auto now = std::chrono::steady_clock::now();
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_ || !peers_[r].present) continue;
      if (peers_[r].state == "alive" && !lost_reason_locked(r, now)) someone_left_behind = true;
    }
    if (!someone_left_behind) return;
    cv_.wait_for(lock, options_.interval);
  }
}

std::optional<std::string> Monitor::find_lost_member(const detail::GroupState& group) {
  std::lock_guard<std::mutex> lock(mu_);
  if (store_lost_) {
    return c10::str("the rendezvous store is unreachable (", store_error_,
                    "); the process hosting it (rank 0 or the launcher) has probably exited");
  }
  auto now = std::chrono::steady_clock::now();
  for (int r : group.ranks) {
    if (r == rank_) continue;
    if (auto why = lost_reason_locked(r, now)) return why;
  }
  return std::nullopt;
}

std::string Monitor::diagnose(const detail::GroupState& group, std::optional<uint64_t> seq) {
  // A peer killed a moment ago may still show a heartbeat it published just before dying, so
  // only an advance observed more than one interval after the failure proves a peer alive
  // (it must have been published after the failure). Watch for up to four intervals.
  auto start = std::chrono::steady_clock::now();
  auto proof_after = start + options_.interval + options_.interval / 2;
  auto window = 4 * options_.interval + std::chrono::milliseconds(100);
  std::vector<int> peers;
  for (int r : group.ranks)
    if (r != rank_) peers.push_back(r);
  std::unique_lock<std::mutex> lock(mu_);
  auto proven_alive = [&](int r) { return peers_[r].last_advance > proof_after; };
  while (!store_lost_) {
    bool all_known = true;
    for (int r : peers) {
      const PeerRecord& p = peers_[r];
      if (p.present && p.state != "alive") continue;
      all_known &= proven_alive(r);
    }
    if (all_known || std::chrono::steady_clock::now() - start > window) break;
    lock.unlock();
    std::this_thread::sleep_for(options_.interval / 4);
    lock.lock();
  }
  if (store_lost_) {
    return c10::str("the rendezvous store is unreachable (", store_error_,
                    "); the process hosting it (rank 0 or the launcher) has probably exited");
  }
  std::vector<std::string> findings;
  // The peers this failure points at: those gone or never there, else those alive but not at the
  // collective (a dead peer explains live ones still waiting elsewhere); never those that failed
  // or exited themselves (other witnesses).
  std::vector<std::pair<int, std::string>> gone, late;
  auto suspect = [&](int r, std::string finding) {
    gone.emplace_back(r, finding);
    findings.push_back(std::move(finding));
  };
  auto behind = [&](int r, std::string finding) {
    late.emplace_back(r, finding);
    findings.push_back(std::move(finding));
  };
  auto now = std::chrono::steady_clock::now();
  for (int r : peers) {
    const PeerRecord& p = peers_[r];
    if (!p.present) {
      suspect(r, c10::str("rank ", r, " never joined the job"));
      continue;
    }
    if (auto why = lost_reason_locked(r, now)) {
      if (p.state == "alive") suspect(r, *why);  // silent past dead_after
      else findings.push_back(*why);
      continue;
    }
    if (p.state == "alive" && !proven_alive(r)) {
      suspect(r, c10::str("rank ", r, " is gone (no heartbeat for ", seconds(now - p.last_advance), " s)"));
      continue;
    }
    if (!seq) continue;
    auto it = p.groups.find(group.store_key);
    if (it == p.groups.end()) {
      behind(r, c10::str("rank ", r, " is alive but has not entered any collective on ",
                         "this group (expected #", *seq, ")"));
    } else if (it->second.first < *seq) {
      behind(r, c10::str("rank ", r, " is alive but has not reached collective #", *seq,
                         " (its last on this group is #", it->second.first, " ", it->second.second, ")"));
    }
  }
  suspects_ = gone.empty() ? late : gone;
  if (findings.empty()) {
    return seq ? "every member is alive and entered this collective" : "every member is alive";
  }
  std::string out = "missing: ";
  for (size_t i = 0; i < findings.size(); ++i) out += (i ? "; " : "") + findings[i];
  return out;
}

GroupWait wait_for_group(Monitor* monitor, const detail::GroupState& group, const std::function<bool()>& ready) {
  const auto start = std::chrono::steady_clock::now();
  const auto slice = monitor ? monitor->options().interval : group.timeout;
  auto next_check = start + slice;
  auto pause = std::chrono::microseconds(50);
  GroupWait out;
  while (!(out.ready = ready())) {
    const auto now = std::chrono::steady_clock::now();
    if (monitor && now >= next_check) {
      out.lost = monitor->find_lost_member(group);
      if (out.lost) return out;
      next_check = now + slice;
    }
    if (now - start > group.timeout) return out;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  return out;
}

}  // namespace colossal::dist
