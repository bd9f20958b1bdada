#include "core/common/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/common/check.h"

namespace colossal::fs {

void make_dirs(const std::string& path) {
  COLOSSAL_CHECK(!path.empty(), "[fs] cannot create a directory with an empty name");
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty() || prefix == "/") continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      COLOSSAL_FAIL("[fs] cannot create directory '", prefix, "' (for '", path, "'): ", std::strerror(errno));
  }
  struct stat st {};
  COLOSSAL_CHECK(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "[fs] '", path,
                 "' exists and is not a directory");
}

namespace {
int remove_entry(const char* p, const struct stat*, int, struct FTW*) {
  return ::remove(p) == 0 ? 0 : errno;
}
}  // namespace

void remove_all(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    COLOSSAL_CHECK(errno == ENOENT, "[fs] cannot remove '", path, "': ", std::strerror(errno));
    return;
  }
  // Depth first, without following links.
  const int rc = ::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS);
  COLOSSAL_CHECK(rc == 0, "[fs] cannot remove '", path, "': ", std::strerror(rc > 0 ? rc : errno));
}

void copy_file(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  COLOSSAL_CHECK(in >= 0, "[fs] cannot read '", from, "': ", std::strerror(errno));
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    COLOSSAL_FAIL("[fs] cannot write '", to, "': ", std::strerror(e));
  }
  std::vector<char> buf(1 << 20);
  std::string error;
  for (;;) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      error = "reading '" + from + "': " + std::strerror(errno);
      break;
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        error = "writing '" + to + "': " + std::strerror(errno);
        break;
      }
      done += w;
    }
    if (!error.empty()) break;
  }
  ::close(in);
  if (::close(out) != 0 && error.empty()) error = "closing '" + to + "': " + std::strerror(errno);
  COLOSSAL_CHECK(error.empty(), "[fs] copying '", from, "' to '", to, "' failed ", error);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  COLOSSAL_CHECK(fd >= 0, "cannot read ", path, ": ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      COLOSSAL_CHECK(n == 0, "cannot read ", path, ": ", std::strerror(err));
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace colossal::fs
