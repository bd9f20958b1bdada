#include "core/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/check.h"

namespace colossal::checkpoint {
namespace {

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  COLOSSAL_CHECK(fd_ >= 0, "[checkpoint] cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    COLOSSAL_CHECK(n > 0, "[checkpoint] writing '", tmp_, "' failed: ", std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  COLOSSAL_CHECK(::fsync(fd_) == 0, "[checkpoint] fsync of '", tmp_, "' failed: ",
                 std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  COLOSSAL_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "[checkpoint] renaming '", tmp_,
                 "' to '", path_, "' failed: ", std::strerror(errno));
  committed_ = true;
  int dir = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // make the rename itself durable
    ::close(dir);
  }
}

void write_text_atomically(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace colossal::checkpoint
