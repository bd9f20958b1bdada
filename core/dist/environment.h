#pragma once
// Where this process sits in the job, read from the variables a launcher sets:
//  * torchrun / `colossal run`: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//    MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT
//  * SLURM (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE / derived,
//    SLURM_NODEID; MASTER_ADDR/MASTER_PORT still name the rendezvous (SLURM_LAUNCH_NODE_IPADDR
//    is used when MASTER_ADDR is unset)
//  * none of them: a world of one.
#include <cstdint>
#include <string>

namespace colossal::dist {

struct DistEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool store_hosted_by_launcher = false;  // the launcher, not rank 0, runs the TCPStore server
  int restart_count = 0;                  // which attempt of the job this is (0 = first)
  std::string source = "none";            // "torchrun", "slurm" or "none"

  /// Reads the process environment. Throws naming the variable on malformed values.
  static DistEnvironment from_process_environment();
  /// Throws "expected 0 <= RANK < WORLD_SIZE, got RANK=5 WORLD_SIZE=4" and the like.
  void validate() const;
  std::string describe() const;
};

}  // namespace colossal::dist
