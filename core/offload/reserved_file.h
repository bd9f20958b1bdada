#pragma once
// A new file of a given size in the user's offload directory, reserved in full up front
// (posix_fallocate), so a missing or unwritable directory or a full disk is an error naming the
// directory and the shortfall before any training, not a failure midway. The file is unlinked as
// soon as it is open: it lives exactly as long as its descriptor, and nothing is left behind
// after an exit, a crash or a kill -9.
#include <cstdint>
#include <string>

namespace colossal::offload {

struct ReservedFileOptions {
  std::string dir;
  std::string dir_flag = "offload_dir";  // how the user named the directory, for messages
  int64_t bytes = 0;
  std::string tag;  // what the file holds (in its name and in messages)
};

/// Returns the open descriptor of the reserved (already unlinked) file.
int create_reserved_file(const ReservedFileOptions& options);

std::string format_gib(int64_t bytes);

}  // namespace colossal::offload
