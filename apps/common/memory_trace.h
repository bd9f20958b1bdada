#pragma once
// --memory_trace FILE, shared by the training apps: one traced step's table in the log (rank 0)
// and its JSON in FILE (FILE.rankR on ranks other than 0).
#include <cstdint>
#include <string>

#include "core/tools/memory_tracer.h"

namespace colossal::apps {

void write_memory_trace(const tools::MemoryTracer& tracer, const std::string& path, int64_t step);

}  // namespace colossal::apps
