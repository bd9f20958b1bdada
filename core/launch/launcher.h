#pragma once
// The library behind `colossal run`: torchrun-style launching on one or many machines.
//
// Each node's launcher starts nproc_per_node ranks with the torchrun variables set (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_USE_AGENT_STORE). The launcher of node 0 hosts the
// rendezvous TCPStore (the ranks connect to it as clients, as torchrun's agent store does), and
// the launchers use the same store to agree on failures and restarts:
//   * a rank that exits non-zero or is killed: its launcher stops the other local ranks and
//     publishes the failure; every other launcher stops its ranks too;
//   * with restarts left, all nodes start the whole group again (attempt k+1), else each
//     launcher prints one summary line and exits non-zero;
//   * SIGINT/SIGTERM to a launcher are forwarded to its ranks (then SIGKILL after a grace
//     period); its exit status is then 128 + signal.
#include <optional>
#include <string>
#include <vector>

#include "core/common/config.h"

namespace colossal::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;               // the most nodes (torchrun's --nnodes MIN:MAX gives both)
  int min_nnodes = 0;           // elastic: run with any count in [min_nnodes, nnodes]; 0: exactly nnodes
  std::string rdzv_id;          // torchrun's --rdzv_id: accepted, one job per store
  int node_rank = 0;
  std::string master_addr;       // empty: the hostfile's first host, else 127.0.0.1
  int master_port = -1;         // -1: a free port on one node, 29500 on several; 0: a free port
  std::string hostfile;         // start the other nodes over ssh (this machine is node 0)
  std::string ssh = "ssh";      // command used to reach hosts of the hostfile
  int max_restarts = 0;
  std::optional<int> tee;       // show only this global rank's output
  double grace_period_s = 5;    // between SIGTERM and SIGKILL when stopping ranks
  double rdzv_timeout_s = 300;  // for launchers of other nodes to join
  double last_call_s = 30;      // elastic: once MIN nodes joined, how long more may join (torchrun's 30 s)
  // A rank that exits 0 while others keep running usually means the others wait on a collective
  // it never joined. The launcher names the ranks still running (after notice_s, then every
  // minute); with finish_timeout_s > 0 it stops them that long after the first finished, and
  // the job fails naming them.
  double finish_timeout_s = 0;
  double finish_notice_s = 10;
  std::vector<std::string> command;  // PROGRAM ARGS...

  void read(const ConfigNode& config);
  /// torchrun's PET_* variables (what Kubeflow sets in a pod): PET_NPROC_PER_NODE, PET_NNODES,
  /// PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_MAX_RESTARTS, PET_RDZV_ENDPOINT,
  /// PET_RDZV_BACKEND, PET_RDZV_ID, PET_STANDALONE. Read first, so a flag or a config file wins.
  void read_torchrun_environment();
  /// "N" or torchrun's "MIN:MAX".
  void set_nnodes(const std::string& value);
  /// "N", or torchrun's "gpu" (the CUDA devices), "cpu" (the cores), "auto" (gpu when there is
  /// one, else 1: our ranks use every core of theirs through threads).
  void set_nproc_per_node(const std::string& value);
  /// torchrun's --rdzv_endpoint HOST[:PORT] (port 29400 when absent, as torchrun's).
  void set_rdzv_endpoint(const std::string& value);
  /// torchrun's --rdzv_backend: static and c10d both mean our store rendezvous; others refused.
  void set_rdzv_backend(const std::string& value);
  /// torchrun's --rdzv_conf KEY=VALUE,...: join_timeout and last_call_timeout (seconds) are used,
  /// torchrun's other keys accepted; a malformed item is named.
  void set_rdzv_conf(const std::string& value);
  /// torchrun's --standalone: one node, a free port.
  void set_standalone();
  void validate() const;
};

/// Runs the job; returns the exit status the launcher should exit with.
int run(const LaunchOptions& options);

/// The variables forwarded to other hosts (exact names and prefixes): never the whole env.
bool forwarded_to_remote_hosts(const std::string& name);

}  // namespace colossal::launch
