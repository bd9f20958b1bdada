#include "core/dist/environment.h"

#include "core/common/check.h"
#include "core/common/env.h"

namespace colossal::dist {
namespace {

int as_int(std::optional<int64_t> v, int fallback) { return v ? static_cast<int>(*v) : fallback; }

}  // namespace

DistEnvironment DistEnvironment::from_process_environment() {
  DistEnvironment e;
  if (env_string("RANK") || env_string("WORLD_SIZE")) {
    e.source = "torchrun";
    COLOSSAL_CHECK(env_string("RANK") && env_string("WORLD_SIZE"),
                   "[dist] RANK and WORLD_SIZE must be set together (found only ",
                   env_string("RANK") ? "RANK" : "WORLD_SIZE", ")");
    e.rank = as_int(env_int("RANK"), 0);
    e.world_size = as_int(env_int("WORLD_SIZE"), 1);
    e.local_rank = as_int(env_int("LOCAL_RANK"), e.rank);
    e.local_world_size = as_int(env_int("LOCAL_WORLD_SIZE"), e.world_size);
    e.node_rank = as_int(env_int("GROUP_RANK"), e.local_world_size > 0 ? e.rank / e.local_world_size : 0);
  } else if (env_string("SLURM_PROCID") && env_string("SLURM_NTASKS")) {
    e.source = "slurm";
    e.rank = as_int(env_int("SLURM_PROCID"), 0);
    e.world_size = as_int(env_int("SLURM_NTASKS"), 1);
    e.local_rank = as_int(env_int("SLURM_LOCALID"), 0);
    int nnodes = as_int(env_int("SLURM_NNODES"), 1);
    // SLURM_NTASKS_PER_NODE is only set with --ntasks-per-node; otherwise assume an even split.
    e.local_world_size = as_int(env_int("SLURM_NTASKS_PER_NODE"),
                                nnodes > 0 ? e.world_size / nnodes : e.world_size);
    e.node_rank = as_int(env_int("SLURM_NODEID"), 0);
    if (!env_string("MASTER_ADDR")) {
      auto launch_node = env_string("SLURM_LAUNCH_NODE_IPADDR");
      COLOSSAL_CHECK(launch_node || e.world_size == 1,
                     "[dist] under SLURM set MASTER_ADDR (the host of task 0), e.g. "
                     "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1)");
      if (launch_node) e.master_addr = *launch_node;
    }
  }
  if (auto a = env_string("MASTER_ADDR")) e.master_addr = *a;
  e.master_port = as_int(env_int("MASTER_PORT"), e.master_port);
  e.store_hosted_by_launcher = env_flag("TORCHELASTIC_USE_AGENT_STORE").value_or(false);
  e.restart_count = as_int(env_int("TORCHELASTIC_RESTART_COUNT"), 0);
  e.validate();
  return e;
}

void DistEnvironment::validate() const {
  COLOSSAL_CHECK(world_size >= 1, "[dist] expected WORLD_SIZE >= 1, got ", world_size);
  COLOSSAL_CHECK(rank >= 0 && rank < world_size, "[dist] expected 0 <= RANK < WORLD_SIZE, got RANK=",
                 rank, " WORLD_SIZE=", world_size);
  COLOSSAL_CHECK(local_world_size >= 1 && local_world_size <= world_size,
                 "[dist] expected 1 <= LOCAL_WORLD_SIZE <= WORLD_SIZE, got LOCAL_WORLD_SIZE=",
                 local_world_size, " WORLD_SIZE=", world_size);
  COLOSSAL_CHECK(local_rank >= 0 && local_rank < local_world_size,
                 "[dist] expected 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE, got LOCAL_RANK=", local_rank,
                 " LOCAL_WORLD_SIZE=", local_world_size);
  COLOSSAL_CHECK(master_port > 0 && master_port < 65536,
                 "[dist] expected 0 < MASTER_PORT < 65536, got ", master_port);
  COLOSSAL_CHECK(!master_addr.empty(), "[dist] MASTER_ADDR is empty");
}

std::string DistEnvironment::describe() const {
  return c10::str("rank ", rank, "/", world_size, " (local ", local_rank, "/", local_world_size,
                  ", node ", node_rank, "), rendezvous ", master_addr, ":", master_port,
                  store_hosted_by_launcher ? " (store hosted by the launcher)" : "", ", from ",
                  source);
}

}  // namespace colossal::dist
