#pragma once
// Hostfiles for multi-node launches, one host per line as DeepSpeed and MPI write them:
//   node-a slots=4
//   10.0.0.2            # slots defaults to --nproc_per_node
// Blank lines and '#' comments are ignored.
#include <string>
#include <vector>

namespace colossal::launch {

struct HostEntry {
  std::string host;
  int slots = 0;  // 0 = not given
  int line = 0;   // for messages
};

/// Throws naming the file and line on malformed entries or duplicate hosts.
std::vector<HostEntry> parse_hostfile(const std::string& path);
std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& origin);

}  // namespace colossal::launch
