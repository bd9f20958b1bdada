#include "apps/common/memory_trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

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

StepMemoryTrace::StepMemoryTrace(std::string path, int64_t first_step, int64_t total_steps)
    : path_(std::move(path)), traced_step_(path_.empty() ? -1 : std::min(first_step + 1, total_steps)) {}

void StepMemoryTrace::begin(int64_t step) {
  if (step != traced_step_) return;
  tracer_ = std::make_unique<tools::MemoryTracer>();
  tracer_->begin_step();
}

void StepMemoryTrace::phase(const char* name) {
  if (tracer_) tracer_->phase(name);
}

void StepMemoryTrace::end(int64_t step, const std::function<int64_t()>& model_bytes) {
  if (!tracer_) return;
  tracer_->end_step(model_bytes());
  write_memory_trace(*tracer_, path_, step);
  tracer_.reset();
}

}  // namespace colossal::apps
