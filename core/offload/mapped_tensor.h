#pragma once
// A tensor whose storage is a file on the offload disk mapped into memory (MAP_SHARED): the
// kernel pages its rows in when they are read and writes dirty pages back on its own, so a
// tensor larger than memory (an embedding table of 40 GB on a 24 GiB machine) lives on the disk
// while the pages in use stay cached. Random row access is advised (no read-ahead beyond the
// page); prefetch() asks the kernel to start reading pages a coming batch needs.
//
// The file is reserved and unlinked as create_reserved_file() does (reserved_file.h); the
// mapping and the descriptor go when the tensor's storage is freed.
#include <ATen/core/Tensor.h>

#include <string>

namespace colossal::offload {

/// `dir_flag`: how the user named the directory (for messages).
at::Tensor mapped_tensor(const std::string& dir, at::IntArrayRef shape, c10::ScalarType dtype,
                         const std::string& tag, const std::string& dir_flag = "offload_dir");

/// Starts reading (asynchronously, in the kernel) the pages holding `bytes` at `address` when
/// they belong to a mapping; harmless on ordinary memory.
void prefetch_pages(const void* address, int64_t bytes);

}  // namespace colossal::offload
