#include "core/offload/nvme_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/check.h"

namespace colossal::offload {
namespace {

constexpr int64_t kAlign = 4096;

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1LL << 30));
  return buf;
}

void check_tensor(const at::Tensor& t, const char* what) {
  COLOSSAL_CHECK(t.device().is_cpu() && t.is_contiguous(), "[offload] ", what,
                 ": expected a contiguous CPU tensor");
}

}  // namespace

NvmeStore::NvmeStore(const std::string& dir, int64_t bytes, const std::string& tag) : dir_(dir) {
  struct stat st {};
  COLOSSAL_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "[offload] nvme_dir '", dir,
                 "' is not an existing directory");
  COLOSSAL_CHECK(::access(dir.c_str(), W_OK) == 0, "[offload] nvme_dir '", dir, "' is not writable");
  reserved_ = (bytes + kAlign - 1) / kAlign * kAlign;
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    COLOSSAL_CHECK(free_bytes >= reserved_, "[offload] nvme_dir '", dir, "' has ", gib(free_bytes),
                   " free; this process needs ", gib(reserved_), " for offloaded state");
  }
  std::string path = dir + "/colossal-offload-" + std::to_string(::getpid()) + (tag.empty() ? "" : "-" + tag) + ".bin";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  COLOSSAL_CHECK(fd_ >= 0, "[offload] cannot create '", path, "': ", std::strerror(errno));
  ::unlink(path.c_str());  // gone from the directory; lives while the descriptor is open
  if (reserved_ > 0) {
    int rc = ::posix_fallocate(fd_, 0, reserved_);
    if (rc != 0) {
      ::close(fd_);
      fd_ = -1;
      COLOSSAL_FAIL("[offload] cannot reserve ", gib(reserved_), " in nvme_dir '", dir, "': ",
                    std::strerror(rc), rc == ENOSPC ? " (the disk is full)" : "");
    }
  }
}

NvmeStore::~NvmeStore() {
  ring_.wait_all();
  if (fd_ >= 0) ::close(fd_);
}

int64_t NvmeStore::allocate(int64_t bytes) {
  int64_t offset = used_;
  int64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  COLOSSAL_CHECK(used_ + size <= reserved_, "[offload] the reservation in '", dir_, "' (",
                 gib(reserved_), ") is too small for another ", bytes, " bytes");
  used_ += size;
  return offset;
}

uint64_t NvmeStore::write_async(const at::Tensor& src, int64_t offset) {
  check_tensor(src, "write");
  int64_t n = src.numel() * static_cast<int64_t>(src.element_size());
  COLOSSAL_CHECK(offset >= 0 && offset + n <= reserved_, "[offload] write outside the reservation");
  written_ += n;
  return ring_.write(fd_, src.data_ptr(), static_cast<size_t>(n), offset);
}

uint64_t NvmeStore::read_async(at::Tensor& dst, int64_t offset) {
  check_tensor(dst, "read");
  int64_t n = dst.numel() * static_cast<int64_t>(dst.element_size());
  COLOSSAL_CHECK(offset >= 0 && offset + n <= reserved_, "[offload] read outside the reservation");
  read_ += n;
  return ring_.read(fd_, dst.data_ptr(), static_cast<size_t>(n), offset);
}

}  // namespace colossal::offload
