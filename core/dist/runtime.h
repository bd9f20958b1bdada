#pragma once
// Process-wide distributed runtime: rendezvous, the world group, sub-groups, liveness monitor.
//
//   colossal::dist::init();                       // reads RANK/WORLD_SIZE/... or SLURM_*
//   auto world = colossal::dist::world_group();
//   colossal::dist::all_reduce(t, world);
//
// With no launcher variables set this is a world of one (no sockets are opened).
// Like torch.distributed's default group, the runtime is a per-process singleton: a process is
// one rank of one job.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "core/common/config.h"
#include "core/dist/environment.h"
#include "core/dist/group.h"

namespace colossal::dist {

struct InitOptions {
  std::string backend = "auto";  // auto (nccl with CUDA and a GPU, else gloo) | gloo | nccl
  double timeout_s = 60;         // every collective and the rendezvous; COLOSSAL_DIST_TIMEOUT
  double heartbeat_interval_s = 1.0;  // COLOSSAL_HEARTBEAT_INTERVAL
  double dead_after_s = 10;           // no heartbeat for this long = rank gone; COLOSSAL_DEAD_AFTER
  int gloo_threads = 2;

  /// Applies COLOSSAL_DIST_TIMEOUT, COLOSSAL_HEARTBEAT_INTERVAL, COLOSSAL_DEAD_AFTER (seconds).
  static InitOptions from_environment();
  void read(const ConfigNode& config);
  void validate() const;
};

/// Joins the job. Idempotent only in the sense that a second call throws (init once).
void init(const InitOptions& options = InitOptions::from_environment());
bool is_initialized();
/// Leaves the job: tells peers this rank exited, destroys groups, closes the store.
void shutdown();

int rank();
int world_size();
const DistEnvironment& environment();
const std::string& backend_name();
Group world_group();
c10::intrusive_ptr<c10d::Store> store();

/// A group of the given global ranks (in that order). Every member must call it with the same
/// ranks and name; non-members may skip it (they get a non-member Group). Created groups are
/// cached by (name, ranks), so repeated calls return the same group without new rendezvous.
Group new_group(const std::vector<int>& ranks, const std::string& name);

}  // namespace colossal::dist
