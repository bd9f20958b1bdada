#pragma once
// --memory_trace FILE, shared by the training apps: one traced step's table in the log (rank 0)
// and its JSON in FILE (FILE.rankR on ranks other than 0).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tools/memory_tracer.h"

namespace colossal::apps {

void write_memory_trace(const tools::MemoryTracer& tracer, const std::string& path, int64_t step);

/// --memory_trace in a training loop: traces the run's second step (the first allocates
/// lazily-created state) or its only one; inert with an empty path.
///
///   StepMemoryTrace trace(a.memory_trace, first_step, total_steps);
///   for (step...) { trace.begin(step); trace.phase("forward"); ...; trace.end(step, model_bytes); }
class StepMemoryTrace {
 public:
  StepMemoryTrace(std::string path, int64_t first_step, int64_t total_steps);
  void begin(int64_t step);
  void phase(const char* name);
  /// After the optimizer step: writes the traced step's table and JSON. `model_bytes` (the
  /// plugin's model-state total) is asked for only on the traced step.
  void end(int64_t step, const std::function<int64_t()>& model_bytes);

 private:
  std::string path_;
  int64_t traced_step_ = -1;
  std::unique_ptr<tools::MemoryTracer> tracer_;
};

}  // namespace colossal::apps
