#pragma once
// torchrun's error-file contract. The launcher gives each rank a path in TORCHELASTIC_ERROR_FILE;
// a rank that dies of an error writes it there as JSON, and the launcher reads the files back to
// name the first failure with its message instead of an exit code alone. The shape is torch's own
// (torch.distributed.elastic's error handler), so torchrun's summary shows our message, and
// `colossal run` reads what a Python rank under `@record` writes:
//   {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "<unix s>"}}}
#include <cstdint>
#include <optional>
#include <string>

namespace colossal::launch {

struct ErrorRecord {
  std::string message;    // one line: what failed
  std::string details;    // torchrun prints this as the "traceback" (extraInfo.py_callstack)
  int64_t timestamp = 0;  // seconds since the epoch; torchrun's root cause is the earliest
};

/// Writes `record` to `path` atomically (write, then rename); throws naming the path.
void write_error_file(const std::string& path, const ErrorRecord& record);

/// Reads a record in torch's shape (or its older {"message": "...", "timestamp": N}); nullopt when
/// the file is absent or is not such a record.
std::optional<ErrorRecord> read_error_file(const std::string& path);

/// For a program's main(): when TORCHELASTIC_ERROR_FILE is set, records `message` with this
/// process's rank (RANK) and program name. Never throws: it runs while the program is failing.
void record_fatal_error(const std::string& program, const std::string& message);

}  // namespace colossal::launch
