#include "core/common/allocator.h"

#include <malloc.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/common/env.h"

extern char** environ;

namespace colossal {
namespace {

bool user_chose_allocator() {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "MALLOC_", 7) == 0) return true;
  const char* preload = std::getenv("LD_PRELOAD");
  return preload != nullptr && (std::strstr(preload, "jemalloc") || std::strstr(preload, "tcmalloc") ||
                                std::strstr(preload, "mimalloc"));
}

bool apply() {
  if (!env_flag("COLOSSAL_KEEP_FREED_MEMORY").value_or(true) || user_chose_allocator()) return false;
#if defined(__GLIBC__)
  // Order matters little; each returns 1 on success.
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 &&
         mallopt(M_TOP_PAD, 64 << 20) == 1;
#else
  return false;
#endif
}

}  // namespace

bool keep_freed_memory() {
  static const bool applied = apply();
  return applied;
}

}  // namespace colossal
