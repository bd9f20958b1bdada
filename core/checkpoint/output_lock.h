#pragma once
// One job per output. Two jobs given the same save directory would write into the same step-N
// folders; the second refuses instead, saying which job holds the directory.
//
// The lock is an flock(2) on DIR/.colossal-job.lock, which also holds who took it (host, pid,
// start time, command line) for the message. The kernel drops an flock when its holder exits,
// however it exits, so a job killed with -9 leaves no live lock: the next job takes it over and
// says whose it was. Clean release unlinks the file; a taker checks that the file it locked is
// still the one at the path (else it raced a release and tries again). Across hosts this needs a
// file system whose flock reaches the server (NFSv4, Lustre with flock, local disks).
#include <memory>
#include <string>

namespace colossal::checkpoint {

class OutputLock {
 public:
  /// Takes the lock on `dir` (made if missing), or throws naming `dir`, the holder and `flag`
  /// (how the user chose the directory, e.g. "--output"). Says on stderr when it took over a
  /// lock whose holder is gone.
  static std::unique_ptr<OutputLock> acquire(const std::string& dir, const std::string& flag);
  ~OutputLock();  // releases and removes the lock file
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  const std::string& directory() const { return dir_; }
  /// What a lock file records, one "key: value" per line.
  static std::string holder_description(const std::string& file_text);
  static constexpr const char* kFileName = ".colossal-job.lock";

 private:
  OutputLock(std::string dir, std::string path, int fd) : dir_(std::move(dir)), path_(std::move(path)), fd_(fd) {}
  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace colossal::checkpoint
