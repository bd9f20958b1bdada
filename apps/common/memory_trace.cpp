#include "apps/common/memory_trace.h"

#include <nlohmann/json.hpp>

#include "core/checkpoint/atomic_file.h"
#include "core/common/log.h"
#include "core/dist/runtime.h"

namespace colossal::apps {

void write_memory_trace(const tools::MemoryTracer& tracer, const std::string& path, int64_t step) {
  const int rank = dist::is_initialized() ? dist::rank() : 0;
  auto j = tracer.to_json();
  j["step"] = step;
  j["rank"] = rank;
  const std::string file = rank == 0 ? path : path + ".rank" + std::to_string(rank);
  checkpoint::write_text_atomically(file, j.dump(2) + "\n");
  COLOSSAL_LOG_INFO("step ", step, " ", tracer.format(), "(written to ", file, ")");
}

}  // namespace colossal::apps
