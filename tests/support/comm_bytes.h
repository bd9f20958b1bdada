#pragma once
// The bytes this rank hands to each kind of collective while `body` runs, summed over groups
// (the communication profiler's counts: all_gather its output, reduce_scatter and all_to_all
// their input, all_reduce the tensor, send/recv the message).
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/dist/comm_profile.h"

namespace colossal::testing {

inline std::map<std::string, int64_t> collective_bytes(const std::function<void()>& body) {
  dist::comm_profile::reset();
  dist::comm_profile::set_enabled(true);
  body();
  dist::comm_profile::set_enabled(false);
  std::map<std::string, int64_t> out;
  for (const auto& [key, totals] : dist::comm_profile::current()) out[key.second] += totals.bytes;
  dist::comm_profile::reset();
  return out;
}

}  // namespace colossal::testing
