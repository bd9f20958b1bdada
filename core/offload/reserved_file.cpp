#include "core/offload/reserved_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/common/check.h"

namespace colossal::offload {

std::string format_gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1LL << 30));
  return buf;
}

int create_reserved_file(const ReservedFileOptions& o) {
  const std::string& dir = o.dir;
  const std::string& tag = o.tag;
  const int64_t bytes = o.bytes;
  struct stat st {};
  COLOSSAL_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "[offload] ", o.dir_flag, " '", dir,
                 "' is not an existing directory");
  COLOSSAL_CHECK(::access(dir.c_str(), W_OK) == 0, "[offload] ", o.dir_flag, " '", dir, "' is not writable");
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    COLOSSAL_CHECK(free_bytes >= bytes, "[offload] ", o.dir_flag, " '", dir, "' has ", format_gib(free_bytes),
                   " free; this process needs ", format_gib(bytes), " for ", tag.empty() ? "offloaded state" : tag);
  }
  static std::atomic<int> counter{0};  // several files per process (one per table)
  const std::string path = dir + "/colossal-offload-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter++) + (tag.empty() ? "" : "-" + tag) + ".bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  COLOSSAL_CHECK(fd >= 0, "[offload] cannot create '", path, "': ", std::strerror(errno));
  ::unlink(path.c_str());  // gone from the directory; lives while the descriptor is open
  if (bytes > 0) {
    const int rc = ::posix_fallocate(fd, 0, bytes);
    if (rc != 0) {
      ::close(fd);
      COLOSSAL_FAIL("[offload] cannot reserve ", format_gib(bytes), " in ", o.dir_flag, " '", dir, "': ",
                    std::strerror(rc), rc == ENOSPC ? " (the disk is full)" : "");
    }
  }
  return fd;
}

}  // namespace colossal::offload
