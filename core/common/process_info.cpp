#include "core/common/process_info.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace colossal {
namespace {

int rank_from_environment() {
  for (const char* name : {"RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return 0;
}

std::atomic<int>& rank_slot() {
  static std::atomic<int> rank{rank_from_environment()};
  return rank;
}

}  // namespace

int process_rank() { return rank_slot().load(std::memory_order_relaxed); }
std::string process_rank_string() { return std::to_string(process_rank()); }
void set_process_rank(int rank) { rank_slot().store(rank, std::memory_order_relaxed); }

}  // namespace colossal
