#include "core/dist/runtime.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/common/allocator.h"
#include "core/common/check.h"
#include "core/common/fault.h"
#include "core/common/env.h"
#include "core/common/log.h"
#include "core/common/process_info.h"
#include "core/dist/backend_factory.h"
#include "core/dist/comm_profile.h"
#include "core/dist/shm_transport.h"
#include "core/dist/monitor.h"
#include "core/dist/net.h"
#include "core/dist/runtime_internal.h"
#include "core/dist/watched_store.h"

namespace colossal::dist {
namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

struct Runtime {
  ~Runtime() { leave(); }
  // Tells peers this rank is leaving; the rank hosting the store keeps it up until the others
  // have left too (bounded), so their last collectives and diagnoses still reach it.
  void leave() {
    comm_profile::finish();  // the per-step communication table, when COLOSSAL_COMM_PROFILE is set
    if (!monitor) return;
    monitor->mark_exited();
    if (hosts_store) {
      monitor->wait_for_peers_to_leave(to_ms(options.dead_after_s + 2 * options.heartbeat_interval_s));
    }
    groups.clear();
    world = Group();
    monitor.reset();
  }
  bool hosts_store = false;
  DistEnvironment env;
  InitOptions options;
  std::string backend;
  BackendOptions backend_options;
  c10::intrusive_ptr<c10d::Store> store;  // prefixed with the restart attempt
  std::unique_ptr<Monitor> monitor;
  Group world;
  std::map<std::string, Group> groups;  // cache key: name + ranks
  std::mutex mu;
};

std::unique_ptr<Runtime>& runtime_slot() {
  static std::unique_ptr<Runtime> rt;
  return rt;
}

Runtime& rt() {
  auto& r = runtime_slot();
  COLOSSAL_CHECK(r != nullptr, "[dist] not initialised: call colossal::dist::init() first");
  return *r;
}

c10::intrusive_ptr<c10d::Store> make_store_client(const Runtime& r, bool is_server) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(r.env.master_port);
  o.isServer = is_server;
  o.numWorkers = std::nullopt;
  o.waitWorkers = false;
  o.timeout = to_ms(r.options.timeout_s);
  try {
    return c10::make_intrusive<c10d::TCPStore>(r.env.master_addr, o);
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[dist] rendezvous at ", r.env.master_addr, ":", r.env.master_port, " failed (",
                  is_server ? "hosting the store" : "connecting to the store", "): ",
                  error_text(e));
  }
}

// Group creation failed: every member publishes the monitor's diagnosis (peers and the launcher
// read it) and throws "[dist] creating <group><how> failed: [<what>: ]<who>[. Cause: <cause>]".
[[noreturn]] void fail_creation(Runtime& r, const std::shared_ptr<detail::GroupState>& state, const std::string& how,
                                const std::string& what, const std::string& cause = "") {
  const std::string who = r.monitor ? r.monitor->diagnose(*state, std::nullopt) : "";
  const std::string msg = c10::str("[dist] creating ", Group(state).describe(), how, " failed: ",
                                   what.empty() ? "" : what + ": ", who,
                                   cause.empty() ? "" : ". Cause: " + cause.substr(0, cause.find('\n')));
  if (r.monitor) r.monitor->mark_failed(msg);
  COLOSSAL_FAIL(msg);
}

// Counts this member in under `key` of the group's store and waits until every member has: at
// most the timeout, and only until the monitor finds a member gone (failed, exited, silent).
void wait_for_members(Runtime& r, const std::shared_ptr<detail::GroupState>& state, c10d::Store& store,
                      const std::string& key, const char* what) {
  const auto size = static_cast<int64_t>(state->ranks.size());
  store.add(key, 1);
  const auto wait = wait_for_group(r.monitor.get(), *state, [&] { return store.add(key, 0) >= size; });
  if (!wait.ready) {
    fail_creation(r, state, " with " + r.backend,
                  wait.lost ? std::string(what) : c10::str(what, " within ", r.options.timeout_s, " s"));
  }
}

std::string choose_backend(const std::string& requested) {
  if (requested == "auto") return nccl_available() ? "nccl" : "gloo";
  return requested;
}

c10::intrusive_ptr<c10d::Backend> make_backend(Runtime& r,
                                                const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size) {
  if (r.backend == "nccl") return make_nccl_backend(store, rank, size, r.backend_options);
  return make_gloo_backend(store, rank, size, r.backend_options);
}

}  // namespace

InitOptions InitOptions::from_environment() {
  InitOptions o;
  o.timeout_s = env_double("COLOSSAL_DIST_TIMEOUT").value_or(o.timeout_s);
  o.heartbeat_interval_s = env_double("COLOSSAL_HEARTBEAT_INTERVAL").value_or(o.heartbeat_interval_s);
  o.dead_after_s = env_double("COLOSSAL_DEAD_AFTER").value_or(o.dead_after_s);
  if (auto b = env_string("COLOSSAL_DIST_BACKEND")) o.backend = *b;
  return o;
}

void InitOptions::read(const ConfigNode& c) {
  c.read("backend", backend);
  c.read("timeout_s", timeout_s);
  c.read("heartbeat_interval_s", heartbeat_interval_s);
  c.read("dead_after_s", dead_after_s);
  c.read("gloo_threads", gloo_threads);
}

void InitOptions::validate() const {
  COLOSSAL_CHECK(backend == "auto" || backend == "gloo" || backend == "nccl",
                 "[dist] backend: expected auto, gloo or nccl, got '", backend, "'");
  COLOSSAL_CHECK(timeout_s > 0, "[dist] timeout_s: expected > 0, got ", timeout_s);
  COLOSSAL_CHECK(heartbeat_interval_s > 0, "[dist] heartbeat_interval_s: expected > 0, got ",
                 heartbeat_interval_s);
  COLOSSAL_CHECK(dead_after_s >= 2 * heartbeat_interval_s,
                 "[dist] dead_after_s: expected at least twice heartbeat_interval_s (",
                 2 * heartbeat_interval_s, "), got ", dead_after_s);
  COLOSSAL_CHECK(gloo_threads >= 1, "[dist] gloo_threads: expected >= 1, got ", gloo_threads);
}

void init(const InitOptions& options) {
  options.validate();
  keep_freed_memory();  // before the model and its first step allocate (common/allocator.h)
  check_injected_faults();  // a misspelt fault name must not pass for a clean run
  auto& slot = runtime_slot();
  COLOSSAL_CHECK(slot == nullptr, "[dist] init() called twice");
  auto r = std::make_unique<Runtime>();
  r->env = DistEnvironment::from_process_environment();
  r->options = options;
  r->backend = choose_backend(options.backend);
  set_process_rank(r->env.rank);
  comm_profile::configure_from_environment(r->env.rank);

  r->backend_options.timeout = to_ms(options.timeout_s);
  r->backend_options.gloo_threads = options.gloo_threads;
  if (auto ifname = env_string("GLOO_SOCKET_IFNAME")) {
    r->backend_options.gloo_interface = *ifname;
  } else if (!is_loopback_host(r->env.master_addr)) {
    r->backend_options.gloo_address = local_address_towards(r->env.master_addr);
  }

  c10::intrusive_ptr<c10d::Store> base;
  if (r->env.world_size == 1 && r->env.source == "none") {
    base = c10::make_intrusive<c10d::HashStore>();  // a world of one needs no sockets
  } else {
    r->hosts_store = r->env.rank == 0 && !r->env.store_hosted_by_launcher;
    log_message(LogLevel::kDebug, c10::str("[dist] ", r->env.describe(), r->hosts_store ? "; this rank hosts the store" :
                                           "; joining the store as a client"), /*all_ranks=*/true);
    base = make_store_client(*r, r->hosts_store);
  }
  // Keys of an earlier attempt (after a restart), or of an earlier init() in this process
  // (after shutdown()), must not be mistaken for this one's.
  static int generation = 0;
  std::string prefix = store_prefix(r->env.restart_count, generation++);
  r->store = c10::make_intrusive<c10d::PrefixStore>(prefix, base);

  Monitor::Options mo;
  mo.interval = to_ms(options.heartbeat_interval_s);
  mo.dead_after = to_ms(options.dead_after_s);
  c10::intrusive_ptr<c10d::Store> monitor_store = r->store;
  if (base.get() != nullptr && dynamic_cast<c10d::TCPStore*>(base.get()) != nullptr) {
    // Its own connection: a slow rendezvous never delays heartbeats.
    monitor_store = c10::make_intrusive<c10d::PrefixStore>(prefix, make_store_client(*r, false));
  }
  r->monitor = std::make_unique<Monitor>(monitor_store, r->env.rank, r->env.world_size, mo);

  slot = std::move(r);
  std::vector<int> all(slot->env.world_size);
  for (int i = 0; i < slot->env.world_size; ++i) all[i] = i;
  try {
    slot->world = new_group(all, "world");
  } catch (...) {
    slot.reset();
    throw;
  }
  COLOSSAL_LOG_DEBUG("[dist] initialised: ", slot->env.describe(), ", backend ", slot->backend);
}

bool is_initialized() { return runtime_slot() != nullptr; }

void shutdown() {
  auto& slot = runtime_slot();
  if (!slot) return;
  slot->leave();
  slot.reset();
}

int rank() { return rt().env.rank; }
int world_size() { return rt().env.world_size; }
const DistEnvironment& environment() { return rt().env; }
const std::string& backend_name() { return rt().backend; }
Group world_group() { return rt().world; }
c10::intrusive_ptr<c10d::Store> store() { return rt().store; }

Group new_group(const std::vector<int>& ranks, const std::string& name) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  COLOSSAL_CHECK(!ranks.empty(), "[dist] new_group('", name, "'): empty rank list");
  std::vector<int> seen(r.env.world_size, 0);
  for (int g : ranks) {
    COLOSSAL_CHECK(g >= 0 && g < r.env.world_size, "[dist] new_group('", name, "'): rank ", g,
                   " is outside the world [0, ", r.env.world_size, ")");
    COLOSSAL_CHECK(seen[g]++ == 0, "[dist] new_group('", name, "'): rank ", g, " listed twice");
  }
  // The store prefix must be identical on every member and differ between groups: the name
  // plus a hash of the ordered member list (short even for thousands of ranks).
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int g : ranks) {
    h ^= static_cast<uint64_t>(g) + 1;
    h *= 1099511628211ull;
  }
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(h));
  std::string key = name + "/" + std::to_string(ranks.size()) + "/" + hash;
  if (auto it = r.groups.find(key); it != r.groups.end()) return it->second;

  auto it = std::find(ranks.begin(), ranks.end(), r.env.rank);
  if (it == ranks.end()) return Group();

  auto state = std::make_shared<detail::GroupState>();
  state->name = name;
  state->store_key = "group/" + key;
  state->ranks = ranks;
  state->rank = static_cast<int>(it - ranks.begin());
  state->timeout = to_ms(r.options.timeout_s);
  // Reads by the backend's rendezvous and the shared-memory set-up stop as soon as the monitor
  // finds a member gone (frozen or killed half-way), not at the timeout.
  auto prefixed = c10::make_intrusive<detail::WatchedStore>(
      state->store_key, r.store, [&r, state](const std::function<bool()>& ready) {
        const auto wait = wait_for_group(r.monitor.get(), *state, ready);
        if (wait.ready) return;
        // Not one of ours ("[rank "...): new_group's handlers turn it into fail_creation's report.
        throw std::runtime_error(wait.lost ? "a member stopped during set-up: " + *wait.lost
                                           : c10::str("a member's key was not there within ", r.options.timeout_s, " s"));
      });
  // Every member first counts itself in: a member that froze or died on its way here is found by
  // the heartbeat (dead_after_s) instead of at the backend's rendezvous timeout.
  wait_for_members(r, state, *prefixed, "arrived", "not every member arrived");
  try {
    state->backend = make_backend(r, prefixed, state->rank, static_cast<int>(ranks.size()));
  } catch (const std::exception& e) {
    std::string why = error_text(e);
    if (why.rfind("[rank ", 0) == 0) throw;  // already one of ours, with its context
    fail_creation(r, state, " with " + r.backend, "", why);  // usually a member never arrived: which
  }
  // Gloo's connectFullMesh can return on one member while a peer is still connecting; a member
  // that then finished and exited would break the peer's connection. Leave only once every
  // member is connected (through the store, so no collective sequence number is used).
  wait_for_members(r, state, *prefixed, "connected", "not every member connected");
  // Shared memory for CPU collectives when every member is on this host.
  if (r.backend == "gloo" && ranks.size() > 1 && detail::ShmTransport::enabled_by_environment()) try {
    prefixed->set("host/" + std::to_string(state->rank), detail::ShmTransport::host_identity());
    bool one_host = true;
    auto mine = detail::ShmTransport::host_identity();
    for (size_t i = 0; i < ranks.size() && one_host; ++i) {
      auto v = prefixed->get("host/" + std::to_string(i));
      one_host = std::string(v.begin(), v.end()) == mine;
    }
    // Every member must reach the same decision; differing views of "this host" cannot
    // happen (each member compares the full list), so no extra agreement round is needed.
    if (one_host) {
      detail::ShmTransport::Options o;
      o.timeout = state->timeout;
      o.group_name = name;
      state->shm = detail::ShmTransport::connect(*prefixed, state->rank, static_cast<int>(ranks.size()), o);
    }
  } catch (const std::exception& e) {  // a member that stopped mid-setup: say which, as above
    fail_creation(r, state, " (shared memory)", "", error_text(e));
  }
  Group g(state);
  r.groups[key] = g;
  return g;
}

namespace detail {
Monitor* monitor() {
  auto& slot = runtime_slot();
  return slot ? slot->monitor.get() : nullptr;
}
}  // namespace detail

}  // namespace colossal::dist
