#include "apps/common/app_entry.h"

#include <cstdio>
#include <exception>

#include "core/common/check.h"

namespace colossal::apps {

std::vector<std::string> arguments_of(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return args;
}

int run_main(const char* program, int argc, char** argv, RunSummary (*job)(const std::vector<std::string>&)) {
  try {
    return job(arguments_of(argc, argv)).exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, error_text(e).c_str());
    return 1;
  }
}

}  // namespace colossal::apps
