#include "core/common/fault.h"

#include <set>
#include <sstream>
#include <string>

#include "core/common/check.h"
#include "core/common/env.h"

namespace colossal {
namespace {

const std::set<std::string>& known_faults() {
  static const std::set<std::string> names = {"average_over_sequence_parallel", "nan_loss"};
  return names;
}

std::set<std::string> read_faults() {
  std::set<std::string> on;
  std::stringstream list(env_string("COLOSSAL_INJECT_FAULT").value_or(""));
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    if (!known_faults().count(name)) {
      std::string known;
      for (const auto& k : known_faults()) known += (known.empty() ? "" : ", ") + k;
      COLOSSAL_FAIL("environment variable COLOSSAL_INJECT_FAULT: unknown fault '", name, "' (known: ", known, ")");
    }
    on.insert(name);
  }
  return on;
}

}  // namespace

bool fault_injected(const char* name) {
  static const std::set<std::string> on = read_faults();
  return on.count(name) != 0;
}

void check_injected_faults() { (void)fault_injected(""); }

}  // namespace colossal
