#include "core/offload/nvme_store.h"

#include <unistd.h>

#include "core/common/check.h"
#include "core/offload/reserved_file.h"

namespace colossal::offload {
namespace {

constexpr int64_t kAlign = 4096;

void check_tensor(const at::Tensor& t, const char* what) {
  COLOSSAL_CHECK(t.device().is_cpu() && t.is_contiguous(), "[offload] ", what,
                 ": expected a contiguous CPU tensor");
}

}  // namespace

NvmeStore::NvmeStore(const std::string& dir, int64_t bytes, const std::string& tag) : dir_(dir) {
  reserved_ = (bytes + kAlign - 1) / kAlign * kAlign;
  fd_ = create_reserved_file({.dir = dir, .dir_flag = "nvme_dir", .bytes = reserved_, .tag = tag});
}

NvmeStore::~NvmeStore() {
  ring_.wait_all();
  if (fd_ >= 0) ::close(fd_);
}

int64_t NvmeStore::allocate(int64_t bytes) {
  int64_t offset = used_;
  int64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  COLOSSAL_CHECK(used_ + size <= reserved_, "[offload] the reservation in '", dir_, "' (",
                 format_gib(reserved_), ") is too small for another ", bytes, " bytes");
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
