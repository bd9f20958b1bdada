#include "core/checkpoint/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::checkpoint {
namespace {

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return text;
  }
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : raw)
    if (c == '\0') c = ' ';
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  if (raw.size() > 300) raw = raw.substr(0, 300) + "...";
  return raw;
}

std::string this_holder() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  char when[64] = {0};
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return c10::str("host: ", host, "\npid: ", ::getpid(), "\nstarted: ", when, "\ncommand: ", command_line(), "\n");
}

std::string field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ": ", 0) == 0) return line.substr(key.size() + 2);
  return "";
}

}  // namespace

std::string OutputLock::holder_description(const std::string& text) {
  if (field(text, "pid").empty()) return "a job that has not written its name yet";
  return c10::str("pid ", field(text, "pid"), " on host ", field(text, "host"), ", started ", field(text, "started"),
                  ": ", field(text, "command"));
}

std::unique_ptr<OutputLock> OutputLock::acquire(const std::string& dir, const std::string& flag) {
  fs::make_dirs(dir);
  const std::string path = dir + "/" + kFileName;
  for (int tries = 0;; ++tries) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    COLOSSAL_CHECK(fd >= 0, "[output] cannot open the lock file ", path, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = read_all(fd);
      ::close(fd);
      COLOSSAL_CHECK(err == EWOULDBLOCK, "[output] cannot lock ", path, ": ", std::strerror(err));
      COLOSSAL_FAIL("[output] ", dir, " (", flag, ") is in use by another job: ", holder_description(holder),
                    ". Two jobs would write into the same checkpoints; wait for it to end, stop it, or give this "
                    "job another ", flag);
    }
    // Locked; but a job releasing at this moment may have unlinked the file we opened.
    struct stat by_fd {}, by_path {};
    if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0 || by_fd.st_ino != by_path.st_ino ||
        by_fd.st_dev != by_path.st_dev) {
      ::close(fd);
      COLOSSAL_CHECK(tries < 100, "[output] the lock file ", path, " keeps changing under this job");
      continue;
    }
    const std::string previous = read_all(fd);
    if (!field(previous, "pid").empty()) {
      std::fprintf(stderr, "[output] %s: took over the lock of a job that is gone (%s)\n", dir.c_str(),
                   holder_description(previous).c_str());
    }
    const std::string mine = this_holder();
    COLOSSAL_CHECK(::ftruncate(fd, 0) == 0 && ::pwrite(fd, mine.data(), mine.size(), 0) ==
                                                   static_cast<ssize_t>(mine.size()),
                   "[output] cannot write the lock file ", path, ": ", std::strerror(errno));
    ::fsync(fd);
    return std::unique_ptr<OutputLock>(new OutputLock(dir, path, fd));
  }
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: a taker that opened it sees the inode change
  ::close(fd_);
}

}  // namespace colossal::checkpoint
