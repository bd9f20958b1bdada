#include "core/offload/mapped_tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <ATen/Functions.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/common/check.h"
#include "core/offload/reserved_file.h"

namespace colossal::offload {

at::Tensor mapped_tensor(const std::string& dir, at::IntArrayRef shape, c10::ScalarType dtype,
                         const std::string& tag, const std::string& dir_flag) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  const int64_t bytes = std::max<int64_t>(elements * static_cast<int64_t>(c10::elementSize(dtype)), 1);
  const int fd = create_reserved_file({.dir = dir, .dir_flag = dir_flag, .bytes = bytes, .tag = tag});
  void* address = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file alive
  COLOSSAL_CHECK(address != MAP_FAILED, "[offload] cannot map ", format_gib(bytes), " of '", dir, "' for ", tag,
                 ": ", std::strerror(error));
  ::madvise(address, static_cast<size_t>(bytes), MADV_RANDOM);  // rows are read one by one
  return at::from_blob(address, shape, [bytes](void* p) { ::munmap(p, static_cast<size_t>(bytes)); },
                       at::TensorOptions().dtype(dtype));
}

void prefetch_pages(const void* address, int64_t bytes) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(address) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(address) + static_cast<uintptr_t>(bytes);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);  // EBADF etc. on plain memory: ignored
}

}  // namespace colossal::offload
